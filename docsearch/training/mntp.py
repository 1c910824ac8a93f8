"""MNTP, step 2 of the LLM2Vec recipe: masked next-token prediction on a bidirectional decoder.

The decoder's attention is made bidirectional (`docsearch.encoders.llm2vec`), some tokens of
each block are masked, and the pretrained LM head predicts the original token at a masked
position i from the output at i-1 (`docsearch.training.losses.mntp`). Only a LoRA (r=16,
alpha=32, dropout 0.05, on the seven projections) on the inner model trains; the embeddings and
the LM head stay frozen. Masking strategies (LLM2Vec's collators, mask token `_`):
- `bert`: 20% of tokens; of those 80% become `_`, 10% a random token, 10% stay (Llama recipes);
- `all_mask`: 80% of tokens, all become `_` (the Mistral recipe).
The reference trains 1000 steps of batch 32 x 512 tokens on wikitext-103 (bf16, lr 5e-5);
`train_mntp` runs the same loop at whatever size a CPU allows, and also holds the small loop and
model-card helpers that `docsearch.training.simcse` reuses.
Not here: checkpoints/resume and evaluation (the shared `docsearch.training.trainer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
from docsearch.training.losses import IGNORE_INDEX, mntp

MASK_TOKEN = "_"


@dataclass(frozen=True)
class Masking:
    """Which share of tokens is masked, and what a masked token becomes."""

    probability: float  # share of (non-special) tokens that become targets
    to_mask: float  # of the targets: share replaced by the mask token
    to_random: float  # of the targets: share replaced by a random token (the rest stay)


STRATEGIES = {"bert": Masking(0.2, 0.8, 0.1), "all_mask": Masking(0.8, 1.0, 0.0)}


@dataclass
class TrainResult:
    """What a recipe run did: where the adapter is, its losses and settings, and how long it took."""

    out_dir: Path
    losses: list[float]
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)


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


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    masking: Masking,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked input ids, labels) for a batch; labels hold the original id at targets, else -100.

    `maskable` (batch, seq) is False on special tokens and padding, which are never targets.
    """
    draw = torch.rand(input_ids.shape, generator=generator)
    targets = (draw < masking.probability) & maskable  # (batch, seq)
    labels = torch.where(targets, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    how = torch.rand(input_ids.shape, generator=generator)
    to_mask = targets & (how < masking.to_mask)
    to_random = targets & (how >= masking.to_mask) & (how < masking.to_mask + masking.to_random)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    return masked, labels


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
# The shared little loop and model card


def optimise(
    parameters: Sequence[torch.nn.Parameter],
    batch_loss: Callable[[int], torch.Tensor],
    steps: int,
    lr: float,
    *,
    grad_clip: float = 1.0,
    log: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW at a constant learning rate for `steps` steps; returns the loss of every step."""
    optimiser = torch.optim.AdamW(parameters, lr=lr)
    losses = []
    for step in range(steps):
        loss = batch_loss(step)
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
        optimiser.step()
        losses.append(float(loss.detach()))
        if log is not None:
            log(step, losses[-1])
    return losses


def write_card(out_dir: Path, title: str, result: TrainResult) -> None:
    """A short README.md next to the adapter: what it is, how it was trained, how to load it."""
    first = sum(result.losses[:5]) / max(1, len(result.losses[:5]))
    last = sum(result.losses[-5:]) / max(1, len(result.losses[-5:]))
    lines = [f"# {title}", "", "LoRA adapter written by docsearch (LLM2Vec recipe).", ""]
    lines += [f"- {key}: {value}" for key, value in result.settings.items()]
    lines += [
        f"- loss (mean of first / last 5 steps): {first:.4f} / {last:.4f}",
        f"- wall time: {result.seconds:.1f} s",
        "",
        "Load: `docsearch index --encoder llm2vec --model "
        f"{result.settings.get('base', '<base>')} --adapter {out_dir}`",
        "",
    ]
    (out_dir / "README.md").write_text("\n".join(lines))


def local_ref(ref: str) -> str:
    """An existing local path as an absolute path (so an adapter can name its base later)."""
    path = Path(ref).expanduser()
    return str(path.resolve()) if path.exists() else ref


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


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def finish(
    model: Any,
    out_dir: str | Path,
    tokenizer: Any,
    run: tuple[list[float], float, dict[str, Any]],
    title: str,
    parent: Path | None = None,
) -> TrainResult:
    """Save the adapter (with `llm2vec_config.json` and a card) and describe the run."""
    losses, start, settings = run
    out = save_adapter(
        model, out_dir, base=settings["base"], tokenizer=tokenizer, settings=encoder_settings(),
        parent=parent,
    )  # fmt: skip
    result = TrainResult(out, losses, time.perf_counter() - start, settings)
    write_card(out, title, result)
    return result


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
    log: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train an MNTP LoRA on `texts` and save it to `out_dir` (an `llm2vec --adapter` folder).

    `model_dir` is a base model (folder, Hub id or packaged name); `strategy` is `bert` or
    `all_mask` (default: LLM2Vec's choice for the model type). Texts are cut into blocks of
    `block_size` tokens; each step masks `batch_size` of them afresh. Constant learning rate.
    """
    start = time.perf_counter()
    folder = resolve_model(model_dir)
    tokenizer = load_tokenizer(folder)
    lm, model = load_for_mntp(folder, dtype, r, alpha)
    strategy = pick_masking(strategy, lm.config.model_type)
    blocks = token_blocks(tokenizer, texts, block_size)  # (n_blocks, width)
    vocab = int(lm.config.vocab_size)
    next_batch = masked_batches(tokenizer, blocks, batch_size, STRATEGIES[strategy], vocab, seed)
    model.train()

    def batch_loss(step: int) -> torch.Tensor:
        masked, labels = next_batch(step)
        hidden = bidirectional_hidden_states(model, masked, torch.ones_like(masked))
        return mntp(lm_logits(lm, hidden), labels)

    losses = optimise(trainable(model), batch_loss, steps, lr, log=log)
    settings = {
        "base": local_ref(model_dir), "recipe": "mntp", "masking": strategy, "steps": steps,
        "batch_size": batch_size, "block_size": block_size, "n_blocks": len(blocks), "lr": lr,
        "r": r, "alpha": alpha, "seed": seed,
    }  # fmt: skip
    return finish(model, out_dir, tokenizer, (losses, start, settings), "LLM2Vec MNTP adapter")


def encoder_settings(max_length: int = 512, doc_max_length: int = 400) -> dict[str, Any]:
    """`llm2vec_config.json` contents for a trained adapter (LLM2Vec's defaults: mean pooling)."""
    return {
        "pooling_mode": "mean",
        "max_length": max_length,
        "doc_max_length": doc_max_length,
        "skip_instruction": True,
    }
