"""The one training loop: every recipe (fine-tuning, MNTP, SimCSE, the NV-Embed stages, M2
pretraining) takes its optimiser steps here.

A recipe (`Recipe`) supplies what to train (optimiser parameter groups), the data of each step
(its micro-batches) and a loss that calls the model. The loop does the rest: AdamW; a learning
rate that warms up, then stays or falls linearly to 0; gradient accumulation over the
micro-batches; the gradient norm clipped; bf16 autocast when asked; progress reports; a time
limit; checkpoints and resume. A checkpoint (every N steps and on Ctrl-C, into `run_dir`) holds
the trained parameters, optimiser, schedule, RNG and position; a recipe whose batches depend on
the step alone then resumes exactly where an uninterrupted run would be. Under a time limit the
run ends, and the decay is aimed, at the step nearest the deadline, re-estimated after every step.
Not here: models, data and losses (the recipes, `losses.py`), evaluation, model cards (`card.py`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from docsearch.errors import UsageError

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
KEEP_CHECKPOINTS = 2


@dataclass
class Recipe:
    """What a training method gives the loop."""

    params: list[dict[str, Any]]  # optimiser groups; a group may set its own lr, weight_decay
    batches: Callable[[int], Sequence[Any]]  # step -> its micro-batches (one optimiser step)
    loss: Callable[[Any], torch.Tensor]  # micro-batch -> scalar loss, by calling the model


@dataclass
class LoopSettings:
    """How the loop optimises; the defaults are a constant learning rate (the LLM2Vec steps)."""

    steps: int  # planned optimiser steps
    lr: float  # groups without their own lr
    warmup: float = 0.0  # share of the steps with a rising learning rate
    decay: bool = False  # fall linearly to 0 at the last step (else constant after warm-up)
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    max_grad_norm: float = 1.0
    max_minutes: float | None = None  # of training time; the run stops (and saves) then
    checkpoint_every: int = 25  # steps, when the loop has a run folder
    seed: int = 0  # of the dropout RNG at a fresh start: equal settings give equal runs
    bf16: bool = False  # autocast the losses (see `bf16_by_default`)


@dataclass
class StepReport:
    step: int
    total: int
    loss: float
    mean_loss: float  # over the last 20 steps
    lr: float
    seconds: float  # training time so far (all sessions)
    eta: float  # seconds left, within the time limit


class Reporter(Protocol):
    def status(self, message: str) -> None: ...

    def step(self, report: StepReport) -> None: ...


class QuietReporter:
    def status(self, message: str) -> None:
        log.info(message)

    def step(self, report: StepReport) -> None: ...


@dataclass
class LoopState:
    step: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0  # training time over all sessions
    stopped: str = ""  # why the run ended before its planned steps, if it did


@dataclass
class TrainResult:
    """What a recipe run did: where its output is, its losses and settings, how long it took."""

    out_dir: Path
    losses: list[float]
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)


def bf16_by_default(device: str) -> bool:
    """bf16 autocast pays off where the hardware computes in bf16 (the encoders' own rule)."""
    from docsearch.encoders.device import resolve_dtype

    return resolve_dtype(device) == torch.bfloat16


def local_ref(ref: str) -> str:
    """An existing local path as an absolute path (so a trained folder can name its base)."""
    path = Path(ref).expanduser()
    return str(path.resolve()) if path.exists() else ref


# ---------------------------------------------------------------------------------------------
# Schedule


def schedule(planned: int, warmup: float, decay: bool = True) -> Callable[[int], float]:
    """Learning-rate factor: rises over the first `warmup` share of steps, then stays at 1 or
    falls linearly to 0 at step `planned`."""
    warm = int(planned * warmup)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (planned - step) / max(1, planned - warm)) if decay else 1.0

    return factor


def aimed_horizon(planned: int, state: LoopState, max_minutes: float | None) -> int:
    """Under a time limit: the step nearest the deadline at the pace so far (at most `planned`,
    at least the steps already taken)."""
    if max_minutes is None or not state.step:
        return planned
    per_step = max(state.seconds / state.step, 1e-9)
    left = max_minutes * 60 - state.seconds
    fits = state.step + (int(left / per_step + 0.5) if left > 0 else 0)
    return max(state.step, min(planned, fits))


