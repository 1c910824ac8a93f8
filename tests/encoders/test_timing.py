"""The automatic choice's timing (timing.py, precision.time_precisions) with a fake clock.

A fake machine runs each candidate in a known time, scrambled by noise, by runs that other
processes crowd out (longer wall time, less CPU time than the threads could use) and by a load
average: what a shared machine does to a calibration. The verdict must still be the fastest
candidate that keeps the gate, and a verdict the noise could flip must be timed again and left
provisional. No real time is measured.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from docsearch.encoders import int8, precision, timing

THREADS = 2
# int8 is 1.25x fp32 (over the 1.15 bar); bf16 and onnx-fp32 are not; onnx-int8 is fastest
# but fails the gate: the verdict is int8.
SECONDS = {"fp32": 1.0, "bf16": 0.95, "int8": 0.8, "onnx-fp32": 0.93, "onnx-int8": 0.6}
COSINES = {"fp32": 1.0, "bf16": 0.99995, "int8": 0.9994, "onnx-fp32": 1.0, "onnx-int8": 0.991}
TIMED = [n for n in SECONDS if COSINES[n] >= precision.MIN_COSINE]  # the gate's failures are not


class FakeMachine:
    """Runs take SECONDS x (1 +- noise); a crowded run takes `slowdown` times longer and gets
    `share` of the CPU its threads could use."""

    def __init__(
        self,
        seconds: dict[str, float],
        *,
        noise: float,
        seed: int,
        crowded: float = 0.0,
        slowdown: float = 3.0,
        load: float = 0.5,
    ) -> None:
        self.seconds, self.noise, self.crowded, self.slowdown = seconds, noise, crowded, slowdown
        self.random = random.Random(seed)
        self.wall = self.cpu = 0.0
        self.runs = 0
        self.clock = timing.Clock(
            wall=lambda: self.wall, cpu=lambda: self.cpu, load=lambda: load, cores=2
        )

    def run(self, name: str) -> torch.Tensor:
        self.runs += 1
        took = self.seconds[name] * (1 + self.random.uniform(-self.noise, self.noise))
        share = 0.95
        if self.random.random() < self.crowded:
            took, share = took * self.slowdown, 0.35
        self.wall += took
        self.cpu += took * THREADS * share
        return vectors(name)


def vectors(name: str) -> torch.Tensor:
    """Rows whose mean cosine to fp32's is COSINES[name] (to ~1e-6)."""
    base = torch.eye(4, 8)
    angle = torch.tensor(COSINES[name]).clamp(max=1.0).acos()
    return base * angle.cos() + torch.roll(base, 4, dims=1) * angle.sin()


def measured(machine: FakeMachine, names: Sequence[str] = tuple(SECONDS)) -> dict:
    torch.set_num_threads(THREADS)
    return precision.time_precisions(machine.run, {n: n for n in names}, machine.clock)


def fastest_of_two_rounds(machine: FakeMachine) -> dict[str, dict[str, float]]:
    """The choice's former timing: each candidate scored by the faster of two runs."""
    seconds: dict[str, list[float]] = {name: [] for name in SECONDS}
    for _ in range(2):
        for name in SECONDS:
            start = machine.wall
            machine.run(name)
            seconds[name].append(machine.wall - start)
    return {n: {"seconds": min(s), "cosine": COSINES[n]} for n, s in seconds.items()}


def test_noisy_timings_choose_the_fastest_candidate_that_keeps_the_gate() -> None:
    """+-10% noise on every run, ten fresh machines: the medians of interleaved rounds pick int8
    on every one; the faster of two runs each (the former timing) is fooled on some."""
    chosen, former = [], []
    for seed in range(10):
        found = measured(FakeMachine(SECONDS, noise=0.1, seed=seed))
        assert found["onnx-int8"]["cosine"] < precision.MIN_COSINE <= found["int8"]["cosine"]
        chosen.append(precision.decide(found))
        former.append(
            precision.decide(fastest_of_two_rounds(FakeMachine(SECONDS, noise=0.1, seed=seed)))
        )
    assert chosen == ["int8"] * 10
    assert former.count("int8") < 10  # the scenario is one that fooled the former timing


@pytest.mark.parametrize("seed", range(5))
def test_runs_other_processes_crowd_out_are_left_out(seed: int) -> None:
    """A third of the runs take 3x as long with a third of the CPU: scored by all runs, a
    candidate unlucky in the draw would lose; scored by its quiet runs, the verdict holds."""
    machine = FakeMachine(SECONDS, noise=0.1, seed=seed, crowded=0.33)
    found = measured(machine)
    assert sum(f["busy_runs"] for f in found.values()) > 0
    timed = {n: f for n, f in found.items() if f["runs"]}  # onnx-int8 fails the gate: untimed
    assert all(f["seconds"] < SECONDS[n] * 1.15 for n, f in timed.items())  # no crowded median
    assert precision.decide(found) == "int8"


