"""Leg evidence for the short hybrid rule: attempts that change the rule per query by what its
legs returned, and a stress test in which the dense legs answer another query.

Read by `python -m benchmarks.styles score` (results/styles.md, "Leg evidence"); it imports
styles.py, which imports it only when scoring. Every attempt starts from the rule of the previous
round (styles.TODAY: key terms by the lexical legs alone, other short queries with a 0.4 dense
share) and reads only what the legs return: the agreement of the lexical and dense sides'
top 10 (raw, or above what chance gives a collection that small), the doc-mean vector's best
cosine, each leg's best z, whole-document BM25's lead. The shipped one (fusion.RareTerms) is in
styles.py.

The stress test: each query keeps its lexical legs and takes the dense legs of another query of
the same sample and style (a seeded cycle), a dense side that is confident and wrong, which is
what a weak encoder on an unseen domain may look like. The held-out legal set cannot be seen;
a rule that knows a weak leg should lose less here than the rule it changes.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import styles as S

STRESS_SEED = 1


def chance_agreement(row: Any) -> float:
    """overlap@10 of the two sides above what chance gives among the row's documents: (o - e) /
    (1 - e), e = 10 / documents; 1 where there are 10 documents or fewer."""
    expected = min(1.0, 10 / len(row.keys)) if row.keys else 1.0
    return 1.0 if expected >= 1 else (row.feats["overlap"] - expected) / (1 - expected)


def sentences_weak_when(signal: Any, below: float, share: float) -> Any:
    """A short query with its dense legs whose `signal(row)` is below `below` takes dense share
    `share`."""

    def change(row: Any, weights: np.ndarray) -> np.ndarray:
        weak = weights[2:].any() and signal(row) < below
        return S.share_weights(share) if weak else weights

    return S.evidence(change)


def lists_dense_back(cosine: float, agreement: float, chance: bool) -> Any:
    """Key terms take the four legs (dense share 0.4) when the doc-mean vector's best cosine is
    at least `cosine` and the sides' top-10 agreement (chance-corrected if `chance`) at least
    `agreement`. This needs the query encoded for every list, to read the evidence."""

    def change(row: Any, weights: np.ndarray) -> np.ndarray:
        agree = chance_agreement(row) if chance else row.feats["overlap"]
        strong = row.feats["dense_cos"] >= cosine and agree >= agreement
        return S.share_weights(0.4) if not weights[2:].any() and strong else weights

    return S.evidence(change)


def by_spread(alpha: float) -> Any:
    """Each leg's weight times (its best z)^alpha, the weights' sum kept."""

    def change(row: Any, weights: np.ndarray) -> np.ndarray:
        scaled = weights * np.clip(row.z.max(axis=1), 1e-3, None) ** alpha
        return scaled * (weights.sum() / scaled.sum())

    return S.evidence(change)


def lexical_rule_when(lead: float) -> Any:
    """The lexical rule when whole-document BM25's best stands `lead` z above its second."""

    def change(row: Any, weights: np.ndarray) -> np.ndarray | None:
        best_two = np.sort(row.z[0])[-2:]
        return None if len(best_two) == 2 and best_two[1] - best_two[0] >= lead else weights

    return S.evidence(change)


def key_terms_weighed(weights: list[float] | None) -> Any:
    """Key terms (no dense legs under the rule before) take `weights` (HYBRID_LEGS order), or
    the lexical mode's rule (None): the scisummnet-acl quoted cell, issue 37's fourth round."""

    def change(row: Any, today: np.ndarray) -> np.ndarray | None:
        if today[2:].any():
            return today
        return None if weights is None else np.array(weights)

    return S.evidence(change)


def both(*attempts: Any) -> Any:
    """The first attempt's ranking where it differs from TODAY's, else the next one's."""
    today = S.ATTEMPTS[S.TODAY]

    def ranked(row: Any) -> np.ndarray:
        base = today(row)
        for one in attempts:
            got = one(row)
            if not np.array_equal(got, base):
                return got
        return base

    return ranked


def _overlap(row: Any) -> float:
    return float(row.feats["overlap"])


