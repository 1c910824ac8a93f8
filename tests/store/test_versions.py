"""The versions state machine: every (state, event) a run meets, and the state it leads to.

`step` is pure, so each row is one call: the pointer (serving, building), the versions with
tables on disk, whether the build got to its chunks table; the event; the next state or the
refusal. `Database.move` writes the pointer and drops the versions the next state no longer
holds; the switch tests (tests/indexer/test_switch.py) run the same transitions on disk.
"""

from __future__ import annotations

import pytest

from docsearch.store.versions import (
    Cancel,
    DropUnused,
    Event,
    Refused,
    Run,
    Swap,
    Versions,
    VersionState,
    step,
)


def state(
    active: int, building: int | None, stored: set[int], started: bool = False
) -> VersionState:
    return VersionState(Versions(active, building), frozenset(stored), started)


PLAIN = Run()
NAMED_SERVING = Run(named=True, asks_serving=True)
NAMED_OTHER = Run(named=True, asks_serving=False)
NAMED_BUILDING = Run(named=True, asks_serving=False, asks_building=True)
SWITCH_NEW = Run(switch=True, asks_serving=False)
SWITCH_SAME = Run(switch=True, asks_serving=True)
SWITCH_RESUME = Run(switch=True, asks_serving=False, asks_building=True)

CASES: list[tuple[str, VersionState, Event, VersionState | str]] = [
    # a run with no switch and no encoder: the serving version, or the unfinished build resumed
    ("plain run, no switch", state(0, None, {0}), PLAIN, state(0, None, {0})),
    ("plain run resumes a build", state(0, 1, {0, 1}, True), PLAIN, state(0, 1, {0, 1}, True)),
    ("plain run forgets an empty build", state(0, 1, {0, 1}), PLAIN, state(0, None, {0})),
    ("plain run drops leftovers", state(2, None, {1, 2, 3}), PLAIN, state(2, None, {2})),
    # a run naming an encoder, without --switch
    ("named: the serving encoder", state(0, None, {0}), NAMED_SERVING, state(0, None, {0})),
    ("named: another encoder", state(0, None, {0}), NAMED_OTHER, Refused.MISMATCH),
    ("named: the build's encoder", state(0, 1, {0, 1}, True), NAMED_BUILDING,
     state(0, 1, {0, 1}, True)),
    ("named: serving, a build unfinished", state(0, 1, {0, 1}, True), NAMED_SERVING,
     Refused.UNFINISHED),
    ("named: serving, the build empty", state(0, 1, {0, 1}), NAMED_SERVING, state(0, None, {0})),
    ("named: a third encoder, a build unfinished", state(0, 1, {0, 1}, True), NAMED_OTHER,
     Refused.MISMATCH),
    # --switch
    ("switch: a new version", state(0, None, {0}), SWITCH_NEW, state(0, 1, {0})),
    ("switch: numbered past the serving", state(3, None, {3}), SWITCH_NEW, state(3, 4, {3})),
    ("switch: resumes the same build", state(0, 1, {0, 1}, True), SWITCH_RESUME,
     state(0, 1, {0, 1}, True)),
    ("switch: replaces another build", state(0, 1, {0, 1}, True), SWITCH_NEW,
     state(0, 2, {0})),
    ("switch: an empty build is not resumed", state(0, 1, {0, 1}), SWITCH_RESUME,
     state(0, 1, {0})),
    ("switch to the serving identity: cancels", state(0, 1, {0, 1}, True), SWITCH_SAME,
     state(0, None, {0})),
    ("switch to the serving identity, none building", state(0, None, {0}), SWITCH_SAME,
     state(0, None, {0})),
    # the end of a switch, giving one up, dropping what no pointer names
    ("swap", state(0, 1, {0, 1}, True), Swap(1), state(1, None, {1})),
    ("swap of a version not being built", state(0, 1, {0, 1}, True), Swap(2),
     Refused.NOT_BUILDING),
    ("swap with no build", state(1, None, {1}), Swap(1), Refused.NOT_BUILDING),
    ("cancel", state(0, 1, {0, 1}, True), Cancel(), state(0, None, {0})),
    ("cancel with no build", state(0, None, {0}), Cancel(), state(0, None, {0})),
    ("drop unused", state(1, 3, {0, 1, 2, 3}), DropUnused(), state(1, 3, {1, 3})),
    ("drop unused keeps a named build without tables", state(1, 2, {1}), DropUnused(),
     state(1, 2, {1})),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "event", "after"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_event_leads_to_its_state(
    before: VersionState, event: Event, after: VersionState | str
) -> None:
    if isinstance(after, str):
        with pytest.raises(Refused) as refused:
            step(before, event)
        assert refused.value.reason == after
    else:
        assert step(before, event) == after


def test_the_version_a_run_writes() -> None:
    assert state(0, None, {0}).writes == 0
    assert state(0, 2, {0, 2}, True).writes == 2
    assert state(0, 2, {0, 2}).pending is None  # nothing built yet: not worth resuming
    assert state(0, 2, {0, 2}, True).pending == 2