def test_a_verdict_within_the_noise_is_timed_again_and_not_confident() -> None:
    """int8 right at the bar (1.15x): the noise could flip the verdict, so every round allowed
    is timed and the verdict is not confident."""
    near = {"fp32": 1.0, "int8": 1 / precision.MIN_SPEEDUP}
    machine = FakeMachine(near, noise=0.1, seed=1)
    found = measured(machine, tuple(near))
    assert machine.runs == len(near) * (timing.MAX_ROUNDS + 1)  # + one warm-up call each
    assert not precision.confident(found)


def test_a_clear_verdict_on_a_quiet_machine_stops_after_the_first_rounds() -> None:
    machine = FakeMachine(SECONDS, noise=0.02, seed=0)
    found = measured(machine)
    assert machine.runs == len(SECONDS) + len(TIMED) * timing.ROUNDS  # + one set-up call each
    assert precision.confident(found) and precision.decide(found) == "int8"


def test_a_loaded_machine_is_timed_for_longer_even_when_the_verdict_looks_clear() -> None:
    machine = FakeMachine(SECONDS, noise=0.02, seed=0, load=4.0)  # 4 runnable on 2 cores
    found = measured(machine)
    assert machine.runs == len(SECONDS) + len(TIMED) * timing.BUSY_ROUNDS
    assert precision.decide(found) == "int8"


def test_rounds_rotate_so_no_candidate_always_runs_first() -> None:
    names = ["a", "b", "c"]
    assert sorted(timing.rotated(names, r)[0] for r in range(3)) == names


def test_a_provisional_verdict_is_measured_again_by_the_next_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.setattr(int8, "kernel_here", lambda: "dot")
    calls: list[int] = []

    def measure(names: Sequence[str]) -> dict[str, dict[str, float]]:
        calls.append(1)
        return {  # int8 1.25x but +-20%: not confident
            "fp32": {"seconds": 1.0, "cosine": 1.0, "noise": 0.2},
            "int8": {"seconds": 0.8, "cosine": 0.9995, "noise": 0.2},
        }

    key = {"cpu": "test", "model": "m", "threads": 2}
    for _process in range(precision.PROVISIONAL_TRIES + 2):
        monkeypatch.setattr(precision, "_CHOSEN", {})  # a fresh process
        assert precision.choose_precision("cpu", key, measure) == "int8"
    assert len(calls) == precision.PROVISIONAL_TRIES  # then the last verdict is kept
    [saved] = (tmp_path / "calibration").glob("precision-*.json")
    record = json.loads(saved.read_text())
    assert record["confident"] is False and record["tries"] == precision.PROVISIONAL_TRIES


def test_a_verdict_timed_on_a_crowded_machine_is_provisional() -> None:
    """Most runs crowded out: the verdict may be the load's, not the machine's, so it is not
    kept for good however clear it looks."""
    crowded = measured(FakeMachine(SECONDS, noise=0.02, seed=0, crowded=0.9))
    assert precision.crowded(crowded)
    quiet = measured(FakeMachine(SECONDS, noise=0.02, seed=0))
    assert not precision.crowded(quiet) and precision.confident(quiet)


def test_under_a_two_process_load_fresh_processes_still_pick_the_fastest_that_keeps_the_gate() -> (
    None
):
    """Issue 39's acceptance 2, the logic: ten fresh processes, each with a 2-process load
    beside it (load average 4 on 2 cores, half of the runs crowded out and 3x slower, +-10% on
    the rest): the fastest candidate within the gate (int8) in at least 9 of them. (With at
    most 15 rounds, as before, 8 of these 10 picked int8; at +-15% noise 8 of 10 still do.)"""
    loaded = [FakeMachine(SECONDS, noise=0.1, seed=s, crowded=0.5, load=4.0) for s in range(10)]
    chosen = [precision.decide(measured(machine)) for machine in loaded]
    assert chosen.count("int8") >= 9


def test_a_candidate_that_fails_the_gate_is_not_timed_after_its_first_call() -> None:
    machine = FakeMachine(SECONDS, noise=0.02, seed=0)
    found = measured(machine)
    assert found["onnx-int8"]["runs"] == 0 and found["int8"]["runs"] >= timing.ROUNDS
    assert precision.decide(found) == "int8"


def test_slow_candidates_stop_at_the_time_budget_and_the_verdict_stays_provisional() -> None:
    """Each run as long as indexing's sample takes on a loaded machine, the verdict within the
    noise: rounds stop once the budget is spent, not at MAX_ROUNDS, and it is not confident."""
    slow = {"fp32": 10.0, "int8": 10.0 / precision.MIN_SPEEDUP}
    machine = FakeMachine(slow, noise=0.1, seed=1)
    found = measured(machine, tuple(slow))
    assert timing.ROUNDS * sum(slow.values()) * 1.1 < timing.BUDGET_S  # one block fits
    assert found["fp32"]["runs"] == 2 * timing.ROUNDS  # the second block crossed the budget
    assert not precision.confident(found)
