"""KV-Embedding (Tang & Yang, 2026): a frozen decoder LLM as an embedder in one forward pass.

In a few selected layers the final token's key and value (post-RoPE, as they sit in a KV cache)
are prepended to that layer's keys and values, so every position can attend to a summary of the
whole input despite the causal mask; the prefix logit gets a bias b (default 1.0). The input is
wrapped in a compression prompt and the embedding averages mean and last-token pooling of the
final layer. Layers default to the intrinsic-dimension minimum and the ⌊0.1·N⌋ after it
(`intrinsic_dim.py`). Open decisions of notes/encoders.md §4.4 are options: `rope` (R1: keep the
prefix key at its own position, or move it to virtual position -1), `pool_span` (R3), the
calibration (R4-R6, in `intrinsic_dim.py`). The last token sees its own key twice (R2).

The re-routing is an attention function registered with transformers' `AttentionInterface`
(`kv_sdpa`, `kv_eager`), so any HF decoder whose attention goes through that interface works
(tested: Llama, Mistral, Qwen2, Qwen3, Gemma3). Per call, the model gets a `reroute=Reroute(...)`
keyword that transformers hands down to every attention call; without it the model is plain.
Not here: the shared encoder plumbing (`decoder_common.py`), the baselines (`baselines.py`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from docsearch.encoders.base import one_of, register
from docsearch.encoders.decoder_common import DecoderEncoder, load_decoder
from docsearch.encoders.device import resolve_dtype
from docsearch.encoders.intrinsic_dim import calibrate
from docsearch.errors import UsageError

ROPE_MODES = ("keep", "virtual")
Rotation = tuple[torch.Tensor, torch.Tensor]  # cos, sin: (batch, 1, rotary_dim)


@dataclass(frozen=True)
class Reroute:
    """What one forward re-routes: the layers (0-indexed), the prefix bias, and for `virtual`
    RoPE the rotation per layer that moves each row's prefix key to position -1."""

    layers: frozenset[int]
    bias: float = 1.0
    shifts: dict[int, Rotation] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Pure tensor helpers


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply a RoPE rotation (rotate-half convention) to (batch, heads, seq, dim) `x`."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + turned * sin.unsqueeze(1)


