"""benchmarks/styles.py: its fast path (each leg normalised once by the product's blend, a rule
as a weighted sum) ranks as docsearch.fusion does, checked on random legs without data."""

from __future__ import annotations

import importlib
import random
from types import ModuleType

import numpy as np
import pytest

from docsearch.fusion import (
    BARE_WORDS_RULE,
    TERM_LIST_RULE,
    WHOLE_DOCUMENT_RULE,
    Fusion,
    document_rule,
)

LEGS = ("lexical", "dense", "doc_lexical", "doc_dense", "reference")
QUERIES = (
    "coolant pump vibration in the night shift",  # a short sentence: the four-leg rule
    "capital gains; transfer of capital asset; agricultural land",  # a list: TERM_LIST_RULE
    " ".join(["word"] * 30),  # long: the lexical rule
    "coolant pump vibration",  # bare words: BARE_WORDS_RULE and the rules it hands over to
)


@pytest.fixture(scope="module")
def styles() -> ModuleType:
    return importlib.import_module("benchmarks.styles")


def _legs(rng: random.Random) -> dict[str, dict[str, float]]:
    docs = [f"doc{i:02d}" for i in range(40)]
    legs = {
        leg: {d: rng.uniform(0.1, 20.0) for d in rng.sample(docs, rng.randint(1, 30))}
        for leg in LEGS
    }
    if rng.random() < 0.5:  # a BM25 leg that singles one document out
        legs["doc_lexical"][rng.choice(sorted(legs["doc_lexical"]))] = 200.0
    # Both aggregations of chunk BM25 score the documents of the same chunks.
    legs["lexical_sum5"] = {d: s * rng.uniform(1.0, 5.0) for d, s in legs["lexical"].items()}
    return legs


def _top(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda key: (-scores[key], key))[:10]


def test_the_fast_path_ranks_as_the_product(styles: ModuleType) -> None:
    rng = random.Random(7)
    shipped = styles.ATTEMPTS[styles.SHIPPED]
    before = styles.ATTEMPTS["before (d=0.4 for every short query)"]
    handed: list[Fusion] = []  # the rules bare words were ranked by
    for i in range(120):
        text = QUERIES[i % len(QUERIES)]
        legs = _legs(rng)
        relevant = rng.choice(sorted(set().union(*legs.values())))
        query = styles.Query(f"set\0q{i}", "set", "test", text, {relevant: 1})
        row = styles.make_row({"sample": "set"}, query, "original", text, legs)
        # The product's own fusion, run by make_row, against the weighted sums.
        assert styles.fast_ndcg(row, shipped(row)) == pytest.approx(row.modes["hybrid"])
        assert styles.fast_ndcg(row, before(row)) == pytest.approx(row.modes["hybrid before"])
        product = styles.fuse(document_rule("hybrid", text), legs)
        if document_rule("hybrid", text) is BARE_WORDS_RULE:
            handed.append(BARE_WORDS_RULE.resolved(styles.rule_legs(BARE_WORDS_RULE, legs)))
        # (the lexical rule's scores are -inf for the keys only the dense legs found)
        fast = {k: s for k, s in zip(row.keys, shipped(row), strict=True) if np.isfinite(s)}
        assert _top(fast) == _top(product)
        # Any dense share: the weighted sum equals Fusion's zscore blend key by key.
        d = rng.choice((0.1, 0.25, 0.6))
        weights = dict(zip(styles.HYBRID_LEGS, styles.share_weights(d), strict=True))
        rule = Fusion("zscore", weights, aggregate={"lexical": "lse@0.1"})
        fused = styles.fuse(rule, legs)
        summed = styles.share_weights(d) @ row.z
        assert np.allclose(summed, [fused[k] for k in row.keys], atol=1e-9)
    # the random legs took each road bare words can take, so each was checked above
    assert {id(rule) for rule in handed} == {
        id(rule) for rule in (BARE_WORDS_RULE, TERM_LIST_RULE, WHOLE_DOCUMENT_RULE)
    }


def test_the_stress_rows_take_another_querys_dense_legs(styles: ModuleType) -> None:
    """styles_evidence's stress test: each query keeps its lexical legs and takes the dense legs
    of another query of the same style; agreement above chance is 0 at chance, 1 at full."""
    evidence = importlib.import_module("benchmarks.styles_evidence")
    rng = random.Random(3)
    queries = [
        styles.Query(f"set\0q{i}", "set", "test", QUERIES[0], {"doc00": 1}) for i in range(4)
    ]
    legs = [_legs(rng) for _ in queries]
    part = {
        "sample": "set",
        "queries": queries,
        "styles": {"original": {"texts": [QUERIES[0]] * 4, "legs": legs}},
    }
    rows = evidence._stressed(part)
    for row, own in zip(rows, legs, strict=True):
        lexical = set(own["doc_lexical"]) | set(own["lexical"])
        assert set(np.array(row.keys)[row.lexical_only]) == lexical
        dense = {k for k in row.keys if k not in lexical}
        others = [o for o in legs if o is not own]
        assert any(dense <= set(o["dense"]) | set(o["doc_dense"]) for o in others)
        assert row.feats["dense_cos"] in [max(o["doc_dense"].values()) for o in others]
    row = rows[0]
    n = len(row.keys)
    for overlap, expected in ((10 / n, 0.0), (1.0, 1.0)):
        row.feats["overlap"] = overlap
        assert evidence.chance_agreement(row) == pytest.approx(expected, abs=1e-12)
