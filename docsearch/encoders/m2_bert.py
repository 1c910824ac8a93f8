"""M2-BERT (Monarch Mixer BERT): our own module for the released 2k/8k/32k retrieval checkpoints.

Holds, top to bottom: the config reader; pure tensor helpers (the bidirectional FFT long
convolution, the block-diagonal "Monarch" matmul, next power of two); the modules of the forward in
`notes/encoders.md` 1.3 under the reference's state-dict names (embeddings, implicit Hyena filters
with one shared `freq`, the sequence mixer, the GLU block-diagonal MLP, the CLS pooler); the
checkpoint reader and key mapping of 1.4 (`model.`/`module.`/`bert.` prefixes, the six `freq`
aliases, dropped `flashfft`, `classifier.*` and `cls.*` keys); the checkpoint writer (released
folder layout); and the registered `m2-bert` encoder.

Padding contract: the mixer never sees an attention mask, so pad tokens (id 0 and their position
embeddings) take part in every convolution and the output depends on the padded length. The
checkpoints were used right-padded with id 0 to `max_position_embeddings`; the encoder does the
same by default (`padding="max_length"`). `padding="pow2"` pads to the next power of two at or
above the text instead: much faster for short texts, but the vectors differ from the reference.

Leaves out: the FlashFFTConv / FlashMM CUDA kernels (the pure `torch.fft` path runs on CPU and
GPU), the attention variant of M2 (ALiBi), the MLM head and pretraining
(`docsearch.training.m2_pretrain`), retrieval fine-tuning.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from docsearch.encoders.base import HFEncoder, check_keys, register
from docsearch.encoders.device import resolve_device, resolve_dtype
from docsearch.encoders.weights import resolve_model
from docsearch.errors import EncoderUnavailableError, UsageError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "togethercomputer/m2-bert-80M-32k-retrieval"
# The released checkpoints were trained with this tokenizer (vocab 30522, padded to 30528).
DEFAULT_TOKENIZER = "google-bert/bert-base-uncased"
PADDINGS = ("max_length", "pow2")
# The mixer runs this many channels at a time, from their rows of in_linear through the short conv,
# the kernels and both FFT convolutions, so every tensor it makes is a block wide: at 32k tokens
# that took a forward from 89 s to 41 s (benchmarks/m2_scaling.py).
CHANNEL_BLOCK = 64
# The GLU MLP runs this many positions at a time: its (L, 2 x 3072) intermediate is 400 MB at
# 32k tokens in bfloat16, and a tensor that size costs more per element (page faults, no cache).
ROW_BLOCK = 2048
# Config flags whose other values select M2 variants we do not implement (value = what we need).
_REQUIRED_FLAGS = {
    "bidirectional": True,
    "residual_long_conv": True,
    "use_glu_mlp": True,
    "use_monarch_mlp": True,
    "use_positional_encodings": True,
    "pool_all": False,
    "monarch_mixer_sequence_mixing": True,
    "hyena_training_additions": False,
    "use_flash_mm": False,
}
# State-dict keys that are not part of the encoder: FlashFFTConv buffers, task and MLM heads.
_DROPPED_PREFIXES = ("classifier.", "cls.")
# The shape `m2_pretrain --shape tiny` starts a new model in (and the tests build).
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "max_position_embeddings": 128,
    "long_conv_l_max": 128,
    "hyena_filter_order": 16,
}
_FREQ_SLOTS = tuple(
    f"{mlp}.{i}.freq" for mlp in ("implicit_filter", "implicit_filter_rev") for i in (1, 3, 5)
)


# ---------------------------------------------------------------------------------------------
# Config


@dataclass(frozen=True)
class M2Config:
    """The fields of a released `config.json` that change the forward (defaults: the 80M shape)."""

    vocab_size: int = 30528
    hidden_size: int = 768
    num_hidden_layers: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 32768
    long_conv_l_max: int = 32768
    type_vocab_size: int = 2
    pad_token_id: int = 0
    hyena_emb_dim: int = 5
    hyena_filter_order: int = 128
    hyena_w: float = 10.0
    hyena_w_mod: float = 1.0
    monarch_mlp_nblocks: int = 4
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> M2Config:
        """Read a released config.json dict; refuse variants this module does not compute."""
        for flag, needed in _REQUIRED_FLAGS.items():
            if flag in raw and bool(raw[flag]) != needed:
                raise EncoderUnavailableError(
                    f"this M2 checkpoint sets {flag}={raw[flag]!r}; docsearch implements the "
                    f"released retrieval configuration ({flag}={needed}) only"
                )
        if "hyena_filter_order" not in raw and "long_conv_l_max" not in raw:
            raise EncoderUnavailableError(
                "config.json has no M2 fields (hyena_filter_order, long_conv_l_max); "
                "is this an M2-BERT checkpoint folder?"
            )
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values.setdefault("long_conv_l_max", values.get("max_position_embeddings", 32768))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """A config.json in the released layout (so the reference code could load it too)."""
        return {
            "architectures": ["BertForSequenceClassification"],
            "model_type": "m2_bert",
            **asdict(self),
            "alibi_starting_size": self.max_position_embeddings,
            "num_attention_heads": 12,
            "position_embedding_type": "absolute",
            "hidden_act": "gelu",
            "attention_probs_dropout_prob": 0.0,
            **_REQUIRED_FLAGS,
            "use_flash_fft": False,
        }


# ---------------------------------------------------------------------------------------------
# Pure tensor helpers


def fft_long_conv(u: torch.Tensor, k_fwd: torch.Tensor, k_rev: torch.Tensor) -> torch.Tensor:
    """Bidirectional per-channel convolution, without the skip term.

    `y[c,t] = sum_{s<=t} k_fwd[c,s] u[c,t-s] + sum_{j=1..L-1-t} k_rev[c,j-1] u[c,t+j]`.
    One kernel of length 2L, `[k_fwd, flip(k_rev)]`, circularly convolved with u zero-padded to
    2L: the wrap-around lands exactly on the anti-causal taps and never on real data. FFTs run in
    float32 at least (torch.fft has no bfloat16 on CPU).
    """
    length = u.shape[-1]
    work = torch.promote_types(u.dtype, torch.float32)
    kernel = torch.cat([k_fwd, k_rev.flip(-1)], dim=-1).to(work)  # (channels, 2L)
    padded = u.new_empty((*u.shape[:-1], 2 * length), dtype=work)
    padded[..., :length] = u  # the cast and the zero padding in one pass over u
    padded[..., length:] = 0
    u_f = torch.fft.rfft(padded)  # (batch, channels, L+1)
    k_f = torch.fft.rfft(kernel)  # (channels, L+1)
    y = torch.fft.irfft(u_f * k_f, n=2 * length)[..., :length]  # (batch, channels, L)
    return y.to(u.dtype)


def blockdiag_blocks(x: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    """The output slices of `x @ block_diag(*weight).T`, one per block, each contiguous.

    `weight` is (nblocks, out/nblocks, in/nblocks); block k maps input slice k to output slice
    k. One GEMM per block on a strided input view: no permuted copies (an einsum makes two).
    """
    width = weight.shape[2]
    return [F.linear(x[..., k * width : (k + 1) * width], w) for k, w in enumerate(weight)]


def blockdiag_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x @ block_diag(*weight).T` without building the dense matrix."""
    return torch.cat(blockdiag_blocks(x, weight), dim=-1)


