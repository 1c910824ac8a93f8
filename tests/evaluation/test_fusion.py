"""The default fusion rule (maxnorm) by hand, and the settings that select it."""

from __future__ import annotations

import pytest

from docsearch.config import Settings
from docsearch.fusion import DEFAULT_FUSION, Fusion, maxnorm

LEGS = {"dense": {"a": 0.8, "b": 0.4}, "lexical": {"b": 10.0, "c": 5.0}}


def test_maxnorm_divides_each_leg_by_its_best_score() -> None:
    fused = maxnorm(LEGS, {"dense": 0.4, "lexical": 0.6})
    # a: 0.4 * 0.8/0.8; b: 0.4 * 0.4/0.8 + 0.6 * 10/10; c: 0.6 * 5/10
    assert fused == pytest.approx({"a": 0.4, "b": 0.8, "c": 0.3})


def test_maxnorm_is_blind_to_pool_depth_and_score_scale() -> None:
    deeper = {
        "dense": {**LEGS["dense"], "z": 0.01},
        "lexical": {k: 7 * v for k, v in LEGS["lexical"].items()},
    }
    fused = maxnorm(deeper, {"dense": 0.4, "lexical": 0.6})
    assert {k: fused[k] for k in "abc"} == pytest.approx(
        maxnorm(LEGS, {"dense": 0.4, "lexical": 0.6})
    )


def test_a_flat_leg_barely_reorders_a_peaked_one() -> None:
    legs = {"dense": {"x": 0.52, "y": 0.50}, "lexical": {"x": 3.0, "y": 12.0}}
    fused = maxnorm(legs, {"dense": 0.4, "lexical": 0.6})
    assert fused["y"] > fused["x"]  # the lexical winner stays on top


def test_maxnorm_ignores_a_leg_without_positive_scores() -> None:
    fused = maxnorm({"dense": {"a": -0.2}, "lexical": {"a": 2.0, "b": 1.0}}, {})
    assert fused == pytest.approx({"a": 1.0, "b": 0.5})
    assert maxnorm({"dense": {}}, {}) == {}


def test_default_fusion_and_unknown_methods() -> None:
    assert DEFAULT_FUSION.method == "maxnorm"
    assert DEFAULT_FUSION(LEGS) == pytest.approx(maxnorm(LEGS, DEFAULT_FUSION.weights))
    with pytest.raises(ValueError, match="maxnorm, rrf, minmax"):
        Fusion("max")(LEGS)


def test_settings_select_maxnorm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSEARCH_FUSION_METHOD", "maxnorm")
    monkeypatch.setenv("DOCSEARCH_DENSE_WEIGHT", "0.4")
    monkeypatch.setenv("DOCSEARCH_LEXICAL_WEIGHT", "0.6")
    assert Settings().fusion() == DEFAULT_FUSION
