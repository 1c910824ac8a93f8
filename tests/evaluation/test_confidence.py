"""Legs weighed by their confidence for the query (`Fusion.confidence`), recomputed by hand with
the statistics module: how far a leg's best candidate stands out, the weights it gives, and the
shipped rules that use it (the key-term rule and the short hybrid rule)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from docsearch.fusion import (
    BARE_WORDS_CONFIDENCE,
    BARE_WORDS_RULE,
    DOCUMENT_RULES,
    SHORT_RULE_CONFIDENCE,
    SPREAD_WORDS_RANK,
    TERM_LIST_CONFIDENCE,
    TERM_LIST_RULE,
    UNSURE_DENSE_RATIO,
    WHOLE_DOCUMENT_RULE,
    best_first,
    confidence,
    document_rule,
    is_bare_words,
    rank_of_best,
    weighed_by_confidence,
)
from docsearch.results import rule_name

OTHERS = [f"d{i}" for i in range(8)]


def z_scores(scores: dict[str, float]) -> dict[str, float]:
    mean, sd = statistics.fmean(scores.values()), statistics.pstdev(scores.values())
    return {key: (s - mean) / sd for key, s in scores.items()}


def by_hand(legs: dict[str, dict[str, float]], weights: dict[str, float], power: float) -> dict:
    """The fused z-scores with each weight times its leg's best z to `power`, scaled to the
    weights' total (every leg here returns every key)."""
    scaled = {leg: w * max(z_scores(legs[leg]).values()) ** power for leg, w in weights.items()}
    total = sum(weights.values()) / sum(scaled.values())
    keys = legs[next(iter(legs))]
    return {k: sum(total * scaled[leg] * z_scores(legs[leg])[k] for leg in weights) for k in keys}


def test_confidence_is_how_far_the_best_candidate_stands_out() -> None:
    # mean 1.5, population sd sqrt(0.75): the best stands 1.5 / 0.866 = sqrt(3) sd out
    assert confidence({"a": 3.0, "b": 1.0, "c": 1.0, "d": 1.0}) == pytest.approx(3**0.5)
    # a leg that cannot tell its candidates apart is no evidence for any of them
    assert confidence({"a": 2.0, "b": 2.0}) == 0.0
    assert confidence({"a": 5.0}) == 0.0
    assert confidence({}) == 0.0


def test_weights_follow_confidence_and_keep_their_total() -> None:
    legs = {"sure": {"a": 9.0, "b": 1.0, "c": 1.0, "d": 1.0}, "unsure": {"a": 2.0, "b": 1.0}}
    got = weighed_by_confidence(legs, {"sure": 0.3, "unsure": 0.3}, 2.0)
    # confidences sqrt(3) and 1: squared 3 : 1, the total 0.6 kept
    assert got == pytest.approx({"sure": 0.45, "unsure": 0.15})
    # an undecided leg drops out; where no leg decides, the weights stand
    assert weighed_by_confidence(
        {"flat": {"a": 1.0, "b": 1.0}, "sure": legs["sure"]}, {"flat": 0.5, "sure": 0.5}, 1.0
    ) == pytest.approx({"flat": 0.0, "sure": 1.0})
    flat = {"one": {"a": 1.0}, "two": {"a": 3.0, "b": 3.0}}
    assert weighed_by_confidence(flat, {"one": 0.2, "two": 0.8}, 1.5) == {"one": 0.2, "two": 0.8}


def test_the_key_term_rule_follows_the_leg_that_picks_one_document() -> None:
    """Whole-document BM25 puts x far above the rest; chunk BM25 finds passages in every
    candidate and y's best a little ahead of x's (a judgment that uses a few of the terms
    together). Weighed alike, y wins; weighed by confidence, the decisive leg's x does."""
    legs = {
        "doc_lexical": {**dict.fromkeys(OTHERS, 1.0), "x": 10.0, "y": 6.0},
        "lexical": {**{d: 4.0 + 0.25 * i for i, d in enumerate(OTHERS)}, "x": 5.0, "y": 6.0},
    }
    fused = TERM_LIST_RULE(legs)
    assert fused == pytest.approx(by_hand(legs, TERM_LIST_RULE.weights, TERM_LIST_CONFIDENCE))
    assert max(fused, key=fused.__getitem__) == "x"
    alike = replace(TERM_LIST_RULE, confidence=None)(legs)
    assert max(alike, key=alike.__getitem__) == "y"


