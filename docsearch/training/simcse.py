"""Unsupervised SimCSE, step 3 of the LLM2Vec recipe: contrastive training on raw sentences.

On the bidirectional decoder with the MNTP LoRA merged, a fresh LoRA (r=16, alpha=32, dropout
0.05) learns to match each sentence with a second pass of itself: the same batch is embedded
twice with attention dropout 0.3 on, mean-pooled over the text tokens, and scored with
`docsearch.training.losses.simcse` (scale 20). The reference runs 1000 steps of batch 128 at
128 tokens (Wiki1M, lr 3e-5); `train_simcse` runs the same loop at whatever size a CPU allows.

One deliberate difference: LLM2Vec's SimCSE texts carry no instruction separator, so its mean
pooling falls back to the whole padded row (padding included); we pool over the text tokens.
Not here: the supervised stage (`--loss mnrl` in the shared trainer), checkpoints and resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from docsearch.encoders.llm2vec import (
    adapter_base,
    bidirectional_hidden_states,
    build_inputs,
    is_adapter_folder,
    load_decoder,
    load_tokenizer,
    lora_config,
    merge_adapter,
    pool,
    resolve_layers,
    tokenizer_folder,
)
from docsearch.errors import UsageError
from docsearch.training.losses import simcse
from docsearch.training.mntp import TrainResult, finish, local_ref, optimise, trainable


def set_attention_dropout(model: torch.nn.Module, p: float) -> None:
    """Attention dropout on every attention module (transformers reads it in training mode)."""
    for module in model.modules():
        if hasattr(module, "attention_dropout"):
            setattr(module, "attention_dropout", p)  # noqa: B010 - typed as a tensor/module attr


def load_for_simcse(
    model_dir: str, mntp_adapter: str | None, dtype: torch.dtype
) -> tuple[Any, Any, str, Path | None]:
    """(bidirectional decoder with the MNTP LoRA merged, tokenizer, base ref, MNTP folder).

    `model_dir` is a base model or a released-style `-mntp` folder; `mntp_adapter` an MNTP
    adapter folder for that base (or None to start from the base alone).
    """
    first, base, stack = resolve_layers(model_dir, mntp_adapter)
    if len(stack) > 1:
        raise UsageError("SimCSE starts from one MNTP adapter; got a model with two stacked")
    decoder = load_decoder(base, dtype=dtype, attn_implementation="sdpa")
    for folder in stack:
        decoder = merge_adapter(decoder, folder)
    base_ref = adapter_base(first) if is_adapter_folder(first) else local_ref(model_dir)
    tokenizer = load_tokenizer(tokenizer_folder(first, base))
    return decoder, tokenizer, base_ref, stack[0] if stack else None


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
    log: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train a SimCSE LoRA on `texts` over base + `mntp_adapter`, and save it to `out_dir`.

    The output folder holds the new LoRA and a copy of the MNTP adapter in `mntp/`, so
    `llm2vec --model <base> --adapter <out_dir>` rebuilds base -> MNTP -> SimCSE.
    """
    from peft import get_peft_model

    if len(texts) < 2:
        raise UsageError("SimCSE needs at least two texts (the other texts are the negatives)")
    start = time.perf_counter()
    decoder, tokenizer, base_ref, parent = load_for_simcse(model_dir, mntp_adapter, dtype)
    set_attention_dropout(decoder, dropout)
    model = get_peft_model(decoder, lora_config(r=r, alpha=alpha)).train()
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
    torch.manual_seed(seed)  # the dropout masks

    def embed(batch: Sequence[str]) -> torch.Tensor:
        pairs = [("", t) for t in batch]  # no instruction: the mean covers the text tokens
        inputs = build_inputs(tokenizer, pairs, max_length=max_length, doc_max_length=max_length)
        hidden = bidirectional_hidden_states(model, inputs["input_ids"], inputs["attention_mask"])
        masks = (inputs["embed_mask"], inputs["attention_mask"], inputs["input_ids"])
        return pool(hidden, *masks, "mean")  # (batch, dim)

    def batch_loss(step: int) -> torch.Tensor:
        rows = [order[(step * batch_size + i) % len(order)] for i in range(batch_size)]
        batch = [texts[i] for i in dict.fromkeys(rows)]  # a text twice would be its own negative
        return simcse(embed(batch), embed(batch), scale=scale)

    losses = optimise(trainable(model), batch_loss, steps, lr, log=log)
    set_attention_dropout(decoder, 0.0)
    settings = {
        "base": base_ref, "recipe": "simcse", "mntp_adapter": str(parent), "steps": steps,
        "batch_size": batch_size, "max_length": max_length, "n_texts": len(texts), "lr": lr,
        "dropout": dropout, "scale": scale, "r": r, "alpha": alpha, "seed": seed,
    }  # fmt: skip
    run = (losses, start, settings)
    return finish(model, out_dir, tokenizer, run, "LLM2Vec SimCSE adapter", parent=parent)
