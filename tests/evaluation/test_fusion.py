"""Fusion methods, chunk aggregators and the agreement guard by hand, and the settings that
select a fusion."""

from __future__ import annotations

import math

import pytest

from docsearch.config import Settings
from docsearch.fusion import (
    CHUNK_FUSION,
    DOCUMENT_RULES,
    LONG_QUERY_WORDS,
    Fusion,
    aggregate,
    blend,
    document_rule,
    overlap_at_10,
)

LEGS = {"dense": {"a": 0.8, "b": 0.4}, "lexical": {"b": 10.0, "c": 5.0}}


def test_maxnorm_divides_each_leg_by_its_best_score() -> None:
    fused = blend(LEGS, {"dense": 0.4, "lexical": 0.6}, "maxnorm")
    # a: 0.4 * 0.8/0.8; b: 0.4 * 0.4/0.8 + 0.6 * 10/10; c: 0.6 * 5/10
    assert fused == pytest.approx({"a": 0.4, "b": 0.8, "c": 0.3})
    assert CHUNK_FUSION(LEGS) == pytest.approx(fused)


def test_maxnorm_is_blind_to_pool_depth_and_score_scale() -> None:
    deeper = {
        "dense": {**LEGS["dense"], "z": 0.01},
        "lexical": {k: 7 * v for k, v in LEGS["lexical"].items()},
    }
    fused = CHUNK_FUSION(deeper)
    assert {k: fused[k] for k in "abc"} == pytest.approx(CHUNK_FUSION(LEGS))


def test_a_flat_leg_barely_reorders_a_peaked_one() -> None:
    fused = CHUNK_FUSION({"dense": {"x": 0.52, "y": 0.50}, "lexical": {"x": 3.0, "y": 12.0}})
    assert fused["y"] > fused["x"]  # the lexical winner stays on top


def test_maxnorm_ignores_a_leg_without_positive_scores() -> None:
    fused = blend({"dense": {"a": -0.2}, "lexical": {"a": 2.0, "b": 1.0}}, {}, "maxnorm")
    assert fused == pytest.approx({"a": 1.0, "b": 0.5})
    assert blend({"dense": {}}, {}, "maxnorm") == {}


def test_zscore_gives_a_missing_key_the_legs_lowest_z() -> None:
    legs = {"one": {"a": 1.0, "b": 2.0, "c": 3.0}, "two": {"b": 10.0, "d": 30.0}}
    fused = blend(legs, {"one": 0.5, "two": 0.5}, "zscore")
    # leg one: mean 2, std sqrt(2/3), so z = -sqrt(1.5), 0, +sqrt(1.5); leg two: z = -1, +1
    z = math.sqrt(1.5)
    assert fused == pytest.approx(
        {
            "a": 0.5 * -z + 0.5 * -1,
            "b": 0.0 + 0.5 * -1,
            "c": 0.5 * z + 0.5 * -1,
            "d": 0.5 * -z + 0.5,
        }
    )


def test_a_constant_leg_does_not_divide_by_zero() -> None:
    """A leg whose candidates all tie (one candidate, say) gives every key its full weight: a
    lone hit scores 1, not 0, and the other legs alone order the keys."""
    fused = blend({"one": {"a": 4.0, "b": 4.0}}, {}, "zscore")
    assert fused == {"a": 1.0, "b": 1.0}
    assert blend({"one": {"a": 4.0}}, {}, "minmax") == {"a": 1.0}
    for method in ("zscore", "minmax"):
        legs = {"tied": {"a": 2.0}, "other": {"a": 1.0, "b": 3.0, "c": 2.0}}
        alone = blend({"other": legs["other"]}, {"other": 0.5}, method)
        both = blend(legs, {"tied": 0.5, "other": 0.5}, method)
        assert both == pytest.approx({key: s + 0.5 for key, s in alone.items()})


def test_chunk_aggregators() -> None:
    chunks = {"x": [4.0, 3.0, 2.0, 1.0, 1.0, 0.5], "y": [8.0]}
    assert aggregate(chunks, "max") == {"x": 4.0, "y": 8.0}
    assert aggregate(chunks, "sum@5") == {"x": 11.0, "y": 8.0}  # 4 + 3 + 2 + 1 + 1
    assert aggregate(chunks, "sum@2") == {"x": 7.0, "y": 8.0}
    # lse@0.1 in units of the best chunk (8): y = 0.1 ln e^(8/0.8) = 1; x = 0.5 + 0.1 ln(1 +
    # e^-1.25 + e^-2.5 + 2 e^-3.75 + e^-4.375)
    assert aggregate(chunks, "lse@0.1") == pytest.approx({"x": 0.5356424, "y": 1.0}, rel=1e-6)
    with pytest.raises(ValueError, match="unknown chunk aggregator"):
        aggregate(chunks, "mean@3")


def test_a_soft_maximum_prefers_many_good_chunks_to_one_best() -> None:
    found = aggregate({"spread": [8.0] * 10, "single": [10.0]}, "lse@0.1")
    assert found["single"] == pytest.approx(1.0)
    assert found["spread"] == pytest.approx(0.8 + 0.1 * math.log(10))  # 1.030
    assert aggregate({"spread": [8.0] * 10, "single": [10.0]}, "max")["single"] == 10.0


