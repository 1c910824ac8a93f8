"""Unsupervised SimCSE, step 3 of the LLM2Vec recipe: contrastive training on raw sentences.

On the llm2vec encoder (the bidirectional decoder with the MNTP LoRA merged), a fresh LoRA
(r=16, alpha=32, dropout 0.05) learns to match each sentence with a second pass of itself: the
same batch is embedded twice by the encoder's own `embed` with attention dropout 0.3 on,
mean-pooled over the text tokens, and scored with `docsearch.training.losses.simcse` (scale
20). The reference runs 1000 steps of batch 128 at 128 tokens (Wiki1M, lr 3e-5); `train_simcse`
runs the same recipe in the shared loop (`loop.py`) at whatever size a CPU allows.

One deliberate difference: LLM2Vec's SimCSE texts carry no instruction separator, so its mean
pooling falls back to the whole padded row (padding included); we pool over the text tokens.
Not here: the supervised stage (`--loss mnrl` in `docsearch finetune`), checkpoints and resume.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch

from docsearch.encoders.llm2vec import LLM2VecEncoder
from docsearch.errors import UsageError
from docsearch.training.loop import LoopSettings, Recipe, Reporter, TrainResult, run_loop
from docsearch.training.losses import simcse
from docsearch.training.mntp import ENCODER_SETTINGS, finish_recipe
from docsearch.training.trainer import llm2vec_lora


def set_attention_dropout(model: torch.nn.Module, p: float) -> None:
    """Attention dropout on every attention module (transformers reads it in training mode)."""
    for module in model.modules():
        if hasattr(module, "attention_dropout"):
            setattr(module, "attention_dropout", p)  # noqa: B010 - typed as a tensor/module attr


def train_simcse(
    model_dir: str,
    texts: Sequence[str],
    out_dir: str | Path,
    steps: int = 100,
    *,
    mntp_adapter: str | None = None,
    batch_size: int = 16,
    max_length: int = 128,
    lr: float = 3e-5,
    dropout: float = 0.3,
    scale: float = 20.0,
    r: int = 16,
    alpha: int = 32,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    reporter: Reporter | None = None,
) -> TrainResult:
    """Train a SimCSE LoRA on `texts` over base + `mntp_adapter`, and save it to `out_dir`.

    `model_dir` is a base model or a released-style `-mntp` folder. The output folder holds the
    new LoRA and a copy of the MNTP adapter in `mntp/`, so `llm2vec --model <base> --adapter
    <out_dir>` rebuilds base -> MNTP -> SimCSE.
    """
    if len(texts) < 2:
        raise UsageError("SimCSE needs at least two texts (the other texts are the negatives)")
    started = time.perf_counter()
    options = {"model": model_dir, "adapter": mntp_adapter}
    encoder = LLM2VecEncoder(
        model_dir, adapter=mntp_adapter, pooling="mean", max_length=max_length,
        doc_max_length=max_length, document_instruction="", skip_instruction=True,
        dtype=str(dtype).removeprefix("torch."),
    )  # fmt: skip
    trainable = llm2vec_lora(encoder, options, r, alpha, settings=ENCODER_SETTINGS)
    set_attention_dropout(trainable.module, dropout)
    trainable.module.train()
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()

    def batches(step: int) -> list[list[str]]:
        rows = [order[(step * batch_size + i) % len(order)] for i in range(batch_size)]
        return [[texts[i] for i in dict.fromkeys(rows)]]  # a text twice: its own negative

    def loss(batch: list[str]) -> torch.Tensor:  # no instruction: the mean covers the text
        return simcse(encoder.embed(batch, "document"), encoder.embed(batch, "document"), scale)

    recipe = Recipe([{"params": trainable.params}], batches, loss)
    state = run_loop(recipe, LoopSettings(steps, lr, seed=seed), reporter)
    load = trainable.save(Path(out_dir))
    settings = {
        "base": load["model"], "recipe": "simcse", "mntp_adapter": str(mntp_adapter), "steps": steps,
        "batch_size": batch_size, "max_length": max_length, "n_texts": len(texts), "lr": lr,
        "dropout": dropout, "scale": scale, "r": r, "alpha": alpha, "seed": seed,
        "device": encoder.device,
    }  # fmt: skip
    return finish_recipe(Path(out_dir), "LLM2Vec SimCSE adapter", state, started, settings)