def _cosine(row: Any) -> float:
    return float(row.feats["dense_cos"])


def _dense_z(row: Any) -> float:
    return float(row.feats["dense_top"])


def attempts() -> dict[str, Any]:
    """The attempts by name (thresholds about the tuning split's 10th-40th percentiles for gates
    that drop the dense legs, 60th-85th for gates that restore them)."""
    shipped = S.ATTEMPTS[S.SHIPPED]
    return {
        **{
            f"sentences: overlap@10 < {t} -> d={d}": sentences_weak_when(_overlap, t, d)
            for t in (0.3, 0.5)
            for d in (0.0, 0.2)
        },
        **{
            f"sentences: overlap@10 above chance < {t} -> d={d}": sentences_weak_when(
                chance_agreement, t, d
            )
            for t in (0.05, 0.1, 0.2)
            for d in (0.0, 0.2)
        },
        **{
            f"sentences: best doc cosine < {t} -> d={d}": sentences_weak_when(_cosine, t, d)
            for t in (0.40, 0.45)
            for d in (0.0, 0.2)
        },
        **{
            f"sentences: dense best z < {t} -> d=0.2": sentences_weak_when(_dense_z, t, 0.2)
            for t in (3.3, 3.7)
        },
        **{
            f"key terms: dense back at cosine >= 0.55, overlap@10 >= {o}": lists_dense_back(
                0.55, o, chance=False
            )
            for o in (0.0, 0.5)
        },
        **{
            f"key terms: dense back at cosine >= {c}, above chance >= {o}": lists_dense_back(
                c, o, chance=True
            )
            for c in (0.55, 0.59)
            for o in (0.3, 0.5, 0.7)
        },
        **{f"short: legs weighted by best z^{a}": by_spread(a) for a in (0.25, 0.5, 1.0)},
        **{
            f"short: the lexical rule when doc BM25's best leads by {g} z": lexical_rule_when(g)
            for g in (4.0, 5.3)
        },
        "shipped + key terms: dense back at cosine >= 0.55, above chance >= 0.7": both(
            lists_dense_back(0.55, 0.7, chance=True), shipped
        ),
        **{
            f"shipped, else sentences: dense best z < {t} -> d=0.2": both(
                shipped, sentences_weak_when(_dense_z, t, 0.2)
            )
            for t in (3.0, 3.3)
        },
        **{
            f"shipped + key terms: zscore doc BM25 {d} : chunk BM25 {c}": both(
                key_terms_weighed([d, c, 0.0, 0.0]), shipped
            )
            for d, c in ((0.4, 0.6), (0.5, 0.5), (0.67, 0.33))
        },
        "shipped + key terms: zscore 0.3 / 0.6 + dense 0.05 / 0.05": both(
            key_terms_weighed([0.3, 0.6, 0.05, 0.05]), shipped
        ),
        "shipped + key terms: the lexical mode's rule": both(key_terms_weighed(None), shipped),
    }


def stress_rows(cache: Path) -> list[Any]:
    """Every collected sample's rows with each query's dense legs taken from another query of
    the same sample and style (cached beside the legs, as styles.cached_rows caches its own)."""
    rows = []
    for part in S.load_all(cache):
        path = S.rows_cache(cache, part, f"stress{STRESS_SEED}")
        if not path.is_file():
            path.write_bytes(pickle.dumps(_stressed(part)))
        rows += S.unpickled(path)
    return rows


def _stressed(part: dict[str, Any]) -> list[Any]:
    rows = []
    for style, got in part["styles"].items():
        order = list(range(len(part["queries"])))
        random.Random(STRESS_SEED).shuffle(order)
        partner = dict(zip(order, order[1:] + order[:1], strict=True))
        for i, (q, text, legs) in enumerate(
            zip(part["queries"], got["texts"], got["legs"], strict=True)
        ):
            other = got["legs"][partner[i]]
            mixed = {**legs, "dense": other["dense"], "doc_dense": other["doc_dense"]}
            rows.append(S.make_row(part, q, style, text, mixed))
    return rows