def next_power_of_two(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _filter_features(max_len: int, emb_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Initial Hyena positional features `z = [t, cos(f w), -sin(f w)]` and `t`, float32 like the
    reference (`t = linspace(0, 1, L)`, `w = 2 pi arange(L) / L`, bands f = linspace(1e-4, 1))."""
    t = torch.linspace(0, 1, max_len)[None, :, None]  # (1, L, 1)
    bands = (emb_dim - 1) // 2
    w = 2 * math.pi * torch.linspace(0, max_len - 1, max_len)[None, :, None] / max_len
    f = torch.linspace(1e-4, bands - 1, bands)[None, None]  # (1, 1, bands)
    z = torch.cat([t, torch.cos(f * w), -torch.sin(f * w)], dim=-1)  # (1, L, emb_dim)
    return z, t


# ---------------------------------------------------------------------------------------------
# Modules (attribute names = the reference's state-dict names)


class M2Embeddings(nn.Module):
    """Word + token-type 0 + absolute position embeddings, then LayerNorm and dropout."""

    position_ids: torch.Tensor

    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.word_embeddings = nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, d)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, d)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(cfg.max_position_embeddings)[None])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        positions = self.position_ids[:, :length]  # (1, L)
        x = self.word_embeddings(input_ids)  # (B, L, d)
        x = x + self.token_type_embeddings.weight[0] + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))


class Sin(nn.Module):
    """`sin(w_mod * freq * x)`; one instance (one `freq`) serves all six Sin slots of a filter."""

    def __init__(self, order: int, w: float, w_mod: float) -> None:
        super().__init__()
        self.freq = nn.Parameter(torch.full((1, order), float(w)))
        self.w_mod = w_mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.w_mod * self.freq * x)


class PositionalFeatures(nn.Module):
    """The learned feature table `z` (trained, must be loaded) and the time grid `t` (buffer)."""

    t: torch.Tensor

    def __init__(self, max_len: int, emb_dim: int) -> None:
        super().__init__()
        z, t = _filter_features(max_len, emb_dim)
        self.z = nn.Parameter(z)  # (1, Lmax, emb_dim)
        self.register_buffer("t", t)  # (1, Lmax, 1)


class Modulation(nn.Module):
    """Exponential decay `exp(-t |deltas|)` per channel (`deltas` is a float32-valued buffer)."""

    deltas: torch.Tensor

    def __init__(self, d: int) -> None:
        super().__init__()
        deltas = torch.linspace(math.log(1e-2) / 1.5, math.log(1e-2) / 0.3, d)
        self.register_buffer("deltas", deltas[None, None])  # (1, 1, d)


class ImplicitFilter(nn.Module):
    """Hyena filter: an MLP over positional features gives the forward and reverse kernels.

    `bias` is the per-channel skip `D` of the long convolution. The forward and reverse MLPs
    have their own linears but share the `Sin` module (so `freq` has six state-dict names).
    """

    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        d, order = cfg.hidden_size, cfg.hyena_filter_order
        self.bias = nn.Parameter(torch.randn(d))
        self.pos_emb = PositionalFeatures(cfg.long_conv_l_max, cfg.hyena_emb_dim)
        self.modulation = Modulation(d)
        sin = Sin(order, cfg.hyena_w, cfg.hyena_w_mod)
        self.implicit_filter = self._mlp(cfg.hyena_emb_dim, order, d, sin)
        self.implicit_filter_rev = self._mlp(cfg.hyena_emb_dim, order, d, sin)

    @staticmethod
    def _mlp(emb_dim: int, order: int, d: int, sin: Sin) -> nn.Sequential:
        return nn.Sequential(
            nn.Linear(emb_dim, order), sin,
            nn.Linear(order, order), sin,
            nn.Linear(order, order), sin,
            nn.Linear(order, d, bias=False),
        )  # fmt: skip

    def features(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward and reverse MLPs' last hidden layers, each (order, L): all of the kernel
        work that every channel shares, computed once per forward."""
        z = self.pos_emb.z[0, :length]  # (L, emb_dim)
        return self.implicit_filter[:-1](z).T, self.implicit_filter_rev[:-1](z).T

    def kernels(
        self,
        length: int,
        channels: slice = slice(None),
        features: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and reverse kernels of `channels` for sequence length `length`, each (d, L).

        Features are the first L rows of the tables (no renormalisation), so the kernel at a
        shorter length is the prefix of the kernel at a longer one. Computed channels-first
        (`W h^T`), the layout the FFT wants, so no (L, d) tensor is ever transposed.
        """
        h_fwd, h_rev = features if features is not None else self.features(length)
        t = self.pos_emb.t[0, :length, 0]  # (L,)
        decay = torch.exp(-self.modulation.deltas[0, 0, channels, None].abs() * t)  # (d, L)
        k_fwd = (_output_weight(self.implicit_filter)[channels] @ h_fwd) * decay
        k_rev = (_output_weight(self.implicit_filter_rev)[channels] @ h_rev) * decay
        return k_fwd, k_rev


def _output_weight(mlp: nn.Sequential) -> torch.Tensor:
    """The (d, order) weight of a filter MLP's last, bias-free linear."""
    last = mlp[-1]
    assert isinstance(last, nn.Linear)
    return last.weight


class MonarchMixerSequenceMixing(nn.Module):
    """The sequence mixer (`attention.*`): gated implicit long convolution plus a residual one.

    No attention mask and no residual around it; its skip paths are the `D u` terms.
    """

    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.d = d
        self.in_linear = nn.Linear(d, 3 * d)
        self.short_filter = nn.Conv1d(3 * d, 3 * d, kernel_size=3, groups=3 * d, padding=2)
        self.out_linear = nn.Linear(d, d)
        self.filter_fn = ImplicitFilter(cfg)
        self.filter_fn2 = ImplicitFilter(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length, d = x.shape[1], self.d
        # Channels-first from here: every block below reads rows of u, never a strided gather
        # across a (L, d) tensor (which at 32k tokens costs 4x more per element than at 2k).
        u = x.transpose(1, 2).contiguous()  # (B, d, L): the layer input, for the residual conv
        features1, features2 = self.filter_fn.features(length), self.filter_fn2.features(length)
        d1, d2 = self.filter_fn.bias[:, None].to(u.dtype), self.filter_fn2.bias[:, None].to(u.dtype)
        y = x.new_empty(x.shape[0], d, length)  # (B, d, L)
        for start in range(0, d, CHANNEL_BLOCK):  # channels are independent until out_linear
            c = slice(start, min(start + CHANNEL_BLOCK, d))
            x1, x2, v = self._projections(u, c)  # each (B, c, L)
            kf1, kr1 = self.filter_fn.kernels(length, c, features1)  # (c, L) each
            kf2, kr2 = self.filter_fn2.kernels(length, c, features2)
            gated = v * x1
            y1 = fft_long_conv(gated, kf1, kr1) + gated * d1[c]
            y2 = fft_long_conv(u[:, c], kf2, kr2) + u[:, c] * d2[c]  # residual long conv
            y[:, c] = y1 * x2 + y2
        return self.out_linear(y.transpose(1, 2))  # (B, L, d)

    def _projections(self, u: torch.Tensor, c: slice) -> tuple[torch.Tensor, ...]:
        """`in_linear` then the causal short conv, for channels `c` of each of x1, x2 and v.

        Both are per channel, so a block needs only its rows of the weights: every (B, ., L)
        tensor of the mixer is then a block's width, not 3d, which keeps long sequences cheap.
        `W u` on the channels-first input gives the conv its layout without a transpose.
        """
        rows = torch.cat(
            [torch.arange(d0 + c.start, d0 + c.stop) for d0 in (0, self.d, 2 * self.d)]
        )
        z = torch.matmul(self.in_linear.weight[rows], u) + self.in_linear.bias[rows, None]
        conv_weight, conv_bias = self.short_filter.weight, self.short_filter.bias
        assert conv_bias is not None
        z = F.conv1d(z, conv_weight[rows], conv_bias[rows], padding=2, groups=len(rows))
        return z[..., : u.shape[-1]].split(c.stop - c.start, dim=1)  # causal: t sees t-2..t


class BlockdiagLinear(nn.Module):
    """Block-diagonal linear; `weight` is (nblocks, out/nblocks, in/nblocks)."""

    def __init__(self, d_in: int, d_out: int, nblocks: int, bias: bool = True) -> None:
        super().__init__()
        if d_in % nblocks or d_out % nblocks:
            raise ValueError(f"sizes {d_in}->{d_out} are not divisible by {nblocks} blocks")
        self.weight = nn.Parameter(torch.empty(nblocks, d_out // nblocks, d_in // nblocks))
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = blockdiag_matmul(x, self.weight)
        return out + self.bias if self.bias is not None else out


class GatedMonarchMLP(nn.Module):
    """`LayerNorm(BD_out(GELU(gate) * value) + x)` with `[gate | value] = BD_in(x)`.

    With an even number of blocks the gate is exactly the first half of the blocks, so the
    GLU runs block by block on contiguous tensors (GELU on a strided half-slice is ~3x slower).
    """

    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        d, inner, nb = cfg.hidden_size, cfg.intermediate_size, cfg.monarch_mlp_nblocks
        self.inner = inner
        self.gated_layers = BlockdiagLinear(d, 2 * inner, nb, bias=False)
        self.wo = BlockdiagLinear(inner, d, nb)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.layernorm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] <= ROW_BLOCK:
            return self._forward_rows(x)
        rows = x.split(ROW_BLOCK, dim=1)  # per position, so blocks of rows give the same result
        return torch.cat([self._forward_rows(r) for r in rows], dim=1)

    def _forward_rows(self, x: torch.Tensor) -> torch.Tensor:
        blocks = blockdiag_blocks(x, self.gated_layers.weight)  # nblocks x (B, L, 2I/nblocks)
        half = len(blocks) // 2
        if len(blocks) % 2 == 0:
            parts = [F.gelu(a) * b for a, b in zip(blocks[:half], blocks[half:], strict=True)]
            g = torch.cat(parts, dim=-1)  # (B, L, I)
        else:
            h = torch.cat(blocks, dim=-1)  # (B, L, 2I)
            g = F.gelu(h[..., : self.inner]) * h[..., self.inner :]
        return self.layernorm(self.wo(self.dropout(g)) + x)


class M2Layer(nn.Module):
    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        self.attention = MonarchMixerSequenceMixing(cfg)
        self.mlp = GatedMonarchMLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x))


class M2Encoder(nn.Module):
    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        self.layer = nn.ModuleList(M2Layer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class M2Pooler(nn.Module):
    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, d): the CLS row


class M2BertModel(nn.Module):
    """The bare M2-BERT: `forward(input_ids) -> (last_hidden_state, pooled_output)`.

    Its state-dict keys are the reference `BertModel`'s (the checkpoints add a `bert.` prefix).
    `input_ids` must already be padded as the checkpoint expects (see the module docstring).
    """

    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = M2Embeddings(cfg)
        self.encoder = M2Encoder(cfg)
        self.pooler = M2Pooler(cfg)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT-style init for linears/embeddings/LayerNorms; filters keep their Hyena init."""
        std = self.config.initializer_range
        for name, module in self.named_modules():
            if "filter_fn" in name:
                continue
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, BlockdiagLinear):
                nn.init.normal_(module.weight, std=std)
        with torch.no_grad():  # the pad row starts at zero, as in BERT
            self.embeddings.word_embeddings.weight[self.config.pad_token_id].zero_()

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        length = input_ids.shape[1]
        limit = min(self.config.max_position_embeddings, self.config.long_conv_l_max)
        if length > limit:
            raise ValueError(f"sequence length {length} exceeds the model's {limit}")
        hidden = self.encoder(self.embeddings(input_ids))  # (B, L, d)
        return hidden, self.pooler(hidden)


# ---------------------------------------------------------------------------------------------
# Checkpoints: reading, key mapping, writing


@dataclass
class LoadReport:
    """What `load_released_state_dict` did with the checkpoint's keys (original names); a
    missing or unexpected key is an error."""

    dropped: list[str]  # flashfft buffers, classifier / MLM head
    filled: list[str]  # freq aliases and position_ids the checkpoint did not carry


def find_weights_file(folder: Path) -> Path:
    """`model.safetensors`, else `pytorch_model.bin`, else the only other weights file."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    candidates = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("pytorch_model*.bin"))
    if len(candidates) == 1:
        return candidates[0]
    found = ", ".join(p.name for p in candidates) or "none"
    raise EncoderUnavailableError(
        f"{folder} needs exactly one M2 weights file (model.safetensors or pytorch_model.bin); "
        f"found: {found}"
    )


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file or a plain (weights-only) PyTorch pickle."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "unreadable"
        raise EncoderUnavailableError(f"could not read the weights in {path}: {exc}") from exc
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise EncoderUnavailableError(f"{path} is not a flat state dict of tensors")
    return state


def strip_checkpoint_prefixes(key: str) -> str:
    """`model.bert.x`, `module.bert.x`, `bert.x` -> `x` (composer, DDP and task wrappers)."""
    while key.startswith(("model.", "module.", "bert.")):
        key = key.split(".", 1)[1]
    return key


def _fill_freq_aliases(state: dict[str, torch.Tensor], model_keys: set[str]) -> list[str]:
    """Each filter's one `freq` tensor has six names; a checkpoint may carry any of them.

    Checks that the names present agree (they are one tensor in the reference) and fills the
    others, so a safetensors export that kept a single alias loads too.
    """
    filled = []
    filters = sorted(
        {k.rsplit(".implicit_filter", 1)[0] for k in model_keys if k.endswith(".freq")}
    )
    for prefix in filters:
        names = [f"{prefix}.{slot}" for slot in _FREQ_SLOTS]
        present = [state[n] for n in names if n in state]
        if not present:
            continue  # reported as missing
        if any(not torch.equal(p, present[0]) for p in present[1:]):
            raise EncoderUnavailableError(
                f"the checkpoint's freq aliases of {prefix} differ; they must be one tensor"
            )
        for name in names:
            if name not in state:
                state[name] = present[0]
                filled.append(name)
    return filled


def load_released_state_dict(model: M2BertModel, state: dict[str, torch.Tensor]) -> LoadReport:
    """Load a checkpoint with the released key names into `model` (rules of notes 1.4)."""
    model_keys = set(model.state_dict())
    mapped: dict[str, torch.Tensor] = {}
    dropped = []
    for key, value in state.items():
        inner = strip_checkpoint_prefixes(key)
        if "flashfft" in inner or inner.startswith(_DROPPED_PREFIXES):
            dropped.append(key)
        else:
            mapped[inner] = value
    filled = _fill_freq_aliases(mapped, model_keys)
    if "embeddings.position_ids" not in mapped:  # newer exports drop this constant buffer
        mapped["embeddings.position_ids"] = model.embeddings.position_ids.clone()
        filled.append("embeddings.position_ids")
    check_keys(set(mapped), model_keys)
    try:
        model.load_state_dict(mapped)
    except RuntimeError as exc:  # shape mismatches
        raise EncoderUnavailableError(
            f"the checkpoint does not match its config.json: {exc}"
        ) from exc
    return LoadReport(sorted(dropped), sorted(filled))


def read_config(folder: Path) -> M2Config:
    path = folder / "config.json"
    if not path.is_file():
        raise EncoderUnavailableError(f"{folder} has no config.json; it is not a model folder")
    return M2Config.from_dict(json.loads(path.read_text(encoding="utf-8")))


def cast_model(model: M2BertModel, dtype: torch.dtype) -> M2BertModel:
    """Cast for inference; in 16-bit the filter MLPs stay float32 (`sin(freq x)` with x of a
    few tens is noise in bfloat16, and the kernels are input-independent so it costs little)."""
    model.to(dtype)
    if dtype in (torch.bfloat16, torch.float16):
        for module in model.modules():
            if isinstance(module, ImplicitFilter):
                module.float()
    return model


def load_model(
    folder: Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> M2BertModel:
    """An eval-mode M2BertModel from a folder with config.json and released-layout weights.

    The model takes its dtype before the weights arrive, so each tensor is rounded once, from
    the checkpoint's precision straight to the one it is kept in: a float64 checkpoint loads
    exactly in float64, and the 16-bit model's float32 filter MLPs get float32 weights (casting
    after loading would pass every weight through float32, and the filters through 16 bits).
    """
    model = cast_model(M2BertModel(read_config(folder)), dtype)
    load_released_state_dict(model, read_state_dict(find_weights_file(folder)))
    return model.to(device).eval()


def save_checkpoint(
    model: M2BertModel,
    folder: str | Path,
    *,
    tokenizer: Any = None,
    extra: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write config.json + model.safetensors (keys `bert.*`, every freq alias its own copy,
    since safetensors refuses shared tensors) and the tokenizer files, in the released layout."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    state = {
        f"bert.{k}": v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()
    }
    state.update({k: v.detach().cpu().clone().contiguous() for k, v in (extra or {}).items()})
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


# ---------------------------------------------------------------------------------------------
# Tokenizers


def _ensure_lowercasing(tokenizer: Any) -> None:
    """Turn lowercasing back on for an uncased vocab whose tokenizer does not lowercase.

    transformers 5 rebuilds a BertTokenizer's normalizer from tokenizer_config.json, and the
    released M2 repos say `do_lower_case: false` next to the bert-base-uncased vocab: every
    capitalised word would silently become [UNK].
    """
    vocab = tokenizer.get_vocab()
    if any(t != t.lower() for t in vocab if not (t.startswith("[") and t.endswith("]"))):
        return  # a cased vocab: leave it alone
    encode = tokenizer.backend_tokenizer.encode
    if encode("Word", add_special_tokens=False).ids == encode("word", add_special_tokens=False).ids:
        return
    from tokenizers import normalizers

    tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    logger.info("m2-bert: the tokenizer did not lowercase for an uncased vocab; lowercasing on")


def _tokenizer_from(source: str) -> Any:
    """A folder's tokenizer.json as written (the class named in tokenizer_config.json may
    rebuild the pipeline differently), a folder's vocab.txt as BERT WordPiece, or a Hub id."""
    from transformers import AutoTokenizer, BertTokenizer, PreTrainedTokenizerFast

    folder = Path(source)
    if (folder / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(source)
    if (folder / "vocab.txt").is_file():
        return BertTokenizer.from_pretrained(source)
    if folder.is_dir():
        raise OSError(f"{source} has no tokenizer.json or vocab.txt")
    return AutoTokenizer.from_pretrained(source)


def load_tokenizer(folder: Path, ref: str | None = None) -> Any:
    """The tokenizer in `folder`, else `ref` (a folder or Hub id; default bert-base-uncased)."""
    has_own = any((folder / f).is_file() for f in ("tokenizer.json", "vocab.txt"))
    source = str(folder) if ref is None and has_own else (ref or DEFAULT_TOKENIZER)
    try:
        tokenizer = _tokenizer_from(source)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EncoderUnavailableError(
            f"could not load the tokenizer {source!r} ({reason}); put the bert-base-uncased "
            "tokenizer files (tokenizer.json, tokenizer_config.json, vocab.txt) in the model "
            "folder or pass tokenizer=<folder>"
        ) from exc
    _ensure_lowercasing(tokenizer)
    tokenizer.model_max_length = 1 << 30  # we count and truncate ourselves (never silently)
    return tokenizer


# ---------------------------------------------------------------------------------------------
# The registered encoder


def _absolute_if_folder(ref: str) -> str:
    path = Path(ref).expanduser()
    return str(path.resolve()) if path.is_dir() else ref


@register("m2-bert", aliases=("m2",))
class M2BertEncoder(HFEncoder):
    """Whole-document M2-BERT embeddings: the CLS pooler output, L2-normalised.

    Queries and documents are encoded alike (no prompts), as in the LoCo evaluation. Each text
    becomes `[CLS] tokens [SEP]`, right-padded with id 0 to the configured length
    (`padding="max_length"`, the checkpoints' contract) or to the next power of two
    (`padding="pow2"`, faster, different vectors). Texts over `max_tokens` are truncated with a
    warning and counted in `truncated` (the indexer chunks to `max_tokens`, so this is rare).
    The reference does not normalise the pooler output; cosine scores are the same.
    """

    name = "m2-bert"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        tokenizer: str | None = None,
        padding: str = "max_length",
        dtype: str = "float32",
        device: str | None = None,
        tokens_per_batch: int = 32768,
    ) -> None:
        if padding not in PADDINGS:
            raise UsageError(f"padding must be one of {', '.join(PADDINGS)}, not {padding!r}")
        self.device = torch.device(resolve_device(device))
        torch_dtype = resolve_dtype(str(self.device), dtype)
        # A local folder is recorded as an absolute path: the spec must rebuild the encoder from
        # any working directory (`docsearch search` run elsewhere than `docsearch index`).
        self.model_ref = _absolute_if_folder(model)
        self.tokenizer_ref = tokenizer and _absolute_if_folder(tokenizer)
        self.padding, self.dtype_name = padding, str(torch_dtype).removeprefix("torch.")
        folder = resolve_model(model)
        self._model = load_model(folder, torch_dtype, self.device)
        self.tokenizer = load_tokenizer(folder, tokenizer)
        cfg = self._model.config
        if len(self.tokenizer) > cfg.vocab_size:
            raise EncoderUnavailableError(
                f"the tokenizer has {len(self.tokenizer)} tokens but the model only "
                f"{cfg.vocab_size}; pass the tokenizer the checkpoint was trained with"
            )
        self.seq_len = min(cfg.max_position_embeddings, cfg.long_conv_l_max)
        self.dim = cfg.hidden_size
        self.max_tokens: int | None = self.seq_len - 2  # minus [CLS] and [SEP]
        self.tokens_per_batch = tokens_per_batch
        self.truncated = 0  # texts cut to max_tokens since construction

    def input_ids(self, text: str) -> list[int]:
        """`[CLS] tokens [SEP]`, unpadded; cut to `max_tokens` with a warning when longer."""
        ids: list[int] = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if len(ids) > self.seq_len:
            self.truncated += 1
            logger.warning(
                "m2-bert: a text of %d tokens was truncated to max_tokens=%d; chunk it first",
                len(ids) - 2,
                self.seq_len - 2,
            )
            ids = [*ids[: self.seq_len - 1], ids[-1]]  # keep the final [SEP]
        return ids

    def padded_length(self, n_ids: int) -> int:
        """The length a sequence of `n_ids` ids is padded to."""
        if self.padding == "max_length":
            return self.seq_len
        return min(self.seq_len, next_power_of_two(n_ids))

    def _batches(self, rows: list[list[int]]) -> list[tuple[int, list[int]]]:
        """Row indices grouped by padded length (a vector never depends on its batch-mates)."""
        groups: dict[int, list[int]] = {}
        for i, ids in enumerate(rows):
            groups.setdefault(self.padded_length(len(ids)), []).append(i)
        batches = []
        for length, idx in sorted(groups.items()):
            size = max(1, self.tokens_per_batch // length)
            batches += [(length, idx[s : s + size]) for s in range(0, len(idx), size)]
        return batches

    @torch.inference_mode()
    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        """Queries and documents alike."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        rows = [self.input_ids(t) for t in texts]
        pad = self._model.config.pad_token_id
        for length, idx in self._batches(rows):
            ids = torch.full((len(idx), length), pad, dtype=torch.long)  # (batch, L)
            for j, i in enumerate(idx):
                ids[j, : len(rows[i])] = torch.tensor(rows[i])
            _, pooled = self._model(ids.to(self.device))  # (batch, d)
            out[idx] = pooled.float().cpu().numpy()
        return out

    def vector_options(self) -> dict[str, Any]:
        """Options left at their defaults are left out, as the first specs stored them."""
        return {
            "model": self.model_ref,
            "tokenizer": self.tokenizer_ref or None,
            "padding": None if self.padding == "max_length" else self.padding,
            "dtype": None if self.dtype_name == "float32" else self.dtype_name,
        }
