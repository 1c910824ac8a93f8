"""fusion.RareTerms on small score maps: a short hybrid query whose words whole-document BM25
matched in under half the documents the doc-mean vector leg returned weighs the two lexical legs
alike (0.3 : 0.3 instead of 0.2 : 0.4); otherwise, or without the vector leg, the rule is as
before. The expected scores are z-scores written out by hand, not docsearch.fusion's. The rule's
per-query confidence factor (tests/evaluation/test_confidence.py) scales whichever weights these
are; the tests set it aside (RULE) but for one that checks it applies on top of them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from docsearch.fusion import (
    DOCUMENT_RULES,
    RARE_TERMS,
    SHORT_RULE_CONFIDENCE,
    TERM_LIST_RULE,
    RareTerms,
    weighed_by_confidence,
)

RULE = replace(DOCUMENT_RULES["hybrid"], confidence=None)  # the weights before confidence

DOCS = [f"d{i}" for i in range(10)]
# The dense legs cannot tell d0 from d1; whole-document BM25 prefers d0, chunk BM25 d1.
DOC_DENSE = {d: 0.30 + 0.01 * i for i, d in enumerate(DOCS)} | {"d0": 0.52, "d1": 0.52}
DENSE = {d: 0.40 + 0.01 * i for i, d in enumerate(DOCS)} | {"d0": 0.61, "d1": 0.61}
CHUNK_BM25 = {"d0": 1.5, "d1": 2.5, "d2": 0.5}
RARE = {"d0": 12.0, "d1": 6.0, "d2": 1.0}  # 3 of 10 documents hold a query word
COMMON = RARE | {f"d{i}": 1.0 for i in range(3, 8)}  # 8 of 10


def _legs(doc_lexical: dict[str, float]) -> dict[str, dict[str, float]]:
    return {
        "doc_lexical": doc_lexical,
        "lexical": CHUNK_BM25,
        "doc_dense": DOC_DENSE,
        "dense": DENSE,
    }


def _z(scores: dict[str, float], keys: set[str]) -> dict[str, float]:
    """Each key's (score - mean) / std over the leg, a key the leg lacks at its lowest z."""
    mean = sum(scores.values()) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores.values()) / len(scores))
    z = {key: (s - mean) / std for key, s in scores.items()}
    return {key: z.get(key, min(z.values())) for key in keys}


def _by_hand(legs: dict[str, dict[str, float]], weights: dict[str, float]) -> dict[str, float]:
    keys = set().union(*legs.values())
    z = {leg: _z(scores, keys) for leg, scores in legs.items()}
    return {key: sum(w * z[leg][key] for leg, w in weights.items()) for key in keys}


def _order(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda key: (-scores[key], key))


def test_rare_words_weigh_the_lexical_legs_alike() -> None:
    legs = _legs(RARE)
    fused = RULE(legs)
    even = {"doc_lexical": 0.3, "lexical": 0.3, "doc_dense": 0.2, "dense": 0.2}
    expected = _by_hand(legs, even)
    assert fused == pytest.approx(expected, rel=1e-9, abs=1e-12)
    # Whole-document BM25's choice leads; the 2 : 1 rule would have put chunk BM25's first.
    assert _order(fused)[:2] == ["d0", "d1"]
    before = _by_hand(legs, {"doc_lexical": 0.2, "lexical": 0.4, "doc_dense": 0.2, "dense": 0.2})
    assert _order(before)[:2] == ["d1", "d0"]
    # the shipped rule scales the rare-terms weights by each leg's confidence for the query
    confident = weighed_by_confidence(legs, even, SHORT_RULE_CONFIDENCE)
    assert confident != pytest.approx(even)
    shipped = DOCUMENT_RULES["hybrid"](legs)
    assert shipped == pytest.approx(_by_hand(legs, confident), rel=1e-9, abs=1e-12)


def test_common_words_keep_the_short_rule() -> None:
    legs = _legs(COMMON)
    fused = RULE(legs)
    weights = {"doc_lexical": 0.2, "lexical": 0.4, "doc_dense": 0.2, "dense": 0.2}
    assert fused == pytest.approx(_by_hand(legs, weights), rel=1e-9, abs=1e-12)
    assert _order(fused)[:2] == ["d1", "d0"]


@pytest.mark.parametrize(
    ("legs", "holds"),
    [
        ({"doc_lexical": RARE, "doc_dense": DOC_DENSE}, True),
        ({"doc_lexical": {}, "doc_dense": DOC_DENSE}, True),  # no document holds a word
        ({"doc_lexical": COMMON, "doc_dense": DOC_DENSE}, False),
        ({"doc_lexical": {f"d{i}": 1.0 for i in range(5)}, "doc_dense": DOC_DENSE}, False),
        ({"doc_lexical": RARE}, False),  # no vector leg: nothing to count the documents by
        ({"doc_lexical": RARE, "doc_dense": {}}, False),
        ({"doc_dense": DOC_DENSE}, False),  # no whole-document BM25 leg
    ],
)
def test_when_the_words_count_as_rare(legs: dict[str, dict[str, float]], holds: bool) -> None:
    assert RARE_TERMS.holds(legs) is holds
    assert not RareTerms(0.2, RARE_TERMS.weights).holds(legs) or not legs["doc_lexical"]


def test_without_the_dense_legs_the_lexical_legs_keep_their_ratio() -> None:
    """A hybrid search whose dense legs are missing has no vector leg to count by; the lexical
    legs rank as they did (and key terms, whose rule weighs no dense leg, never change)."""
    legs = {"doc_lexical": RARE, "lexical": CHUNK_BM25}
    fused = RULE(legs)
    assert fused == pytest.approx(_by_hand(legs, {"doc_lexical": 0.2, "lexical": 0.4}))
    assert TERM_LIST_RULE.rare is None
    assert DOCUMENT_RULES["lexical"].rare is None and DOCUMENT_RULES["vector"].rare is None
