"""Plumbing shared by the training-free decoder encoders (`kv_embedding.py`, `baselines.py`).

Loading a decoder LLM, prompt templates that remember where the text sits in the token sequence,
left padding with position ids that start at 0 on every row, and pooling of the final hidden
state. `DecoderEncoder` ties these into the `Encoder` protocol; subclasses choose the templates
and pooling, and may replace `_forward`.
Not here: device, dtype and attention choice (`device.py`), batching (`batching.py`), the
attention re-routing (`kv_embedding.py`), layer selection (`intrinsic_dim.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from docsearch.defaults import DEFAULT_TOKEN_BUDGET
from docsearch.encoders.base import HFEncoder, hf_token_spans, one_of
from docsearch.encoders.batching import token_batches
from docsearch.encoders.device import choose
from docsearch.encoders.weights import resolve_model
from docsearch.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_MAX_TOKENS = 8192  # cap on content tokens per input, below most models' window
POOLINGS = ("mean", "last", "mean+last")
POOL_SPANS = ("all", "text")

# ---------------------------------------------------------------------------------------------
# Loading


def load_decoder(
    model_ref: str, *, dtype: torch.dtype, device: str, attn_implementation: str
) -> tuple[Any, Any, Path]:
    """(base model without LM head, left-padding tokenizer, weights folder) for `model_ref`."""
    from transformers import AutoModel, AutoTokenizer

    folder = resolve_model(model_ref)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model = AutoModel.from_pretrained(
        str(folder), dtype=dtype, attn_implementation=attn_implementation
    )
    return model.to(device).eval(), tokenizer, folder


# ---------------------------------------------------------------------------------------------
# Templates and tokenisation


def check_template(template: str) -> str:
    if "{text}" not in template:
        raise UsageError(f"prompt template {template!r} must contain '{{text}}'")
    return template


def render(template: str, text: str) -> tuple[str, tuple[int, int]]:
    """Fill every `{text}` slot; also return the character span of the last filled slot.

    `render("Q: {text}!", "hi") -> ("Q: hi!", (3, 5))`. Plain splitting rather than
    `str.format`, so braces in the text or elsewhere in the template are left alone.
    """
    parts = template.split("{text}")
    full = text.join(parts)
    end = len(full) - len(parts[-1])
    return full, (end - len(text), end)


@dataclass(frozen=True)
class Tokenized:
    """One input: token ids (with the tokenizer's special tokens) and the token range of the
    last `{text}` slot, `[start, end)` (empty text: the range is empty)."""

    ids: list[int]
    span: tuple[int, int]


def truncate(tokenizer: Any, text: str, max_tokens: int | None) -> str:
    """`text` cut after its first `max_tokens` content tokens (unchanged when shorter)."""
    if max_tokens is None or len(text) <= max_tokens:  # a token covers at least one character
        return text
    offsets = hf_token_spans(tokenizer, text)
    return text if len(offsets) <= max_tokens else text[: offsets[max_tokens - 1][1]]


def tokenize(tokenizer: Any, template: str, text: str) -> Tokenized:
    """Token ids of the filled template and where the (last copy of the) text lies in them."""
    full, (start, end) = render(template, text)
    enc = tokenizer(full, return_offsets_mapping=True, return_special_tokens_mask=True)
    inside = [
        i
        for i, ((a, b), special) in enumerate(
            zip(enc["offset_mapping"], enc["special_tokens_mask"], strict=True)
        )
        if not special and b > start and a < end
    ]
    span = (inside[0], inside[-1] + 1) if inside else (0, 0)
    return Tokenized(list(enc["input_ids"]), span)


# ---------------------------------------------------------------------------------------------
# Padding and pooling


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded `input_ids`, `attention_mask` and `position_ids` (0 at each row's first token).

    Left padding puts every row's last real token in the final column; the position ids undo the
    shift that padding would otherwise add, so a row gets the same positions alone or batched.
    """
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


def span_mask(items: Sequence[Tokenized], width: int, pool_span: str) -> torch.Tensor:
    """(batch, width) 0/1 mask of the tokens mean pooling covers, in left-padded coordinates."""
    mask = torch.zeros((len(items), width))
    for i, item in enumerate(items):
        pad = width - len(item.ids)
        start, end = item.span if pool_span == "text" else (0, len(item.ids))
        if end <= start:  # empty text: fall back to the whole input
            start, end = 0, len(item.ids)
        mask[i, pad + start : pad + end] = 1.0
    return mask


def masked_mean(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of (batch, seq, dim) rows over the positions where `mask` (batch, seq) is non-zero,
    weighted by it; a row with an empty mask gives zeros (NV-Embed's reference divides by zero)."""
    weights = mask.to(tokens.device, tokens.dtype).unsqueeze(-1)  # (batch, seq, 1)
    return (tokens * weights).sum(1) / weights.sum(1).clamp(min=1.0)  # (batch, dim)


def pool(hidden: torch.Tensor, weights: torch.Tensor, pooling: str) -> torch.Tensor:
    """Pool (batch, seq, dim) states: mean under `weights` (batch, seq), the last token, or their
    average. The last token is the final column because rows are left-padded."""
    hidden = hidden.float()
    last = hidden[:, -1]  # (batch, dim)
    if pooling == "last":
        return last
    mean = masked_mean(hidden, weights)
    return mean if pooling == "mean" else 0.5 * (mean + last)


# ---------------------------------------------------------------------------------------------
# The encoder skeleton


class DecoderEncoder(HFEncoder):
    """A frozen decoder LLM read out by pooling its final hidden state under a prompt template.

    Subclasses set `name`, the default templates and pooling, and may override `_forward` (the
    KV-Embedding encoder passes its re-routing there). Options that change vectors go in `spec()`;
    `dtype`, `device`, `token_budget` and `attn` (auto, sdpa, eager or flash: see `device.py`)
    are run-time settings.
    """

    name = "decoder"
    query_template_default = "{text}"
    document_template_default = "{text}"
    pooling_default = "mean"
    pool_span_default = "all"
    allow_flash = True
    kernel_names: dict[str, str] = {}  # attention choice -> the name registered with transformers

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        query_template: str | None = None,
        document_template: str | None = None,
        pooling: str | None = None,
        pool_span: str | None = None,
        max_tokens: int | None = None,
        dtype: str = "auto",
        device: str | None = None,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        attn: str | None = None,
    ) -> None:
        self.model_ref = model
        self.query_template = check_template(query_template or self.query_template_default)
        self.document_template = check_template(document_template or self.document_template_default)
        self.pooling = one_of("pooling", pooling or self.pooling_default, POOLINGS)
        self.pool_span = one_of("pool_span", pool_span or self.pool_span_default, POOL_SPANS)
        self.device, self.torch_dtype, impl = choose(
            device, dtype, attn, allow_flash=self.allow_flash
        )
        self.token_budget = int(token_budget)
        self.model, self.tokenizer, self.folder = load_decoder(
            model,
            dtype=self.torch_dtype,
            device=self.device,
            attn_implementation=self.kernel_names.get(impl, impl),
        )
        self.dim = int(self.model.config.hidden_size)
        self.max_tokens_cap = max_tokens
        self.max_tokens = self._content_budget(max_tokens)
        log.debug("%s on %s (%s, %s)", self.name, self.folder, self.torch_dtype, self.device)

    def _content_budget(self, cap: int | None) -> int:
        """Content tokens per input: what fits in the model's window next to the longer template
        (per copy of the text), at most `cap` or DEFAULT_MAX_TOKENS."""
        window = int(getattr(self.model.config, "max_position_embeddings", 0) or DEFAULT_MAX_TOKENS)
        fits = []
        for template in (self.query_template, self.document_template):
            overhead = len(tokenize(self.tokenizer, template, "").ids)
            fits.append((window - overhead) // template.count("{text}"))
        return max(1, min(cap or DEFAULT_MAX_TOKENS, *fits))

    def vector_options(self) -> dict[str, Any]:
        """Every option that changes the vectors, explicit so a later default change is harmless."""
        return {
            "model": self.model_ref,
            "query_template": self.query_template,
            "document_template": self.document_template,
            "pooling": self.pooling,
            "pool_span": self.pool_span,
            "max_tokens": self.max_tokens_cap or None,
        }

    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        template = self.query_template if side == "query" else self.document_template
        tok = self.tokenizer
        items = [tokenize(tok, template, truncate(tok, t, self.max_tokens)) for t in texts]
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        for batch in token_batches([len(it.ids) for it in items], self.token_budget):
            rows = [items[i] for i in batch]
            inputs = left_pad([it.ids for it in rows], int(self.tokenizer.pad_token_id))
            weights = span_mask(rows, inputs["input_ids"].shape[1], self.pool_span)
            with torch.inference_mode():
                hidden = self._forward({k: v.to(self.device) for k, v in inputs.items()})
                out[batch] = pool(hidden, weights, self.pooling).cpu().numpy()
        return out

    def _forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Final-layer hidden states (batch, seq, dim), after the model's final norm."""
        return self.model(**inputs).last_hidden_state
