"""The fine-tuning recipe of `docsearch finetune`: its settings, what it trains, its pair losses.

- `TrainSettings`: the options of a run (loss, steps, batches, negatives, learning rate, LoRA).
- `Trainable`: what the loop optimises and how the result is saved. sentence-transformers: the
  whole model (full fine-tuning), saved as a model folder; llm2vec: a fresh LoRA (peft, r=16,
  alpha=32, LLM2Vec's targets) on the bidirectional decoder, over at most one earlier (MNTP)
  adapter, saved as an llm2vec adapter folder. Either way the encoder's own `embed` computes the
  vectors, so training embeds texts exactly as search does (prompts, instructions, pooling).
- `pairs_recipe`: effective batches of pairs for the loop (`loop.py`), in an order that depends
  only on (seed, position), so a resumed run sees what an uninterrupted one would have; `opl`
  and `simcse` accumulate micro-batches, `mnrl` runs as GradCache (`cached_mnrl`), so its
  in-batch negatives span the whole effective batch.
Not here: the loop, the run around it (data, evaluation, saving: `finetune.py`), the losses.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from docsearch.errors import UsageError
from docsearch.training.data import Pair, relevant_docs
from docsearch.training.loop import LoopSettings, Recipe, local_ref
from docsearch.training.losses import cached_mnrl, opl_all_pairs, simcse

LOSSES = ("opl", "mnrl", "simcse", "mntp")
Embed = Callable[[Sequence[str], str], torch.Tensor]  # (texts, side) -> (n, dim), with grad


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

    def planned_steps(self, n_pairs: int) -> int:
        if self.steps is not None:
            return self.steps
        return max(1, math.ceil(self.epochs * n_pairs / (self.batch_size * self.grad_accum)))

    def loop_settings(self, planned: int, lr: float, bf16: bool) -> LoopSettings:
        return LoopSettings(
            planned, lr, self.warmup, decay=True, weight_decay=self.weight_decay,
            max_grad_norm=self.max_grad_norm, max_minutes=self.max_minutes,
            checkpoint_every=self.checkpoint_every, seed=self.seed, bf16=bf16,
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What is trained


@dataclass
class Trainable:
    """An encoder whose `embed` the loop trains through `module`; `save` writes the result."""

    encoder: Any  # has `embed(texts, side)`
    method: str  # "full fine-tuning" or "LoRA"
    module: torch.nn.Module
    save: Callable[[Path], dict[str, Any]]  # folder -> the encoder options that load it

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]


def make_trainable(
    encoder: Any, options: dict[str, Any], lora_r: int = 16, lora_alpha: int = 32
) -> Trainable:
    if encoder.name == "llm2vec":
        return llm2vec_lora(encoder, options, lora_r, lora_alpha)
    if encoder.name != "sentence-transformers":
        raise UsageError(
            f"docsearch finetune trains the sentence-transformers and llm2vec encoders, not "
            f"{encoder.name!r}"
        )
    module = encoder.module

    def save(folder: Path) -> dict[str, Any]:
        module.save(str(folder), create_model_card=False)
        return {**options, "adapter": str(folder.resolve())}

    return Trainable(encoder, "full fine-tuning", module, save)


def llm2vec_lora(
    encoder: Any,
    options: dict[str, Any],
    r: int = 16,
    alpha: int = 32,
    settings: dict[str, Any] | None = None,
) -> Trainable:
    """A fresh LoRA on an llm2vec encoder, saved as an adapter folder that names its base and
    holds the (MNTP) adapter it was trained over; `settings` is its `llm2vec_config.json`
    (default: the encoder's pooling and lengths)."""
    from docsearch.encoders.llm2vec import (
        adapter_base,
        is_adapter_folder,
        load_tokenizer,
        resolve_layers,
        save_adapter,
        tokenizer_folder,
    )

    first, base_folder, stack = resolve_layers(options["model"], options.get("adapter"))
    if len(stack) > 1:
        raise UsageError(
            "llm2vec training starts from a base model, or a base plus one (MNTP) adapter; "
            "this one already stacks two adapters"
        )
    base = adapter_base(first) if is_adapter_folder(first) else local_ref(options["model"])
    tokenizer = load_tokenizer(tokenizer_folder(first, base_folder))
    config = settings or {
        "pooling_mode": encoder.pooling, "max_length": encoder.max_length,
        "doc_max_length": encoder.doc_max_length, "skip_instruction": encoder.skip_instruction,
    }  # fmt: skip
    model = encoder.add_lora(r, alpha)

    def save(folder: Path) -> dict[str, Any]:
        parent = stack[0] if stack else None
        save_adapter(model, folder, base=base, tokenizer=tokenizer, settings=config, parent=parent)
        rest = {k: v for k, v in options.items() if k != "adapter"}
        return {**rest, "model": base, "adapter": str(folder.resolve())}

    return Trainable(encoder, "LoRA", model, save)


# ---------------------------------------------------------------------------------------------
# Batches and losses


def pair_order(n: int, seed: int, start: int, size: int) -> list[int]:
    """Pair indices at positions [start, start + size) of an endless stream reshuffled every
    epoch. Position p maps to a pair through (seed, epoch) alone, so a resumed run sees the
    batches an uninterrupted run would have seen."""
    return [epoch_order(n, seed, p // n)[p % n] for p in range(start, start + size)]


@functools.lru_cache(maxsize=2)  # positions come in order: the last epochs suffice
def epoch_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def opl_loss(
    embed: Embed, pairs: Sequence[Pair], relevant: Mapping[str, set[str]] | None = None
) -> torch.Tensor:
    """OPL over (query, positive, 1.0) and (query, negative, 0.0); each query embedded once.

    With `relevant` (query -> its relevant documents), in-batch: every query is also scored
    against the other pairs' documents, label 0.0 unless the document may be relevant to it.
    """
    q = embed([p.query for p in pairs], "query")  # (b, dim)
    d = embed([d for p in pairs for d in (p.positive, *p.negatives)], "document")  # (b(1+k), dim)
    labels = in_batch_labels(pairs, relevant).to(q.device)
    return opl_all_pairs(q.float(), d.float(), labels)


def in_batch_labels(pairs: Sequence[Pair], relevant: Mapping[str, set[str]] | None) -> torch.Tensor:
    """(queries, documents) targets: 1.0 own positive, 0.0 own negatives. With `relevant`, also
    0.0 for other pairs' documents, except NaN (skipped) where one may be relevant to the query
    or is of unknown origin; without it every other pair's cell is NaN (plain pairwise OPL)."""
    columns: list[tuple[int, str | None, bool]] = []  # (pair, document id, positive?)
    for i, p in enumerate(pairs):
        known = len(p.negative_docs) == len(p.negatives)  # pairs saved before the field: unknown
        docs = p.negative_docs if known else (None,) * len(p.negatives)
        columns += [(i, p.doc_id, True), *((i, doc, False) for doc in docs)]
    labels = torch.full((len(pairs), len(columns)), float("nan"))
    for i, pair in enumerate(pairs):
        own = relevant.get(pair.query, {pair.doc_id}) if relevant is not None else None
        for j, (owner, doc, positive) in enumerate(columns):
            if owner == i:
                labels[i, j] = float(positive)
            elif own is not None and doc is not None and doc not in own:
                labels[i, j] = 0.0
    return labels


def simcse_loss(embed: Embed, pairs: Sequence[Pair], scale: float) -> torch.Tensor:
    texts = list(dict.fromkeys(p.positive for p in pairs))  # a duplicate would be its own negative
    a = embed(texts, "document")  # (b, dim)
    b = embed(texts, "document")  # (b, dim), other dropout masks
    return simcse(a.float(), b.float(), scale=scale)


def mnrl_loss(embed: Embed, pairs: Sequence[Pair], size: int, scale: float) -> torch.Tensor:
    """GradCache MNRL over all `pairs`, in mini-batches of `size` texts."""

    def embed_chunk(chunk: tuple[str, Sequence[str]]) -> torch.Tensor:
        return embed(chunk[1], chunk[0]).float()  # (chunk, dim)

    queries = [("query", [p.query for p in c]) for c in chunks(pairs, size)]
    positives = [("document", [p.positive for p in c]) for c in chunks(pairs, size)]
    negatives = [("document", c) for c in chunks([n for p in pairs for n in p.negatives], size)]
    return cached_mnrl(embed_chunk, queries, positives, negatives, scale=scale)


def pairs_recipe(trainable: Trainable, pairs: Sequence[Pair], settings: TrainSettings) -> Recipe:
    """The loop's recipe: step s trains on pairs [s * B, (s + 1) * B) of the endless order,
    B = batch_size x grad_accum, in micro-batches of batch_size (one GradCache batch for mnrl)."""
    relevant = relevant_docs((p.query, p.doc_id) for p in pairs) if settings.in_batch else None
    size, embed, s = settings.batch_size * settings.grad_accum, trainable.encoder.embed, settings

    def batches(step: int) -> list[Sequence[Pair]]:
        batch = [pairs[i] for i in pair_order(len(pairs), s.seed, step * size, size)]
        return [batch] if s.loss == "mnrl" else list(chunks(batch, s.batch_size))

    def loss(part: Sequence[Pair]) -> torch.Tensor:
        if s.loss == "mnrl":
            return mnrl_loss(embed, part, s.batch_size, s.scale)
        if s.loss == "opl":
            return opl_loss(embed, part, relevant)
        return simcse_loss(embed, part, s.scale)

    trainable.module.train()
    return Recipe([{"params": trainable.params}], batches, loss)
