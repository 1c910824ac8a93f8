"""The training loop of `docsearch finetune`: batches, losses, schedule, checkpoints.

`Loop` runs optimiser steps over prepared pairs on a `Trainable` (`trainable.py`): AdamW, linear
warm-up then decay, gradient accumulation, gradient norm clipped at 1, bf16 autocast where the
hardware has it. `opl` and `simcse` accumulate micro-batches; `mnrl` uses GradCache
(`cached_mnrl`), so its in-batch negatives span the whole effective batch. A checkpoint is
written every N steps and on Ctrl-C; resuming restores the weights, optimiser, schedule, RNG and
position, and the batch order depends only on (seed, position), so an interrupted run ends where
an uninterrupted one would. Under a time limit the learning-rate decay is re-aimed after every
step at the last step that fits, so a time-limited run still ends with a small learning rate.
Not here: the run around the loop (data, evaluation, saving: `finetune.py`), the losses.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from docsearch.errors import UsageError
from docsearch.training.data import Pair, relevant_docs
from docsearch.training.losses import cached_mnrl, opl_all_pairs, simcse
from docsearch.training.trainable import Trainable, bf16_supported

log = logging.getLogger(__name__)

LOSSES = ("opl", "mnrl", "simcse", "mntp")
STATE_FILE = "state.pt"
KEEP_CHECKPOINTS = 2


@dataclass
class TrainSettings:
    """How to optimise. Defaults suit a CPU; the LoCo paper used 32 negatives and lr 5e-6."""

    loss: str = "opl"
    steps: int | None = None  # optimiser steps; default: `epochs` passes over the pairs
    epochs: float = 1.0
    lr: float | None = None  # default: 2e-5 for full fine-tuning, 1e-4 for LoRA
    batch_size: int = 4  # pairs per micro-batch
    grad_accum: int = 8  # micro-batches per optimiser step (effective batch 32, as in LoCo)
    negatives: int = 4  # per pair, from other documents
    mined: int | None = None  # of those, mined positive-aware; default: 0 for opl, half else
    in_batch: bool = False  # opl: every document of a micro-batch is a negative for every query
    warmup: float = 0.1  # share of the steps with a rising learning rate
    max_grad_norm: float = 1.0
    weight_decay: float = 0.01
    scale: float = 20.0  # inverse temperature of mnrl / simcse
    max_minutes: float | None = None  # stop (and save) then; the decay is aimed at that time
    checkpoint_every: int = 25
    seed: int = 0
    bf16: bool | None = None  # None: where the hardware supports it
    lora_r: int = 16
    lora_alpha: int = 32

    def mined_negatives(self) -> int:
        """OPL trains on random negatives (as in LoCo): its absolute 0.0 target pulls a hard
        negative as far as a random one; contrastive losses only need it below the positive."""
        if self.mined is not None:
            return self.mined
        return 0 if self.loss == "opl" else self.negatives // 2

    def check(self) -> None:
        if self.loss not in LOSSES:
            raise UsageError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSSES)}")
        for name in ("batch_size", "grad_accum", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name.replace('_', '-')} must be at least 1")
        if self.in_batch and self.loss != "opl":
            raise UsageError("--in-batch is for --loss opl (mnrl always uses in-batch negatives)")
        if self.negatives < 0 or (self.steps is not None and self.steps < 1) or self.epochs <= 0:
            raise UsageError("negatives must be >= 0, steps >= 1 and epochs > 0")


@dataclass
class StepReport:
    step: int
    total: int
    loss: float
    mean_loss: float  # over the last 20 steps
    lr: float
    seconds: float  # training time so far (all sessions)
    eta: float  # seconds left, within --max-minutes


class Reporter(Protocol):
    def status(self, message: str) -> None: ...

    def step(self, report: StepReport) -> None: ...


class QuietReporter:
    def status(self, message: str) -> None:
        log.info(message)

    def step(self, report: StepReport) -> None: ...


# ---------------------------------------------------------------------------------------------
# 2. Batches, losses, schedule


class PairOrder:
    """An endless stream of pair indices, reshuffled every epoch.

    Position p maps to a pair through (seed, epoch) alone, so a resumed run sees the batches an
    uninterrupted run would have seen.
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed
        self._epoch, self._order = -1, list(range(n))

    def at(self, position: int) -> int:
        epoch, offset = divmod(position, self.n)
        if epoch != self._epoch:
            self._order = list(range(self.n))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(self._order)
            self._epoch = epoch
        return self._order[offset]

    def batch(self, start: int, size: int) -> list[int]:
        return [self.at(p) for p in range(start, start + size)]


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def opl_loss(
    trainable: Trainable, pairs: Sequence[Pair], relevant: Mapping[str, set[str]] | None = None
) -> torch.Tensor:
    """OPL over (query, positive, 1.0) and (query, negative, 0.0); each query embedded once.

    With `relevant` (query -> its relevant documents), in-batch: every query is also scored
    against the other pairs' documents, label 0.0 unless the document may be relevant to it.
    """
    q = trainable.embed([p.query for p in pairs], "query")  # (b, dim)
    docs = [d for p in pairs for d in (p.positive, *p.negatives)]
    d = trainable.embed(docs, "document")  # (b * (1 + k), dim)
    labels = in_batch_labels(pairs, relevant).to(q.device)
    return opl_all_pairs(q.float(), d.float(), labels)


