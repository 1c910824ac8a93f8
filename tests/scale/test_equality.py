"""The engine-equality helper: near-tied hits may swap, nothing else may differ."""

from __future__ import annotations

import pytest

from tests.scale.equality import SCORE_TOLERANCE, assert_same_ranking

TIE = SCORE_TOLERANCE / 10  # two kernels' roundings of one score


def test_hits_tied_within_the_tolerance_may_come_in_either_order() -> None:
    a = [("x", 0.9), ("p", 0.5), ("q", 0.5 - TIE), ("y", 0.1)]
    b = [("x", 0.9), ("q", 0.5), ("p", 0.5 - TIE), ("y", 0.1)]
    assert_same_ranking(a, b)
    # At the cut-off a tie may keep the other chunk.
    assert_same_ranking([("x", 0.9), ("p", 0.5)], [("x", 0.9), ("q", 0.5 + TIE)])


@pytest.mark.parametrize(
    "b",
    [
        [("p", 0.9), ("x", 0.5), ("y", 0.1)],  # a real reordering: the scores moved with the ids
        [("x", 0.9), ("p", 0.5 + 10 * SCORE_TOLERANCE), ("y", 0.1)],  # a score changed
        [("x", 0.9), ("z", 0.5), ("y", 0.1)],  # another chunk, not tied with the last hit
        [("x", 0.9), ("p", 0.5)],  # fewer hits
    ],
)
def test_anything_else_is_a_difference(b: list[tuple[str, float]]) -> None:
    a = [("x", 0.9), ("p", 0.5), ("y", 0.1)]
    with pytest.raises(AssertionError):
        assert_same_ranking(a, b)
