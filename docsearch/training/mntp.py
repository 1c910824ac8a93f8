"""MNTP, step 2 of the LLM2Vec recipe: masked next-token prediction on a bidirectional decoder.

The decoder's attention is made bidirectional (`docsearch.encoders.llm2vec`), some tokens of
each block are masked (`masking.py`), and the pretrained LM head predicts the original token at
a masked position i from the output at i-1 (`docsearch.training.losses.mntp`). Only a LoRA
(r=16, alpha=32, dropout 0.05, on the seven projections) on the inner model trains; the
embeddings and the LM head stay frozen. Masking strategies (LLM2Vec's collators, mask token `_`):
- `bert`: 20% of tokens; of those 80% become `_`, 10% a random token, 10% stay (Llama recipes);
- `all_mask`: 80% of tokens, all become `_` (the Mistral recipe).
The reference trains 1000 steps of batch 32 x 512 tokens on wikitext-103 (bf16, lr 5e-5);
`train_mntp` runs the same recipe in the shared loop (`loop.py`) at whatever size a CPU allows.
Not here: the loop, checkpoints and resume, evaluation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from docsearch.encoders.llm2vec import (
    bidirectional_hidden_states,
    check_model_type,
    load_tokenizer,
    lora_config,
    make_bidirectional,
    save_adapter,
)
from docsearch.encoders.weights import resolve_model
from docsearch.errors import UsageError
from docsearch.training.card import run_record, write_card
from docsearch.training.loop import (
    LoopSettings,
    LoopState,
    Recipe,
    Reporter,
    TrainResult,
    local_ref,
    run_loop,
)
from docsearch.training.losses import mntp
from docsearch.training.masking import Masking, mask_tokens

MASK_TOKEN = "_"
STRATEGIES = {"bert": Masking(0.2, 0.8, 0.1), "all_mask": Masking(0.8, 1.0, 0.0)}
# `llm2vec_config.json` of a trained adapter (LLM2Vec's defaults: mean pooling)
ENCODER_SETTINGS: dict[str, Any] = {
    "pooling_mode": "mean", "max_length": 512, "doc_max_length": 400, "skip_instruction": True,
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Masking and data


def mask_token_id(tokenizer: Any, token: str = MASK_TOKEN) -> int:
    """Id of the mask token (`_` in LLM2Vec's `blank` mode), a token of the existing vocabulary."""
    candidate = tokenizer.convert_tokens_to_ids(token)
    if candidate is None or candidate == tokenizer.unk_token_id:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        candidate = ids[0] if len(ids) == 1 else None
    if candidate is None or candidate == tokenizer.unk_token_id:
        raise UsageError(
            f"the tokenizer has no single token for {token!r}; pick another mask token"
        )
    return int(candidate)


def token_blocks(tokenizer: Any, texts: Sequence[str], block_size: int) -> torch.Tensor:
    """Texts tokenized (with their special tokens), concatenated and cut into equal blocks.

    The tail that does not fill a block is dropped, unless there is less than one block in all,
    which then becomes the only (shorter) block. Returns (n_blocks, block_size) int64.
    """
    ids = [i for text in texts for i in tokenizer(text)["input_ids"]]
    if not ids:
        raise UsageError("no training text: give at least one non-empty text")
    n_blocks = max(1, len(ids) // block_size)
    width = min(block_size, len(ids))
    return torch.tensor(ids[: n_blocks * width]).reshape(n_blocks, width)


def maskable_positions(tokenizer: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """True where a token may be masked: anything but special tokens (BOS, EOS, pad...)."""
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=input_ids.dtype)
    return ~torch.isin(input_ids, special)


# ---------------------------------------------------------------------------------------------
# What the LLM2Vec recipe steps share


def finish_recipe(
    out: Path, title: str, state: LoopState, started: float, settings: dict[str, Any]
) -> TrainResult:
    """Write the card of an LLM2Vec recipe adapter and describe the run."""
    seconds = time.perf_counter() - started
    load = {"model": settings["base"], "adapter": str(out)}
    write_card(out, run_record(
        title=title, encoder="llm2vec", method="LoRA (LLM2Vec recipe)", recipe=settings["recipe"],
        start={"model": settings["base"]}, load=load, losses=state.losses,
        planned=settings["steps"], seconds=seconds, device=settings["device"], settings=settings,
    ))  # fmt: skip
    return TrainResult(out, state.losses, seconds, settings)


# ---------------------------------------------------------------------------------------------
# MNTP


def lm_logits(lm: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The frozen LM head on (batch, seq, hidden) states, with the model's logit soft-cap if any."""
    logits: torch.Tensor = lm.get_output_embeddings()(hidden)  # (batch, seq, vocab)
    cap = getattr(lm.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def load_for_mntp(folder: Path, dtype: torch.dtype, r: int, alpha: int) -> tuple[Any, Any]:
    """(causal LM with a frozen head, its bidirectional inner model wrapped with a fresh LoRA)."""
    from peft import get_peft_model

    lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, attn_implementation="sdpa")
    check_model_type(lm.config.model_type)
    lm.requires_grad_(False)
    decoder = make_bidirectional(lm.base_model)
    return lm, get_peft_model(decoder, lora_config(r=r, alpha=alpha))


def pick_masking(strategy: str | None, model_type: str) -> str:
    """The masking strategy asked for, or LLM2Vec's choice: `all_mask` for Mistral, else `bert`."""
    strategy = strategy or ("all_mask" if model_type == "mistral" else "bert")
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown masking {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return strategy


def masked_batches(
    tokenizer: Any, blocks: torch.Tensor, batch_size: int, masking: Masking, vocab: int, seed: int
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """step -> (masked ids, labels): blocks in a seeded random order, masks redrawn every step."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(blocks), generator=generator)
    mask_id = mask_token_id(tokenizer)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = blocks[order[(torch.arange(batch_size) + step * batch_size) % len(blocks)]]
        maskable = maskable_positions(tokenizer, ids)
        return mask_tokens(ids, maskable, masking, mask_id, vocab, generator)  # (batch, width) x2

    return batch


def train_mntp(
    model_dir: str,
    texts: Sequence[str],
    out_dir: str | Path,
    steps: int = 100,
    *,
    batch_size: int = 8,
    block_size: int = 128,
    lr: float = 5e-5,
    strategy: str | None = None,
    r: int = 16,
    alpha: int = 32,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    reporter: Reporter | None = None,
) -> TrainResult:
    """Train an MNTP LoRA on `texts` and save it to `out_dir` (an `llm2vec --adapter` folder).

    `model_dir` is a base model (folder, Hub id or packaged name); `strategy` is `bert` or
    `all_mask` (default: LLM2Vec's choice for the model type). Texts are cut into blocks of
    `block_size` tokens; each step masks `batch_size` of them afresh. Constant learning rate.
    """
    started = time.perf_counter()
    folder = resolve_model(model_dir)
    tokenizer = load_tokenizer(folder)
    lm, model = load_for_mntp(folder, dtype, r, alpha)
    strategy = pick_masking(strategy, lm.config.model_type)
    blocks = token_blocks(tokenizer, texts, block_size)  # (n_blocks, width)
    vocab = int(lm.config.vocab_size)
    next_batch = masked_batches(tokenizer, blocks, batch_size, STRATEGIES[strategy], vocab, seed)

    def loss(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        masked, labels = batch
        hidden = bidirectional_hidden_states(model, masked, torch.ones_like(masked))
        return mntp(lm_logits(lm, hidden), labels)

    model.train()
    params = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    recipe = Recipe(params, lambda step: [next_batch(step)], loss)
    state = run_loop(recipe, LoopSettings(steps, lr, seed=seed), reporter)
    base = local_ref(model_dir)
    settings: dict[str, Any] = {
        "base": base, "recipe": "mntp", "masking": strategy, "steps": steps,
        "batch_size": batch_size, "block_size": block_size, "n_blocks": len(blocks), "lr": lr,
        "r": r, "alpha": alpha, "seed": seed, "device": "cpu",
    }  # fmt: skip
    out = save_adapter(model, out_dir, base=base, tokenizer=tokenizer, settings=ENCODER_SETTINGS)
    return finish_recipe(out, "LLM2Vec MNTP adapter", state, started, settings)