def in_batch_labels(pairs: Sequence[Pair], relevant: Mapping[str, set[str]] | None) -> torch.Tensor:
    """(queries, documents) targets: 1.0 own positive, 0.0 own negatives. With `relevant`, also
    0.0 for other pairs' documents, except NaN (skipped) where one may be relevant to the query
    or is of unknown origin; without it every other pair's cell is NaN (plain pairwise OPL)."""
    columns: list[tuple[int, str | None, bool]] = []  # (pair, document id, positive?)
    for i, p in enumerate(pairs):
        known = len(p.negative_docs) == len(p.negatives)  # pairs saved before the field: unknown
        columns.append((i, p.doc_id, True))
        columns += [
            (i, p.negative_docs[j] if known else None, False) for j in range(len(p.negatives))
        ]
    labels = torch.full((len(pairs), len(columns)), float("nan"))
    for i, pair in enumerate(pairs):
        own = relevant.get(pair.query, {pair.doc_id}) if relevant is not None else None
        for j, (owner, doc, positive) in enumerate(columns):
            if owner == i:
                labels[i, j] = float(positive)
            elif own is not None and doc is not None and doc not in own:
                labels[i, j] = 0.0
    return labels


def simcse_loss(trainable: Trainable, pairs: Sequence[Pair], scale: float) -> torch.Tensor:
    texts = list(dict.fromkeys(p.positive for p in pairs))  # a duplicate would be its own negative
    a = trainable.embed(texts, "document")  # (b, dim)
    b = trainable.embed(texts, "document")  # (b, dim), other dropout masks
    return simcse(a.float(), b.float(), scale=scale)


def mnrl_step(
    trainable: Trainable, pairs: Sequence[Pair], size: int, scale: float, autocast: Any
) -> torch.Tensor:
    """GradCache MNRL over all `pairs` (backward included); mini-batches of `size` texts."""

    def embed(chunk: tuple[str, Sequence[str]]) -> torch.Tensor:
        with autocast():
            return trainable.embed(chunk[1], chunk[0]).float()  # (chunk, dim)

    queries = [("query", [p.query for p in c]) for c in chunks(pairs, size)]
    positives = [("document", [p.positive for p in c]) for c in chunks(pairs, size)]
    negatives = [n for p in pairs for n in p.negatives]
    negative_chunks = [("document", c) for c in chunks(negatives, size)]
    return cached_mnrl(embed, queries, positives, negative_chunks, scale=scale)


def warmup_linear(planned: int, warmup: float) -> Callable[[int], float]:
    """Learning-rate factor: rises over the first `warmup` share of steps, then falls to 0."""
    warm = int(planned * warmup)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (planned - step) / max(1, planned - warm))

    return factor


# ---------------------------------------------------------------------------------------------
# 3. Checkpoints


