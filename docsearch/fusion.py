"""Combining ranked lists from the dense and lexical legs into one ranking.

Pure functions over `{key: score}` dicts (higher is better). `rrf` is reciprocal-rank fusion
(Cormack et al., 2009) with per-leg weights; `minmax` blends min-max normalised scores. Both
return `{key: fused}`; `ranks` gives each leg's 1-based ranks for score breakdowns.
Not here: choosing weights (see `docsearch eval` and benchmarks/quality.py).
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


@dataclass(frozen=True)
class Fusion:
    """How hybrid search fuses its legs: method 'rrf' or 'minmax', and per-leg weights."""

    method: str = "rrf"
    weights: dict[str, float] = field(default_factory=lambda: {"dense": 1.0, "lexical": 1.0})
    k: int = 60

    def __call__(self, legs: Mapping[str, Scores]) -> dict[str, float]:
        if self.method == "minmax":
            return minmax(legs, self.weights)
        if self.method == "rrf":
            return rrf(legs, self.weights, self.k)
        raise ValueError(f"unknown fusion method {self.method!r} (rrf or minmax)")
