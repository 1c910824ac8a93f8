"""Combining ranked lists from the dense and lexical legs into one ranking.

Pure functions over `{key: score}` dicts (higher is better). `maxnorm` (the default) blends
each leg's scores divided by that leg's best score, a convex combination with the theoretical
minimum 0 (Bruch et al., 2023, "An Analysis of Fusion Functions for Hybrid Retrieval"): a leg
whose scores are flat (a weak dense leg over long documents) barely reorders the other, and the
result does not depend on how deep the candidate pool was. `rrf` is reciprocal-rank fusion
(Cormack et al., 2009) with per-leg weights; `minmax` blends min-max normalised scores. All
return `{key: fused}`; `ranks` gives each leg's 1-based ranks for score breakdowns.
Not here: choosing weights (benchmarks/fusion.py tunes them on train/val queries only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Scores = Mapping[str, float]


def ranks(scores: Scores) -> dict[str, int]:
    """{key: score} -> {key: 1-based rank}, ties broken by key for determinism."""
    ordered = sorted(scores, key=lambda key: (-scores[key], key))
    return {key: i + 1 for i, key in enumerate(ordered)}


def rrf(legs: Mapping[str, Scores], weights: Mapping[str, float], k: int = 60) -> dict[str, float]:
    """sum over legs of weight / (k + rank); a key missing from a leg gets nothing from it."""
    fused: dict[str, float] = {}
    for leg, scores in legs.items():
        weight = weights.get(leg, 1.0)
        for key, rank in ranks(scores).items():
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    return fused


def minmax(legs: Mapping[str, Scores], weights: Mapping[str, float]) -> dict[str, float]:
    """sum over legs of weight * (score - min) / (max - min); missing keys count as the min."""
    fused: dict[str, float] = {}
    for leg, scores in legs.items():
        if not scores:
            continue
        low, high = min(scores.values()), max(scores.values())
        span = (high - low) or 1.0
        weight = weights.get(leg, 1.0)
        for key, score in scores.items():
            fused[key] = fused.get(key, 0.0) + weight * (score - low) / span
    return fused


def maxnorm(legs: Mapping[str, Scores], weights: Mapping[str, float]) -> dict[str, float]:
    """sum over legs of weight * score / (the leg's best score); missing keys get 0 from a leg.

    Scores are taken as >= 0 with 0 meaning "no match" (BM25; cosine of any useful match); a leg
    whose best score is not positive contributes nothing.
    """
    fused: dict[str, float] = {}
    for leg, scores in legs.items():
        best = max(scores.values(), default=0.0)
        scale = weights.get(leg, 1.0) / best if best > 0 else 0.0
        for key, score in scores.items():
            fused[key] = fused.get(key, 0.0) + scale * score
    return fused


METHODS = ("maxnorm", "rrf", "minmax")


@dataclass(frozen=True)
class Fusion:
    """How hybrid search fuses its legs: a method from METHODS and per-leg weights.

    The bare constructor is unweighted RRF; the product default is `DEFAULT_FUSION`.
    """

    method: str = "rrf"
    weights: dict[str, float] = field(default_factory=lambda: {"dense": 1.0, "lexical": 1.0})
    k: int = 60

    def __call__(self, legs: Mapping[str, Scores]) -> dict[str, float]:
        if self.method == "maxnorm":
            return maxnorm(legs, self.weights)
        if self.method == "minmax":
            return minmax(legs, self.weights)
        if self.method == "rrf":
            return rrf(legs, self.weights, self.k)
        raise ValueError(f"unknown fusion method {self.method!r} ({', '.join(METHODS)})")


# Chosen by benchmarks/fusion.py on qmsum, qmsum/summary2meeting (train+val) and scifact/train
# with all-MiniLM-L6-v2: the largest worst-case gain over the better single leg (results/fusion.md).
DEFAULT_FUSION = Fusion("maxnorm", {"dense": 0.4, "lexical": 0.6}, 60)