@dataclass
class LoopState:
    step: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0  # training time over all sessions
    stopped: str = ""  # why the run ended before its planned steps, if it did


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (a partial one has no state file yet)."""
    found = [p for p in run_dir.glob("step-*") if (p / STATE_FILE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def save_checkpoint(
    run_dir: Path, trainable: Trainable, optimiser: Any, scheduler: Any, state: LoopState
) -> Path:
    """Write step-N atomically (a partial folder renamed into place); keep the last two."""
    target = run_dir / f"step-{state.step:06d}"
    partial = run_dir / f".{target.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    blob = {
        "model": trainable.state(),
        "optimiser": optimiser.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": torch.get_rng_state(),
    }
    torch.save(blob, partial / STATE_FILE)
    (partial / "loop.json").write_text(json.dumps(asdict(state)))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    for old in checkpoint_dirs(run_dir)[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(path: Path, trainable: Trainable, optimiser: Any, scheduler: Any) -> LoopState:
    blob = torch.load(path / STATE_FILE, weights_only=True)
    trainable.load_state(blob["model"])
    optimiser.load_state_dict(blob["optimiser"])
    scheduler.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["rng"])
    return LoopState(**json.loads((path / "loop.json").read_text()))


# ---------------------------------------------------------------------------------------------
# 4. The loop


class Loop:
    """Optimiser steps over the prepared pairs, with checkpoints, a time limit and progress."""

    def __init__(
        self,
        trainable: Trainable,
        pairs: Sequence[Pair],
        settings: TrainSettings,
        planned: int,
        run_dir: Path,
        reporter: Reporter,
    ) -> None:
        self.trainable, self.pairs, self.settings = trainable, pairs, settings
        self.planned, self.run_dir, self.reporter = planned, run_dir, reporter
        self.order = PairOrder(len(pairs), settings.seed)
        self.relevant = relevant_docs(pairs) if settings.in_batch else None
        params = trainable.parameters()
        lr = settings.lr or (2e-5 if trainable.method == "full fine-tuning" else 1e-4)
        self.optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=settings.weight_decay)
        self.horizon = planned  # the step the learning rate reaches 0 (see `_replan`)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimiser, self._factor)
        self.device = str(_device_of_params(params))
        use_bf16 = bf16_supported(self.device) if settings.bf16 is None else settings.bf16
        self.bf16 = use_bf16
        self._dirty = False  # weights changed but the step is not yet counted

    def _factor(self, step: int) -> float:
        return warmup_linear(self.horizon, self.settings.warmup)(step)

    def _replan(self, state: LoopState) -> None:
        """Under --max-minutes: end (and aim the decay) at the step nearest the deadline."""
        limit = self.settings.max_minutes
        if limit is None or not state.step:
            return
        per_step = max(state.seconds / state.step, 1e-9)
        left = limit * 60 - state.seconds
        fits = state.step + (int(left / per_step + 0.5) if left > 0 else 0)
        self.horizon = max(state.step, min(self.planned, fits))

    def autocast(self) -> Any:
        kind = "cuda" if self.device.startswith("cuda") else "cpu"
        return torch.autocast(kind, dtype=torch.bfloat16, enabled=self.bf16)

    def start(self) -> LoopState:
        """A fresh run: the dropout RNG is seeded, so equal settings give equal runs."""
        torch.manual_seed(self.settings.seed)
        return LoopState()

    def resume(self) -> LoopState:
        found = checkpoint_dirs(self.run_dir)
        if not found:
            return self.start()
        self.reporter.status(f"resuming from {found[-1].name}")
        return load_checkpoint(found[-1], self.trainable, self.optimiser, self.scheduler)

    def step_loss(self, step: int) -> float:
        """One optimiser step: forward and backward over the effective batch; returns its loss."""
        s = self.settings
        size = s.batch_size * s.grad_accum
        batch = [self.pairs[i] for i in self.order.batch(step * size, size)]
        self.trainable.train_mode(True)
        if s.loss == "mnrl":
            return float(mnrl_step(self.trainable, batch, s.batch_size, s.scale, self.autocast))
        total = 0.0
        for part in chunks(batch, s.batch_size):
            with self.autocast():
                if s.loss == "opl":
                    loss = opl_loss(self.trainable, part, self.relevant)
                else:
                    loss = simcse_loss(self.trainable, part, s.scale)
            weighted = loss * (len(part) / len(batch))
            weighted.backward()
            total += float(weighted.detach())
        return total

    def update(self) -> None:
        params = [p for g in self.optimiser.param_groups for p in g["params"]]
        torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm)
        self._dirty = True
        self.optimiser.step()
        self.optimiser.zero_grad(set_to_none=True)

    def run(self, state: LoopState) -> LoopState:
        saved = state.step
        try:
            while state.step < self.horizon and not self._out_of_time(state):
                started = time.perf_counter()
                loss = self.step_loss(state.step)
                self.update()
                state.step += 1
                state.losses.append(loss)
                state.seconds += time.perf_counter() - started
                self._replan(state)
                self.scheduler.step()  # the next step's learning rate, aimed at the horizon
                self._dirty = False
                self.reporter.step(self._report(state))
                if state.step % self.settings.checkpoint_every == 0 and state.step < self.horizon:
                    save_checkpoint(
                        self.run_dir, self.trainable, self.optimiser, self.scheduler, state
                    )
                    saved = state.step
        except KeyboardInterrupt:
            if state.step > saved and not self._dirty:
                save_checkpoint(self.run_dir, self.trainable, self.optimiser, self.scheduler, state)
            raise
        if state.step < self.planned:
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


def _device_of_params(params: Sequence[torch.nn.Parameter]) -> torch.device:
    if not params:
        raise UsageError("the encoder has no trainable parameters")
    return params[0].device


def planned_steps(settings: TrainSettings, n_pairs: int) -> int:
    if settings.steps is not None:
        return settings.steps
    per_step = settings.batch_size * settings.grad_accum
    return max(1, math.ceil(settings.epochs * n_pairs / per_step))