def test_overlap_counts_the_shared_top_ten_out_of_ten() -> None:
    assert overlap_at_10({"a": 1.0, "b": 2.0}, {"a": 5.0}) == pytest.approx(0.1)
    first = {f"k{i:02d}": float(-i) for i in range(20)}  # k00 best
    last = {f"k{i:02d}": float(i) for i in range(20)}  # k19 best
    assert overlap_at_10(first, last) == 0.0
    assert overlap_at_10(first, first) == 1.0


LEXICAL_TOP = {f"l{i}": float(10 - i) for i in range(10)}


def test_the_agreement_guard_drops_a_dense_leg_that_shares_nothing() -> None:
    rule = Fusion("zscore", {"lexical": 1.0, "dense": 1.0}, tau=0.1)
    dense = {f"d{i}": 1.0 - i / 20 for i in range(10)}
    fused, agreement = rule.fuse({"lexical": LEXICAL_TOP, "dense": dense})
    assert agreement == 0.0
    # The dense-only keys stay candidates with the lexical leg's lowest z and nothing else.
    lowest = min(fused[f"l{i}"] for i in range(10))
    assert all(fused[f"d{i}"] == pytest.approx(lowest) for i in range(10))
    assert sorted(fused, key=lambda key: -fused[key])[:9] == [f"l{i}" for i in range(9)]


def test_the_agreement_factor_scales_only_the_dense_weights() -> None:
    rule = Fusion("minmax", {"lexical": 1.0, "dense": 1.0}, tau=0.5)
    dense = {"l0": 1.0, "l1": 0.9, **{f"d{i}": 0.5 - i / 100 for i in range(8)}}
    fused, agreement = rule.fuse({"lexical": LEXICAL_TOP, "dense": dense})
    assert agreement == pytest.approx(0.4)  # 2 shared of 10, / 0.5
    # l0: lexical (10 - 1) / 9 = 1, dense 1 -> 1 + 0.4; d0: dense (0.5 - 0.43) / 0.57
    assert fused["l0"] == pytest.approx(1.4)
    assert fused["d0"] == pytest.approx(0.4 * 0.07 / 0.57)
    assert Fusion("minmax", {"lexical": 1.0, "dense": 1.0}, tau=0.1).fuse(
        {"lexical": LEXICAL_TOP, "dense": dense}
    )[1] == pytest.approx(1.0)  # min(1, 0.2 / 0.1)


def test_the_guard_leaves_dense_alone_when_the_lexical_side_found_nothing() -> None:
    rule = Fusion("zscore", {"lexical": 1.0, "dense": 1.0}, tau=0.1)
    fused, agreement = rule.fuse({"lexical": {}, "dense": {"a": 0.9, "b": 0.1}})
    assert agreement == 1.0 and fused["a"] > fused["b"]


def test_one_weighted_leg_ranks_by_its_own_scores() -> None:
    rule = Fusion("minmax", {"doc_lexical": 0.7, "lexical": 0.3})
    assert rule.fuse({"lexical": {"a": 3.0, "b": 1.0}, "dense": {"c": 1.0}}) == (
        {"a": 3.0, "b": 1.0},
        None,
    )


def test_default_rules_and_unknown_methods() -> None:
    assert DOCUMENT_RULES["lexical"] == Fusion(
        "minmax", {"doc_lexical": 0.7, "lexical": 0.3}, aggregate={"lexical": "sum@5"}
    )
    hybrid = DOCUMENT_RULES["hybrid"]
    assert (hybrid.method, hybrid.tau, hybrid.aggregate) == ("zscore", None, {"lexical": "lse@0.1"})
    assert hybrid.weights == {"doc_lexical": 0.2, "lexical": 0.4, "doc_dense": 0.2, "dense": 0.2}
    assert hybrid.uses_documents and not CHUNK_FUSION.uses_documents
    assert hybrid.uses_dense and not DOCUMENT_RULES["lexical"].uses_dense
    with pytest.raises(ValueError, match="maxnorm, rrf, minmax, zscore"):
        Fusion("max")(LEGS)


def test_settings_choose_a_chunk_fusion_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().fusion() is None  # the default rules
    monkeypatch.setenv("DOCSEARCH_FUSION_METHOD", "rrf")
    assert Settings().fusion() == Fusion("rrf", {"dense": 0.4, "lexical": 0.6}, 60)
    monkeypatch.delenv("DOCSEARCH_FUSION_METHOD")
    monkeypatch.setenv("DOCSEARCH_DENSE_WEIGHT", "0.3")
    assert Settings().fusion() == Fusion("maxnorm", {"dense": 0.3, "lexical": 0.6}, 60)


def test_a_long_hybrid_query_takes_the_lexical_rule() -> None:
    """Word count by whitespace; the threshold itself is long; other modes never switch."""
    short = " ".join(["the"] + ["clause"] * (LONG_QUERY_WORDS - 2))  # a stop word: not key terms
    long = short + " termination"
    assert document_rule("hybrid", short) is DOCUMENT_RULES["hybrid"]
    assert document_rule("hybrid", long) is DOCUMENT_RULES["lexical"]
    assert document_rule("hybrid", "  ".join(long.split()) + "\n") is DOCUMENT_RULES["lexical"]
    assert document_rule("vector", long) is DOCUMENT_RULES["vector"]
    assert document_rule("lexical", short) is DOCUMENT_RULES["lexical"]