def test_the_short_rule_gives_a_less_decisive_dense_side_less_weight() -> None:
    legs = {
        "doc_lexical": {**{d: 1.0 + 0.1 * i for i, d in enumerate(OTHERS)}, "x": 6.0, "y": 3.0},
        "lexical": {**{d: 2.0 + 0.1 * i for i, d in enumerate(OTHERS)}, "x": 4.0, "y": 3.0},
        "doc_dense": {**{d: 0.30 + 0.01 * i for i, d in enumerate(OTHERS)}, "x": 0.32, "y": 0.4},
        "dense": {**{d: 0.30 + 0.01 * i for i, d in enumerate(OTHERS)}, "x": 0.32, "y": 0.4},
    }
    rule = DOCUMENT_RULES["hybrid"]
    assert rule.confidence == SHORT_RULE_CONFIDENCE
    assert not rule.rare or not rule.rare.holds(legs)  # the rule's own weights, not rare terms'
    fused = rule(legs)
    assert fused == pytest.approx(by_hand(legs, rule.weights, SHORT_RULE_CONFIDENCE))
    # the dense legs (best 2.07 sd out) count for less than their 0.4, the lexical (2.6-2.8) more
    weights = weighed_by_confidence(legs, rule.weights, SHORT_RULE_CONFIDENCE)
    assert weights["doc_dense"] + weights["dense"] < 0.4 - 1e-3
    assert sum(weights.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("query", "rule"),
    [
        ("capital gains agricultural land", BARE_WORDS_RULE),  # a search box's words
        ("Improved Statistical Alignment Models", BARE_WORDS_RULE),
        ("COVID-19 vaccine efficacy", BARE_WORDS_RULE),
        ("income AND (capital gains OR transfer)", BARE_WORDS_RULE),  # operators join words
        ("income and capital gains", DOCUMENT_RULES["hybrid"]),  # "and" in a sentence
        ("pump", DOCUMENT_RULES["hybrid"]),  # one word: not measured as bare words
        ("the coolant pump", DOCUMENT_RULES["hybrid"]),  # a stop word: plain
        ("what is res judicata", DOCUMENT_RULES["hybrid"]),
        ("capital gains agricultural land income tax exemption", TERM_LIST_RULE),  # key terms
        ("capital gains, transfer, agricultural land", TERM_LIST_RULE),
    ],
)
def test_bare_words_weigh_their_legs_by_confidence_more_strongly(query: str, rule: object) -> None:
    assert document_rule("hybrid", query) is rule
    # key terms are bare words too (six or more, or a list), but their own rule comes first
    assert is_bare_words(query) is (rule is not DOCUMENT_RULES["hybrid"])
    assert document_rule("lexical", query) is DOCUMENT_RULES["lexical"]


def test_the_bare_words_rule_is_the_short_rule_with_a_stronger_power() -> None:
    """The same legs, weights and rare-terms switch; only the confidence power differs (and the
    switches to the key-term rule where the dense side is unsure and to whole-document BM25
    where the words are spread, below), so a search reports it as the hybrid rule."""
    short = DOCUMENT_RULES["hybrid"]
    plain = replace(BARE_WORDS_RULE, confidence=short.confidence, unsure=None, spread=None)
    assert plain == short
    assert BARE_WORDS_RULE.confidence == BARE_WORDS_CONFIDENCE > SHORT_RULE_CONFIDENCE
    assert rule_name(BARE_WORDS_RULE, "hybrid") == "hybrid"
    legs = {
        "doc_lexical": {**dict.fromkeys(OTHERS, 1.0), "x": 9.0, "y": 1.5},
        "lexical": {**dict.fromkeys(OTHERS, 1.0), "x": 6.0, "y": 2.0},
        "doc_dense": {**{d: 0.3 + 0.01 * i for i, d in enumerate(OTHERS)}, "x": 0.3, "y": 0.4},
        "dense": {**{d: 0.3 + 0.01 * i for i, d in enumerate(OTHERS)}, "x": 0.3, "y": 0.4},
    }
    strong = weighed_by_confidence(legs, short.weights, BARE_WORDS_CONFIDENCE)
    gentle = weighed_by_confidence(legs, short.weights, SHORT_RULE_CONFIDENCE)
    # the dense legs stand out less than whole-document BM25: the stronger power cuts them more
    assert strong["dense"] < gentle["dense"] < short.weights["dense"]
    assert not BARE_WORDS_RULE.unsure or not BARE_WORDS_RULE.unsure.holds(legs)
    assert BARE_WORDS_RULE(legs) == pytest.approx(by_hand(legs, short.weights, 1.0))


