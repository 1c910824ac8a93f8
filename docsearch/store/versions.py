"""A collection's versions: one state, and the one pure function that moves it.

An encoder or chunker switch builds the collection anew beside the version serving searches.
`<name>__versions` (a table without rows) records in its schema metadata which version serves
and which one a switch is building (`Versions`); a collection that never switched has no such
table (version 0 serves). Changing it is one Lance commit, so every reader sees the old pointer
or the new one: the swap at the end of a switch is atomic, and until then searches read the old
version only. A version no pointer names any more (retired by a swap, superseded or cancelled
build, a kill during a drop) is dropped right after the pointer changes.

`VersionState` is the pointer plus what is on disk (which versions have tables, whether the
build got as far as its chunks table); `step(state, event)` is every change a run can make:
`Run` (a run starts: serve, resume the unfinished build, start a new one, cancel one, or refuse),
`Swap`, `Cancel`, `DropUnused`. It reads and writes nothing: `Database.move` reads the state,
steps it, writes the pointer and drops what the new state no longer holds.
Not here: comparing encoders (`schema.CollectionMeta.same_encoder`), the tables themselves
(`database.py`), what a run does with the version it writes (`indexer/collection.py`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class Versions:
    """Which version of a collection serves searches, and which one a switch is building."""

    active: int = 0
    building: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class VersionState:
    """The pointer, the versions with tables on disk (complete or not), and whether the
    building version's chunks table exists (a build killed before it built nothing)."""

    pointer: Versions = field(default_factory=Versions)
    stored: frozenset[int] = frozenset()
    started: bool = False

    @property
    def pending(self) -> int | None:
        """The unfinished build worth resuming (its chunks table exists), if any."""
        return self.pointer.building if self.started else None

    @property
    def writes(self) -> int:
        """The version a run in this state writes: the one being built, else the serving one."""
        building = self.pointer.building
        return self.pointer.active if building is None else building


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """A run starts. `switch`: it asked to switch; `named`: it named an encoder. `asks_serving` /
    `asks_building`: the identity it asks for is the serving version's / the unfinished
    build's (with `switch`, encoder and chunking compared; else the named encoder alone)."""

    switch: bool = False
    named: bool = False
    asks_serving: bool = True
    asks_building: bool = False


@dataclass(frozen=True)
class Swap:
    """The build of `version` is done: it serves from now on."""

    version: int


@dataclass(frozen=True)
class Cancel:
    """Give up the unfinished build; the serving version stays."""


@dataclass(frozen=True)
class DropUnused:
    """Forget the versions the pointer does not name (their tables are dropped)."""


Event = Run | Swap | Cancel | DropUnused


class Refused(Exception):
    """The event cannot happen in this state; `reason` says why (one of the constants)."""

    MISMATCH = "the run asks for another encoder without switching"
    UNFINISHED = "the run names the serving encoder while a switch is unfinished"
    NOT_BUILDING = "the version swapped in is not the one being built"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- the transition --------------------------------------------------------------------------


def step(state: VersionState, event: Event) -> VersionState:
    """The state after `event`, or Refused. Every change of pointer drops what it leaves
    unnamed; a build that never got to its chunks table is forgotten when a run starts."""
    if isinstance(event, DropUnused):
        return _drop_unused(state)
    if isinstance(event, Cancel):
        return _drop_unused(_cancel(state))
    if isinstance(event, Swap):
        if state.pointer.building != event.version:
            raise Refused(Refused.NOT_BUILDING)
        return _drop_unused(VersionState(Versions(event.version), state.stored))
    return _run(state, event)


def _run(state: VersionState, run: Run) -> VersionState:
    state = _drop_unused(state)  # what a kill during the last drop left
    if state.pointer.building is not None and not state.started:
        state = _drop_unused(_cancel(state))  # a build killed before it built anything
    pending = state.pending is not None
    if run.switch:
        if run.asks_serving:  # back to the serving identity: an unfinished switch goes
            return _drop_unused(_cancel(state))
        if pending and run.asks_building:
            return state  # resumed
        number = max({state.pointer.active, *state.stored}) + 1
        return _drop_unused(VersionState(Versions(state.pointer.active, number), state.stored))
    if run.named:
        if pending and run.asks_building:
            return state  # resumed: the run named the encoder it builds with
        if not run.asks_serving:
            raise Refused(Refused.MISMATCH)
        if pending:
            raise Refused(Refused.UNFINISHED)
    return state  # the unfinished build resumes, or the serving version is written


def _cancel(state: VersionState) -> VersionState:
    return replace(state, pointer=Versions(state.pointer.active), started=False)


def _drop_unused(state: VersionState) -> VersionState:
    named = {state.pointer.active, state.pointer.building}
    return replace(state, stored=frozenset(v for v in state.stored if v in named))