def prefix_kv(
    key: torch.Tensor, value: torch.Tensor, shift: Rotation | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (batch, kv_heads, 1 + seq, dim) with the last token's pair in front.

    Rows are left-padded, so the last real token is the final column on every row.
    """
    k_last = key[:, :, -1:]  # (batch, kv_heads, 1, dim)
    if shift is not None:
        k_last = rotate(k_last, *shift)
    return torch.cat((k_last, key), dim=2), torch.cat((value[:, :, -1:], value), dim=2)


def bias_channel(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, shift: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Append channels so that q·k gains `shift` on the prefix key (column 0) only.

    The query's extra channel is 1, the prefix key's is `shift` (= b / scaling), every other
    key's is 0; values get zero channels to match (SDPA kernels want equal head dims), padded to
    a multiple of 8 so the fast kernels still apply. Slice the output back to the value dim.
    """
    dim = query.shape[-1]
    extra = (dim + 1 + 7) // 8 * 8 - dim
    q_pad = query.new_zeros(*query.shape[:-1], extra)
    q_pad[..., 0] = 1.0
    k_pad = keys.new_zeros(*keys.shape[:-1], extra)
    k_pad[:, :, 0, 0] = shift
    v_pad = values.new_zeros(*values.shape[:-1], extra)
    return (
        torch.cat((query, q_pad), -1),
        torch.cat((keys, k_pad), -1),
        torch.cat((values, v_pad), -1),
    )


def visible(mask: torch.Tensor | None, q_len: int, device: torch.device) -> torch.Tensor:
    """Boolean (batch|1, 1, q, kv) "may attend" mask: the given one, or plain causal for None."""
    if mask is None:
        return torch.ones(q_len, q_len, dtype=torch.bool, device=device).tril()[None, None]
    return mask if mask.dtype == torch.bool else mask == 0  # additive float mask: 0 = visible


def prefix_mask(mask: torch.Tensor | None, q_len: int, device: torch.device) -> torch.Tensor:
    """`visible` with an always-visible prefix column in front: (batch|1, 1, q, 1 + kv)."""
    seen = visible(mask, q_len, device)
    column = torch.ones(*seen.shape[:-1], 1, dtype=torch.bool, device=seen.device)
    return torch.cat((column, seen), dim=-1)


# ---------------------------------------------------------------------------------------------
# Attention with the prefix


def rerouted_sdpa(
    query: torch.Tensor,  # (batch, heads, seq, dim)
    key: torch.Tensor,  # (batch, kv_heads, seq, dim), post-RoPE
    value: torch.Tensor,  # (batch, kv_heads, seq, dim)
    mask: torch.Tensor | None,  # (batch, 1, seq, seq) bool, or None for plain causal
    scaling: float,
    bias: float,
    shift: Rotation | None,
) -> torch.Tensor:
    """SDPA with the prefix column; (batch, seq, heads, dim).

    Without padding (mask None) the causal kernel is kept by giving the prefix its own dummy
    query row in front: row r then sees keys 0..r, i.e. the prefix and tokens 0..r-1.
    """
    keys, values = prefix_kv(key, value, shift)
    dim = value.shape[-1]
    if bias:
        query, keys, values = bias_channel(query, keys, values, bias / scaling)
    groups = query.shape[1] // key.shape[1]
    if mask is None:
        padded = torch.cat((query[:, :, :1], query), dim=2)
        out = F.scaled_dot_product_attention(
            padded, keys, values, is_causal=True, scale=scaling, enable_gqa=groups > 1
        )[:, :, 1:]
    else:
        full = prefix_mask(mask, query.shape[2], query.device)
        keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
        out = F.scaled_dot_product_attention(query, keys, values, attn_mask=full, scale=scaling)
    return out[..., :dim].transpose(1, 2).contiguous()


def explicit_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    *,
    reroute: bool = False,
    bias: float = 0.0,
    shift: Rotation | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Attention written out: logits, prefix bias, mask, softmax in fp32; (batch, seq, heads, dim).

    The reference the SDPA path is tested against, the `attn="eager"` path, and the only one
    that supports logit soft-capping.
    """
    keys, values = prefix_kv(key, value, shift) if reroute else (key, value)
    groups = query.shape[1] // key.shape[1]
    keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
    logits = (query @ keys.transpose(-1, -2)).float() * scaling  # (batch, heads, seq, keys)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    if reroute:
        logits[..., 0] += bias
        seen = prefix_mask(mask, query.shape[2], query.device)
    else:
        seen = visible(mask, query.shape[2], query.device)
    logits = logits.masked_fill(~seen, float("-inf"))
    weights = torch.softmax(logits, dim=-1).nan_to_num(0.0).to(values.dtype)
    return (weights @ values).transpose(1, 2).contiguous()


def _attention(eager: bool) -> Any:
    """The function registered with transformers for `kv_sdpa` / `kv_eager`."""

    def attend(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        reroute: Reroute | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        layer = int(getattr(module, "layer_idx", -1))
        active = reroute is not None and layer in reroute.layers
        softcap = kwargs.get("softcap")
        if not (active or eager or softcap):
            return sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout, scale, **kwargs
            )
        bias = reroute.bias if reroute is not None else 0.0
        shift = reroute.shifts.get(layer) if reroute is not None else None
        if eager or softcap:
            out = explicit_attention(
                query, key, value, attention_mask, scale,
                reroute=active, bias=bias, shift=shift, softcap=softcap,
            )  # fmt: skip
        else:
            out = rerouted_sdpa(query, key, value, attention_mask, scale, bias, shift)
        return out, None

    return attend


AttentionInterface.register("kv_sdpa", _attention(eager=False))
AttentionInterface.register("kv_eager", _attention(eager=True))
AttentionMaskInterface.register("kv_sdpa", sdpa_mask)
AttentionMaskInterface.register("kv_eager", sdpa_mask)


# ---------------------------------------------------------------------------------------------
# Virtual position for the prefix key (R1)


def virtual_shifts(
    model: Any, layers: Sequence[int], lengths: torch.Tensor, dtype: torch.dtype
) -> dict[int, Rotation]:
    """Per layer, the rotation taking each row's last key from position len-1 to position -1.

    RoPE is a rotation by position, so moving a rotated key by Δ = -len is one more rotation;
    computed with the model's own rotary module (per layer type for Gemma3's two bases) and
    divided by its attention scaling, which the key already carries.
    """
    rotary = model.rotary_emb
    typed = "layer_type" in inspect.signature(rotary.forward).parameters
    layer_types = getattr(model.config, "layer_types", None) or [None] * len(model.layers)
    probe = torch.zeros(1, dtype=dtype, device=lengths.device)
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shifts: dict[int, Rotation] = {}
    for layer in layers:
        args = (layer_types[layer],) if typed else ()
        cos, sin = rotary(probe, -lengths[:, None], *args)  # (batch, 1, rotary_dim)
        unit, _ = rotary(probe, torch.zeros_like(lengths[:1, None]), *args)
        if cos.shape[-1] != head_dim:
            raise UsageError("rope='virtual' needs RoPE over the whole head dimension")
        shifts[layer] = (cos / unit[..., :1], sin / unit[..., :1])
    return shifts


# ---------------------------------------------------------------------------------------------
# The encoder


@register("kv-embedding", aliases=("kv",))
class KVEmbeddingEncoder(DecoderEncoder):
    """KV-Embedding on any HF decoder (default: SmolLM2-135M from PyPI).

    `layers`: "auto" (intrinsic-dimension calibration, cached) or explicit 0-indexed layers;
    an empty list gives the prompt-only ablation. `bias`: prefix logit bias b. `rope`: "keep"
    (the prefix key stays rotated at its own position) or "virtual" (moved to position -1).
    """

    name = "kv-embedding"
    query_template_default = "Query: {text}\nCompress the Query in one word:"
    document_template_default = "Context: {text}\nCompress the Context in one word:"
    pooling_default = "mean+last"
    allow_flash = False  # the prefix bias is added to the scores, which flash kernels cannot take
    kernel_names = {"sdpa": "kv_sdpa", "eager": "kv_eager"}

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        layers: Sequence[int] | str = "auto",
        bias: float = 1.0,
        rope: str = "keep",
        **options: Any,
    ) -> None:
        super().__init__(model, **options)
        self.rope = one_of("rope mode", rope, ROPE_MODES)
        self.bias = float(bias)
        self.layers = self._layers(layers)

    def _layers(self, layers: Sequence[int] | str) -> list[int]:
        n = int(self.model.config.num_hidden_layers)
        if isinstance(layers, str):
            if layers != "auto":
                raise UsageError(
                    f"layers must be 'auto' or a list of layer numbers, not {layers!r}"
                )
            found = calibrate(self.model, self.tokenizer, self.folder, self.document_template)
            return [int(x) for x in found["layers"]]
        chosen = sorted({int(x) for x in layers})
        if any(not 0 <= x < n for x in chosen):
            raise UsageError(f"layers must lie in 0..{n - 1} for this model, got {chosen}")
        return chosen

    def reroute(self, inputs: dict[str, torch.Tensor]) -> Reroute:
        shifts: dict[int, Rotation] = {}
        if self.rope == "virtual" and self.layers:
            lengths = inputs["attention_mask"].sum(-1)
            shifts = virtual_shifts(self.model, self.layers, lengths, self.torch_dtype)
        return Reroute(frozenset(self.layers), self.bias, shifts)

    def _forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**inputs, reroute=self.reroute(inputs)).last_hidden_state

    def vector_options(self) -> dict[str, Any]:
        return {
            **super().vector_options(),
            "layers": self.layers,
            "bias": self.bias,
            "rope": self.rope,
        }


def calibrate_layers(
    model: str = "smollm2-135m",
    *,
    texts: Sequence[str] | None = None,
    refresh: bool = False,
    dtype: str = "auto",
) -> dict[str, Any]:
    """Run (or read back) the layer calibration `layers="auto"` uses, for `docsearch models
    calibrate`. With `texts` (e.g. the user's own chunks) the result is cached separately and
    its `layers` are meant to be passed explicitly (`layers=[...]`)."""
    torch_dtype = resolve_dtype("cpu", dtype)
    net, tokenizer, folder = load_decoder(
        model, dtype=torch_dtype, device="cpu", attn_implementation="sdpa"
    )
    template = KVEmbeddingEncoder.document_template_default
    return calibrate(net, tokenizer, folder, template, texts=texts, refresh=refresh)