def test_bare_words_whose_dense_side_is_unsure_are_ranked_as_key_terms() -> None:
    """Whole-document BM25 singles out x (best z 3.6); the doc-mean vector leg's best, d7, stands
    out far less (1.7, under 0.55 x 3.6): the query is ranked by the key-term rule, the lexical
    legs alone, and the documents only the dense legs returned drop out. With a dense side as
    sure as BM25 the four legs rank it as before."""
    lexical = {
        "doc_lexical": {"x": 9.0, "y": 3.0, "z": 2.0, **{f"b{i}": 1.0 for i in range(12)}},
        "lexical": {"x": 5.0, "y": 4.0, "z": 1.0},
    }
    unsure_dense = {d: 0.30 + 0.01 * i for i, d in enumerate(OTHERS)} | {"x": 0.31, "y": 0.3}
    legs = {**lexical, "doc_dense": unsure_dense, "dense": unsure_dense}
    gate = BARE_WORDS_RULE.unsure
    assert gate is not None and gate.rule is TERM_LIST_RULE and gate.ratio == UNSURE_DENSE_RATIO
    assert confidence(unsure_dense) < UNSURE_DENSE_RATIO * confidence(lexical["doc_lexical"])
    assert gate.holds(legs)
    assert BARE_WORDS_RULE.resolved(legs) is TERM_LIST_RULE  # what a search reports
    assert rule_name(BARE_WORDS_RULE.resolved(legs), "hybrid") == "key-terms"
    fused = BARE_WORDS_RULE(legs)
    assert fused == pytest.approx(TERM_LIST_RULE(lexical))
    assert set(fused) == set(lexical["doc_lexical"])  # d0-d7 only came from the dense legs
    sure_dense = {"x": 0.9, "y": 0.2, "z": 0.21, **dict.fromkeys(OTHERS, 0.2)}
    sure = {**lexical, "doc_dense": sure_dense, "dense": sure_dense}
    assert not gate.holds(sure) and BARE_WORDS_RULE.resolved(sure) is BARE_WORDS_RULE
    assert BARE_WORDS_RULE(sure) == pytest.approx(by_hand_any(sure, BARE_WORDS_RULE))
    # no vector leg (a collection without vectors), or a BM25 leg that cannot tell its
    # candidates apart: nothing to compare, the rule stands
    assert not gate.holds(lexical)
    assert not gate.holds({**legs, "doc_lexical": {"x": 1.0, "y": 1.0}})


def by_hand_any(legs: dict[str, dict[str, float]], rule: object) -> dict[str, float]:
    """The four-leg rule with confidence^1 written out for legs that need not return every key
    (a key a leg lacks takes that leg's lowest z)."""
    weights = {leg: w for leg, w in DOCUMENT_RULES["hybrid"].weights.items() if leg in legs}
    sure = {leg: max(z_scores(legs[leg]).values()) for leg in weights}
    scaled = {leg: w * sure[leg] for leg, w in weights.items()}
    factor = sum(weights.values()) / sum(scaled.values())
    keys = set().union(*legs.values())
    out = dict.fromkeys(keys, 0.0)
    for leg, w in scaled.items():
        z = z_scores(legs[leg])
        for key in keys:
            out[key] += factor * w * z.get(key, min(z.values()))
    return out


def test_a_rule_reads_confidence_through_its_measure() -> None:
    """The shipped rules measure a leg's confidence as `confidence` (its best z); a rule given
    another measure weighs the legs by that. One that finds every leg equally sure leaves the
    weights as they are, so the key-term case above turns back from x to y."""
    legs = {
        "doc_lexical": {**dict.fromkeys(OTHERS, 1.0), "x": 10.0, "y": 6.0},
        "lexical": {**{d: 4.0 + 0.25 * i for i, d in enumerate(OTHERS)}, "x": 5.0, "y": 6.0},
    }
    assert all(rule.measure is confidence for rule in (TERM_LIST_RULE, BARE_WORDS_RULE))
    level = replace(TERM_LIST_RULE, measure=lambda scores: 2.0)(legs)
    assert level == pytest.approx(replace(TERM_LIST_RULE, confidence=None)(legs))
    assert max(level, key=level.__getitem__) == "y"
    assert max(TERM_LIST_RULE(legs), key=TERM_LIST_RULE(legs).__getitem__) == "x"


