"""Timing a few candidates against each other on a machine other work may share.

Why: one timing of each candidate, made while other jobs ran, once chose fp32 over an int8 that
was faster (issue: 1.11x measured, under the 1.15x bar), and the verdict was cached for good.
So `interleaved` times the candidates in rounds, the order rotating each round (none always
runs first, after another's cache traffic), and scores each by its median, with the median's
relative standard error as its noise. A run counts as busy when the process got less CPU time
than its threads could use in that wall time (under BUSY_SHARE of threads x wall: other
processes held the cores); busy runs are left out while MIN_QUIET quiet ones remain. More
rounds are timed (ROUNDS at a time, up to MAX_ROUNDS, and no more once BUDGET_S seconds of
wall time were spent on them) while the caller's verdict is not `settled` by the medians and
their noise, while a candidate has fewer than MIN_QUIET quiet runs, or while the machine looks
busy (most runs busy, or a 1-minute load average above the cores) and fewer than BUSY_ROUNDS
were timed. The budget matters because each candidate runs as indexing runs it (full windows,
~1 s for MiniLM fp32 on 2 quiet cores): under a 3x load, 15 rounds of five candidates took
7 minutes; a verdict cut short by the budget is not confident, so it stays provisional.

`Clock` is what the timing reads (wall time, process CPU time, load average, cores); tests hand
in a fake one. Not here: what is timed and what the verdict is (precision.py).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

ROUNDS = 5  # rounds timed at a time
BUSY_ROUNDS = 10  # at least this many when the machine looks busy
MAX_ROUNDS = 30  # the time budget stops a loaded machine's rounds well before this
BUDGET_S = 120.0  # wall seconds of timed runs after which no more rounds are started
MIN_QUIET = 3  # quiet runs a candidate needs before its busy runs are left out
BUSY_SHARE = 0.6  # a run that got less CPU than this share of threads x wall was crowded out
# The median's standard error for normal noise: 1.2533 sigma / sqrt(n), sigma = 1.4826 MAD.
_MEDIAN_SE = 1.2533 * 1.4826


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not on every platform
        return 0.0


@dataclass
class Clock:
    """What the timing reads: wall and process CPU seconds, the 1-minute load, the cores."""

    wall: Callable[[], float] = time.perf_counter
    cpu: Callable[[], float] = time.process_time
    load: Callable[[], float] = _load_average
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)


@dataclass
class Timings:
    """Every run's wall seconds per candidate, quiet and busy apart, and the loads seen."""

    quiet: dict[str, list[float]]
    busy: dict[str, list[float]]
    loads: list[float] = field(default_factory=list)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # every run's process CPU seconds
    rounds: int = 0

    def runs(self, name: str) -> list[float]:
        """The runs a candidate is scored on: its quiet ones, or all where too few are quiet."""
        quiet = self.quiet[name]
        return quiet if len(quiet) >= MIN_QUIET else quiet + self.busy[name]

    def median(self, name: str) -> float:
        return statistics.median(self.runs(name))

    def noise(self, name: str) -> float:
        """The relative standard error of the median (0 for a single run)."""
        runs = self.runs(name)
        middle = statistics.median(runs)
        if len(runs) < 2 or middle <= 0:
            return 0.0
        spread = statistics.median(abs(r - middle) for r in runs)
        return _MEDIAN_SE * spread / middle / len(runs) ** 0.5

    def busy_share(self) -> float:
        busy = sum(len(v) for v in self.busy.values())
        return busy / max(1, busy + sum(len(v) for v in self.quiet.values()))


def rotated(names: Sequence[str], round_no: int) -> list[str]:
    shift = round_no % len(names)
    return list(names[shift:]) + list(names[:shift])


Settled = Callable[[dict[str, float], dict[str, float]], bool]


def interleaved(
    run: Callable[[str], object],
    names: Sequence[str],
    settled: Settled,
    threads: int,
    clock: Clock | None = None,
) -> Timings:
    """Time `run(name)` for every name in rotating rounds until `settled(medians, noise)` says
    the verdict stands and the machine was quiet enough (see the module docstring)."""
    clock = clock or Clock()
    timings = Timings({n: [] for n in names}, {n: [] for n in names})
    started = clock.wall()
    while True:
        timings.loads.append(clock.load())
        for _ in range(ROUNDS):
            for name in rotated(names, timings.rounds):
                wall, cpu = clock.wall(), clock.cpu()
                run(name)
                wall, cpu = clock.wall() - wall, clock.cpu() - cpu
                crowded = cpu < BUSY_SHARE * threads * wall
                (timings.busy if crowded else timings.quiet)[name].append(wall)
                timings.cpu.setdefault(name, []).append(cpu)
            timings.rounds += 1
        timings.loads.append(clock.load())
        medians = {n: timings.median(n) for n in names}
        noise = {n: timings.noise(n) for n in names}
        busy = timings.busy_share() > 0.5 or max(timings.loads) > clock.cores + 0.5
        if timings.rounds >= MAX_ROUNDS or clock.wall() - started > BUDGET_S:
            return timings
        enough = all(len(timings.quiet[n]) >= MIN_QUIET for n in names)
        if enough and settled(medians, noise) and not (busy and timings.rounds < BUSY_ROUNDS):
            return timings