# ---------------------------------------------------------------------------------------------
# Checkpoints


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (a partial one has no state file yet)."""
    found = [p for p in run_dir.glob("step-*") if (p / STATE_FILE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def save_checkpoint(run_dir: Path, blob: dict[str, Any], state: LoopState) -> Path:
    """Write step-N atomically (a partial folder renamed into place); keep the last two."""
    target = run_dir / f"step-{state.step:06d}"
    partial = run_dir / f".{target.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    torch.save(blob, partial / STATE_FILE)
    (partial / "loop.json").write_text(json.dumps(asdict(state)))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    for old in checkpoint_dirs(run_dir)[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------------------------
# The loop


class Loop:
    """Optimiser steps over a recipe, with checkpoints, a time limit and progress."""

    def __init__(
        self,
        recipe: Recipe,
        settings: LoopSettings,
        reporter: Reporter | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.recipe, self.settings, self.run_dir = recipe, settings, run_dir
        self.reporter = reporter or QuietReporter()
        self.params = [p for group in recipe.params for p in group["params"]]
        if not self.params:
            raise UsageError("nothing to train: the model has no trainable parameters")
        self.optimiser = torch.optim.AdamW(
            recipe.params, lr=settings.lr, betas=settings.betas, eps=settings.eps,
            weight_decay=settings.weight_decay,
        )  # fmt: skip
        self.horizon = settings.steps  # the step the learning rate is aimed at (`aimed_horizon`)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimiser, self._factor)
        self.device_type = "cuda" if self.params[0].device.type == "cuda" else "cpu"
        self._dirty = False  # weights changed but the step is not yet counted

    def _factor(self, step: int) -> float:
        return schedule(self.horizon, self.settings.warmup, self.settings.decay)(step)

    def _start(self, resume: bool) -> LoopState:
        found = checkpoint_dirs(self.run_dir) if resume and self.run_dir else []
        if not found:
            torch.manual_seed(self.settings.seed)
            return LoopState()
        self.reporter.status(f"resuming from {found[-1].name}")
        blob = torch.load(found[-1] / STATE_FILE, weights_only=True)
        with torch.no_grad():
            for param, saved in zip(self.params, blob["params"], strict=True):
                param.copy_(saved)
        self.optimiser.load_state_dict(blob["optimiser"])
        self.scheduler.load_state_dict(blob["scheduler"])
        torch.set_rng_state(blob["rng"])
        return LoopState(**json.loads((found[-1] / "loop.json").read_text()))

    def _save(self, state: LoopState) -> None:
        if self.run_dir is None:
            return
        blob = {
            "params": [p.detach().clone() for p in self.params],
            "optimiser": self.optimiser.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": torch.get_rng_state(),
        }
        save_checkpoint(self.run_dir, blob, state)

    def _accumulate(self, step: int) -> float:
        """Forward and backward over the step's micro-batches; returns the step's loss."""
        parts = self.recipe.batches(step)
        total = 0.0
        for part in parts:
            with torch.autocast(self.device_type, torch.bfloat16, enabled=self.settings.bf16):
                loss = self.recipe.loss(part)
            weighted = loss / len(parts)
            weighted.backward()
            total += float(weighted.detach())
        return total

    def _update(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.params, self.settings.max_grad_norm)
        self._dirty = True
        self.optimiser.step()
        self.optimiser.zero_grad(set_to_none=True)

    def run(self, resume: bool = False) -> LoopState:
        state = self._start(resume)
        saved, every = state.step, self.settings.checkpoint_every
        try:
            while state.step < self.horizon and not self._out_of_time(state):
                started = time.perf_counter()
                loss = self._accumulate(state.step)
                self._update()
                state.step += 1
                state.losses.append(loss)
                state.seconds += time.perf_counter() - started
                self.horizon = aimed_horizon(self.settings.steps, state, self.settings.max_minutes)
                self.scheduler.step()  # the next step's learning rate, aimed at the horizon
                self._dirty = False
                self.reporter.step(self._report(state))
                if state.step % every == 0 and state.step < self.horizon:
                    self._save(state)
                    saved = state.step
        except KeyboardInterrupt:
            if state.step > saved and not self._dirty:
                self._save(state)
            raise
        if state.step < self.settings.steps:
            state.stopped = f"stopped by the {self.settings.max_minutes} minute limit"
        return state

    def _out_of_time(self, state: LoopState) -> bool:
        limit = self.settings.max_minutes
        return limit is not None and state.seconds >= limit * 60

    def _report(self, state: LoopState) -> StepReport:
        per_step = state.seconds / max(1, state.step)
        eta = per_step * (self.horizon - state.step)
        if self.settings.max_minutes is not None:
            eta = min(eta, max(0.0, self.settings.max_minutes * 60 - state.seconds))
        recent = state.losses[-20:]
        return StepReport(
            state.step, self.horizon, state.losses[-1], sum(recent) / len(recent),
            float(self.scheduler.get_last_lr()[0]), state.seconds, eta,
        )  # fmt: skip


def run_loop(
    recipe: Recipe,
    settings: LoopSettings,
    reporter: Reporter | None = None,
    run_dir: Path | None = None,
    resume: bool = False,
) -> LoopState:
    """Train `recipe` for `settings.steps` steps (fewer under a time limit); see the module."""
    return Loop(recipe, settings, reporter, run_dir).run(resume)