def spread_legs(above: int, dense_sure: bool = False) -> dict[str, dict[str, float]]:
    """Twenty documents; whole-document BM25 singles out x (9.0 against 1.0-1.9); chunk BM25
    ranks `above` documents ahead of x (their passages hold more of the words); the doc-mean
    vector leg barely tells the documents apart, or (`dense_sure`) singles out x."""
    others = [f"b{i:02d}" for i in range(19)]
    whole = {"x": 9.0, **{d: 1.0 + 0.05 * i for i, d in enumerate(others)}}
    chunks = {d: 5.0 - 0.1 * i if i < above else 1.0 - 0.01 * i for i, d in enumerate(others)}
    dense = {d: 0.30 + 0.001 * i for i, d in enumerate(others)} | {"x": 0.305}
    if dense_sure:
        dense = dict.fromkeys(others, 0.2) | {"x": 0.9}
    return {
        "doc_lexical": whole,
        "lexical": chunks | {"x": 2.0},
        "doc_dense": dense,
        "dense": dense,
    }


def test_bare_words_spread_through_their_best_document_are_ranked_by_it() -> None:
    """x is whole-document BM25's best but chunk BM25's 15th: no passage of it holds the words
    together. With the dense side less sure of its best than BM25, whole-document BM25 alone
    ranks (and the search names that rule); x 14th ranks so too, 13th does not; a dense side
    surer than BM25 keeps the four legs."""
    gate = BARE_WORDS_RULE.spread
    assert gate is not None and gate.rank == SPREAD_WORDS_RANK == 14
    assert gate.unsure.ratio == 1.0 and gate.unsure.rule is WHOLE_DOCUMENT_RULE
    legs = spread_legs(above=14)
    assert rank_of_best(legs["doc_lexical"], legs["lexical"]) == 15
    assert confidence(legs["doc_dense"]) < confidence(legs["doc_lexical"])
    assert gate.holds(legs) and BARE_WORDS_RULE.resolved(legs) is WHOLE_DOCUMENT_RULE
    assert BARE_WORDS_RULE(legs) == legs["doc_lexical"]  # BM25's own scores, its order
    assert rule_name(BARE_WORDS_RULE.resolved(legs), "hybrid") == "whole-document"
    assert gate.holds(spread_legs(above=13))  # x 14th: at the bound
    near = spread_legs(above=12)  # x 13th: a passage of it is near enough the top
    assert not gate.holds(near) and BARE_WORDS_RULE.resolved(near) is not WHOLE_DOCUMENT_RULE
    sure = spread_legs(above=14, dense_sure=True)
    assert confidence(sure["doc_dense"]) > confidence(sure["doc_lexical"])
    assert not gate.holds(sure) and BARE_WORDS_RULE.resolved(sure) is BARE_WORDS_RULE
    # chunk BM25 found no passage of x at all: as spread as it gets
    missing = {**legs, "lexical": {d: s for d, s in legs["lexical"].items() if d != "x"}}
    assert gate.holds(missing)
    # without a chunk BM25 leg or a vector leg there is nothing to compare: the rule stands
    assert not gate.holds({k: v for k, v in legs.items() if k != "lexical"})
    assert not gate.holds({k: v for k, v in legs.items() if k != "doc_dense"})


def test_the_rank_of_the_best_follows_best_first_ties() -> None:
    among = {"c": 3.0, "a": 3.0, "z": 3.0, "0": 1.0}
    assert rank_of_best({"a": 2.0, "b": 1.0}, among) == best_first(among).index("a") + 1 == 1
    assert rank_of_best({"z": 2.0}, among) == best_first(among).index("z") + 1 == 3
    assert rank_of_best({"0": 2.0}, among) == 4
    assert rank_of_best({"q": 2.0}, among) == float("inf")
