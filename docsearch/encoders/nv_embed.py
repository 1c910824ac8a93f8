"""NV-Embed: a bidirectional decoder pooled by latent attention (Lee et al., ICLR 2025).

Top to bottom:
1. Licence and instructions: the released checkpoints are CC-BY-NC-4.0; queries carry
   `Instruct: {task}\\nQuery: `, passages nothing (the model card's retrieval setting).
2. The latent-attention block: the decoder's hidden states are the queries, trainable latents
   (512 in the release) the keys and values, 8 heads, then a GEGLU MLP, each with a residual,
   then the mean over the pool mask. Every token is transformed on its own (no mask needed).
3. Inputs: `instruction + text + eos_token` (the literal EOS string), BOS added, right padding,
   and the pool mask: the attention mask with its first `len(tokenizer.tokenize(instruction))`
   positions zeroed. That count leaves out the BOS, which takes one of the zeroed slots; the
   rule is applied literally, as the reference (and the candle port) does.
4. Loading: a released folder or Hub id by its state-dict prefixes (`embedding_model.*`,
   `latent_attention_model.*`), strictly, into our own modules (the decoder is llm2vec's
   bidirectional one); or a base decoder plus an adapter folder from `nv_embed_train`.
5. The `nv-embed` encoder.

Not here: training (`docsearch.training.nv_embed_train`); fp16 autocast (the reference's GPU
path; pick `dtype` instead); the reference's `trust_remote_code` classes (never executed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from docsearch.encoders.base import HFEncoder, check_keys, one_of, register
from docsearch.encoders.batching import longest_first
from docsearch.encoders.decoder_common import masked_mean
from docsearch.encoders.device import choose
from docsearch.encoders.llm2vec import (
    bidirectional_hidden_states,
    check_model_type,
    load_decoder,
    load_tokenizer,
    make_bidirectional,
    merge_adapter,
)
from docsearch.encoders.weights import NV_EMBED_LICENCE, NV_EMBED_RELEASES, resolve_model
from docsearch.errors import EncoderUnavailableError, UsageError

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# 1. Licence and instructions

# The catalogue rows (hub id, licence, note) live in weights.py, which `models list` imports
# without torch.
LICENCE, RELEASED_MODELS = NV_EMBED_LICENCE, NV_EMBED_RELEASES
LICENCE_NOTICE = (
    "NV-Embed weights and code are licensed CC-BY-NC-4.0: non-commercial use only "
    "(https://creativecommons.org/licenses/by-nc/4.0/)"
)
DEFAULT_MODEL = "nvidia/NV-Embed-v2"
DEFAULT_TASK = "Given a question, retrieve passages that answer the question"
# Task instructions for ../shared/data. scifact: the MTEB SciFact instruction of the E5-Mistral
# / NV-Embed evaluations (exact NV-Embed string not checked here); qmsum: ours, no MTEB task.
TASKS = {
    "default": DEFAULT_TASK,
    "scifact": "Given a scientific claim, retrieve documents that support or refute the claim",
    "qmsum": "Given a question about a meeting, retrieve the meeting transcript that answers it",
}


def query_instruction(task: str = DEFAULT_TASK) -> str:
    """The model card's query prefix for a task: `Instruct: {task}\\nQuery: `."""
    return f"Instruct: {task}\nQuery: "


DEFAULT_QUERY_INSTRUCTION = query_instruction()
DEFAULT_MAX_LENGTH = 4096  # the reference `encode` default
DECODER_PREFIX = "embedding_model."
LATENT_PREFIX = "latent_attention_model."
NVEMBED_MODEL_TYPE = "nvembed"
ADAPTER_CONFIG_FILE = "nv_embed_config.json"  # marks an adapter folder of ours
LATENT_FILE = "latent_attention.safetensors"
LORA_CONFIG_FILE = "adapter_config.json"
POOLINGS = ("latent", "mean")  # "mean": the block left out (the mean-pooling baseline)


def licence_for(model_ref: str, config: dict[str, Any] | None = None) -> str | None:
    """The non-commercial licence when `model_ref` is a released NV-Embed (Hub id or folder)."""
    if any(model_ref.split("@")[0] == hub_id for hub_id, _, _ in RELEASED_MODELS):
        return LICENCE
    if config and config.get("model_type") == NVEMBED_MODEL_TYPE:
        return str(config.get("license", LICENCE))
    return None


# ---------------------------------------------------------------------------------------------
# 2. The latent-attention block


@dataclass(frozen=True)
class LatentAttentionConfig:
    """The released `latent_attention_config` fields, with the release's defaults.

    `hidden_dim` and `latent_dim` must both equal the decoder's hidden size (the reference
    mixes them up and only works when they agree); the attention width is heads x head size.
    """

    num_latents_value: int = 512
    latent_dim: int = 4096
    hidden_dim: int = 4096
    num_cross_heads: int = 8
    cross_dim_head: int = 4096
    output_normalize: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatentAttentionConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def for_decoder(
        cls, hidden: int, *, latents: int = 512, heads: int = 8, head_dim: int | None = None
    ) -> LatentAttentionConfig:
        """The release's shape on a decoder of width `hidden` (head size = hidden by default)."""
        return cls(latents, hidden, hidden, heads, head_dim or hidden)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "model_type": "latent_attention"}


class CrossAttention(nn.Module):
    """Multi-head attention of every token (queries) over the latents (keys, values).

    Keys as released: `to_q` (no bias), `to_kv` (keys then values, no bias), `to_out` (no bias).
    No mask: each token attends to all latents and never to other tokens.
    """

    def __init__(self, dim: int, context_dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(context_dim, 2 * inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        q = self.to_q(x).unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)
        k, v = self.to_kv(context).chunk(2, dim=-1)  # (latents, heads*head_dim) each
        k = k.unflatten(-1, (self.heads, self.head_dim)).transpose(0, 1)  # (heads, latents, hd)
        v = v.unflatten(-1, (self.heads, self.head_dim)).transpose(0, 1)
        out = F.scaled_dot_product_attention(  # softmax(q k^T / sqrt(head_dim)) v
            q, k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)
        )  # (batch, heads, seq, head_dim)
        return self.to_out(out.transpose(1, 2).flatten(2))  # (batch, seq, dim)


class GEGLU(nn.Module):
    """`a * gelu(g)` for the halves `[a | g]` of the last dimension (erf GELU)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, gate = x.chunk(2, dim=-1)
        return a * F.gelu(gate)


class FeedForward(nn.Module):
    """`net.0` (dim -> 8 dim, bias), GEGLU, `net.2` (4 dim -> dim, bias), as released."""

    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, 2 * mult * dim), GEGLU(), nn.Linear(mult * dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PreNorm(nn.Module):
    """`cross_attend_blocks.N`: LayerNorm on the tokens (`norm`) and, for the attention block, on
    the latents (`norm_context`), then `fn`."""

    def __init__(self, fn: nn.Module, dim: int, context_dim: int | None = None) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if context_dim else None
        self.fn = fn

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        if self.norm_context is None:
            return self.fn(self.norm(x))
        return self.fn(self.norm(x), self.norm_context(context))


class LatentAttentionModel(nn.Module):
    """The pooling block: `latents`, `cross_attend_blocks` = [attention, feed-forward].

    `tokens(h) = H2` with `H1 = attn(LN(h), LN(latents)) + h` and `H2 = ff(LN(H1)) + H1`;
    `forward(h, mask)` is the masked mean of `tokens(h)`, L2-normalised if `output_normalize`.
    """

    def __init__(self, config: LatentAttentionConfig) -> None:
        super().__init__()
        self.config = config
        dim, heads, head_dim = config.hidden_dim, config.num_cross_heads, config.cross_dim_head
        self.latents = nn.Parameter(torch.randn(config.num_latents_value, config.latent_dim))
        attention = CrossAttention(dim, config.latent_dim, heads, head_dim)
        self.cross_attend_blocks = nn.ModuleList(
            [PreNorm(attention, dim, config.latent_dim), PreNorm(FeedForward(dim), dim)]
        )

    def tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        attention, feed_forward = self.cross_attend_blocks
        hidden = attention(hidden, self.latents) + hidden  # (batch, seq, dim)
        return feed_forward(hidden) + hidden

    def forward(self, hidden: torch.Tensor, pool_mask: torch.Tensor) -> torch.Tensor:
        pooled = masked_mean(self.tokens(hidden), pool_mask)  # (batch, dim)
        return F.normalize(pooled, dim=-1) if self.config.output_normalize else pooled

    def start_as_identity(self) -> LatentAttentionModel:
        """Zero both output projections: `tokens(h) == h`, so pooling starts as the plain mean.

        Our training starts here (the reference initialises at random), so a short run starts
        from the mean-pooling baseline and gradient still reaches every weight through them.
        """
        attention, feed_forward = cast(Any, self.cross_attend_blocks)
        with torch.no_grad():
            attention.fn.to_out.weight.zero_()
            feed_forward.fn.net[2].weight.zero_()
            feed_forward.fn.net[2].bias.zero_()
        return self


def pool_hidden(
    pooler: LatentAttentionModel | None, hidden: torch.Tensor, pool_mask: torch.Tensor
) -> torch.Tensor:
    """Unit vectors from decoder states: the latent block, or (None) the plain masked mean."""
    tokens = hidden if pooler is None else pooler.tokens(hidden.to(pooler.latents.dtype))
    return F.normalize(masked_mean(tokens, pool_mask).float(), dim=-1)  # (batch, dim)


# ---------------------------------------------------------------------------------------------
# 3. Inputs and the pool mask


def instruction_length(tokenizer: Any, instruction: str) -> int:
    """How many leading positions the pool mask zeroes: `len(tokenizer.tokenize(instruction))`.

    Literally the reference's count: it leaves out the BOS, so with a BOS the mask zeroes the
    BOS and all but the last instruction token (a trailing-space piece usually makes up for it).
    """
    return len(tokenizer.tokenize(instruction)) if instruction else 0


def build_inputs(
    tokenizer: Any, texts: Sequence[str], instruction: str, max_length: int
) -> dict[str, torch.Tensor]:
    """Right-padded `input_ids`, `attention_mask` and `pool_mask` for texts under one instruction.

    Each string is `instruction + text + eos_token`, tokenized with the tokenizer's BOS and
    truncated to `max_length` (which can cut the EOS, as in the reference).
    """
    strings = [f"{instruction}{text}{tokenizer.eos_token}" for text in texts]
    enc = tokenizer(
        strings,
        padding=True,
        truncation=True,
        max_length=max_length,
        padding_side="right",
        return_tensors="pt",
    )
    pool_mask = enc["attention_mask"].clone()  # (batch, seq)
    pool_mask[:, : instruction_length(tokenizer, instruction)] = 0
    return {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "pool_mask": pool_mask,
    }


def embed_batch(
    decoder: Any,
    pooler: LatentAttentionModel | None,
    tokenizer: Any,
    texts: Sequence[str],
    instruction: str,
    max_length: int,
) -> torch.Tensor:
    """Unit float32 vectors for one batch (with gradients when enabled; training uses this)."""
    device = next(decoder.parameters()).device
    batch = {
        k: v.to(device) for k, v in build_inputs(tokenizer, texts, instruction, max_length).items()
    }
    hidden = bidirectional_hidden_states(decoder, batch["input_ids"], batch["attention_mask"])
    return pool_hidden(pooler, hidden, batch["pool_mask"])  # (batch, dim)


# ---------------------------------------------------------------------------------------------
# 4. Loading: released folders (strict, by prefix) and our adapter folders


def read_json(path: Path) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(path.read_text(encoding="utf-8")))


def is_released_layout(folder: Path) -> bool:
    """A folder with an NV-Embed `config.json` (`model_type` nvembed)."""
    config = folder / "config.json"
    return config.is_file() and read_json(config).get("model_type") == NVEMBED_MODEL_TYPE


def decoder_config(text_config: dict[str, Any]) -> Any:
    """A transformers config for `text_config` (`bidir_mistral` is Mistral made bidirectional)."""
    from transformers import AutoConfig

    values = {k: v for k, v in text_config.items() if k not in ("model_type", "_name_or_path")}
    model_type = str(text_config.get("model_type", "mistral")).removeprefix("bidir_")
    check_model_type(model_type)
    return AutoConfig.for_model(model_type, **values)


def safetensors_files(folder: Path) -> list[Path]:
    """The checkpoint's safetensors files: the shards its index names, or the single file."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return sorted({folder / name for name in read_json(index)["weight_map"].values()})
    if not (folder / "model.safetensors").is_file():
        raise EncoderUnavailableError(
            f"{folder} has no model.safetensors (or index); NV-Embed folders are read as "
            "safetensors only"
        )
    return [folder / "model.safetensors"]


def read_tensors(files: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Every tensor in `files`, by name."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in files:
        if not path.is_file():
            raise EncoderUnavailableError(f"{path} is missing; the model folder is incomplete")
        state.update(load_file(str(path)))
    return state


def strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors whose name starts with `prefix`, the prefix removed."""
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


def expected_decoder_keys(config: Any) -> set[str]:
    """State-dict names of the decoder `config` describes (built on the meta device: free)."""
    from transformers import AutoModel

    with torch.device("meta"):
        return set(AutoModel.from_config(config).state_dict())


def build_decoder(
    config: Any, state: dict[str, torch.Tensor], dtype: torch.dtype, attn_implementation: str
) -> Any:
    """The bare decoder with `state` loaded, bidirectional, in eval mode."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    cls: Any = MODEL_MAPPING[type(config)]
    decoder = cls.from_pretrained(
        None, config=config, state_dict=state, dtype=dtype, attn_implementation=attn_implementation
    )
    return make_bidirectional(decoder.eval())


def build_latent(
    config: LatentAttentionConfig, state: dict[str, torch.Tensor], dtype: torch.dtype
) -> LatentAttentionModel:
    """The latent block with `state` loaded strictly (no random init: built on meta, assigned)."""
    with torch.device("meta"):
        block = LatentAttentionModel(config)
    check_keys(set(state), set(block.state_dict()), "checkpoint's latent_attention_model.*")
    try:
        block.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:  # shape mismatch
        raise EncoderUnavailableError(f"latent-attention weights do not fit: {exc}") from exc
    return block.to(dtype).eval()


def check_widths(latent: LatentAttentionConfig, hidden: int) -> None:
    if not latent.latent_dim == latent.hidden_dim == hidden:
        raise EncoderUnavailableError(
            f"latent_attention_config widths ({latent.latent_dim}, {latent.hidden_dim}) must "
            f"equal the decoder's hidden size {hidden}"
        )


def load_released(
    folder: Path, dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa"
) -> tuple[Any, LatentAttentionModel]:
    """(bidirectional decoder, latent block) of a released-layout folder, loaded strictly.

    Every tensor must be `embedding_model.<decoder key>` or `latent_attention_model.<block
    key>`, and every key of both modules must be present.
    """
    config = read_json(folder / "config.json")
    text_config = decoder_config(config.get("text_config") or {})
    latent_config = LatentAttentionConfig.from_dict(config.get("latent_attention_config") or {})
    check_widths(latent_config, int(text_config.hidden_size))
    state = read_tensors(safetensors_files(folder))
    stray = sorted(k for k in state if not k.startswith((DECODER_PREFIX, LATENT_PREFIX)))
    if stray:
        raise EncoderUnavailableError(
            f"{folder} holds {len(stray)} tensors outside embedding_model.* and "
            f"latent_attention_model.* (e.g. {stray[0]!r}); is it an NV-Embed checkpoint?"
        )
    decoder_state = strip_prefix(state, DECODER_PREFIX)
    check_keys(
        set(decoder_state), expected_decoder_keys(text_config), "checkpoint's embedding_model.*"
    )
    decoder = build_decoder(text_config, decoder_state, dtype, attn_implementation)
    latent = build_latent(latent_config, strip_prefix(state, LATENT_PREFIX), dtype)
    return decoder, latent


def save_adapter_folder(
    out_dir: str | Path,
    *,
    base: str,
    latent: LatentAttentionModel,
    tokenizer: Any,
    settings: dict[str, Any],
    lora_model: Any = None,
) -> Path:
    """Write what `nv-embed --model <base> --adapter <out_dir>` loads.

    `nv_embed_config.json` (base, latent config, encoder settings: max_length, instructions,
    plus whatever `settings` records), `latent_attention.safetensors` (released key names), the
    tokenizer, and the peft LoRA files when `lora_model` (a peft model) is given.
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {
        f"{LATENT_PREFIX}{k}": v.detach().float().cpu().contiguous()
        for k, v in latent.state_dict().items()
    }
    save_file(state, str(out / LATENT_FILE), metadata={"format": "pt"})
    if lora_model is not None:
        lora_model.peft_config["default"].base_model_name_or_path = base
        lora_model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    config = {"base": base, "latent_attention_config": latent.config.to_dict(), **settings}
    (out / ADAPTER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def load_adapter_latent(folder: Path, dtype: torch.dtype) -> LatentAttentionModel:
    config = LatentAttentionConfig.from_dict(
        read_json(folder / ADAPTER_CONFIG_FILE)["latent_attention_config"]
    )
    state = strip_prefix(read_tensors([folder / LATENT_FILE]), LATENT_PREFIX)
    return build_latent(config, state, dtype)


def resolve_layers(model: str | None, adapter: str | None) -> tuple[str, Path, Path | None]:
    """(base model ref, its folder, adapter folder or None).

    Without `model`, an adapter's `nv_embed_config.json` names its base; without both, the
    released NV-Embed-v2.
    """
    adapter_dir = resolve_model(adapter) if adapter else None
    if adapter_dir is not None and not (adapter_dir / ADAPTER_CONFIG_FILE).is_file():
        raise EncoderUnavailableError(
            f"{adapter!r} is not an NV-Embed adapter folder (no {ADAPTER_CONFIG_FILE}); give the "
            "folder written by docsearch.training.nv_embed_train"
        )
    if model is None and adapter_dir is not None:
        model = str(read_json(adapter_dir / ADAPTER_CONFIG_FILE)["base"])
    model = DEFAULT_MODEL if model is None else model
    return model, resolve_model(model), adapter_dir


def load_layers(
    base: Path, adapter: Path | None, dtype: torch.dtype, attn_implementation: str
) -> tuple[Any, LatentAttentionModel | None]:
    """Decoder (bidirectional, adapter LoRA merged) and latent block (adapter's, else base's)."""
    if is_released_layout(base):
        decoder, latent = load_released(base, dtype, attn_implementation)
    else:
        decoder = load_decoder(base, dtype=dtype, attn_implementation=attn_implementation)
        latent = None
    if adapter is not None:
        if (adapter / LORA_CONFIG_FILE).is_file():
            decoder = merge_adapter(decoder, adapter)
        latent = load_adapter_latent(adapter, dtype)
        check_widths(latent.config, int(decoder.config.hidden_size))
    return decoder, latent


def load_nv_tokenizer(base: Path, adapter: Path | None) -> Any:
    """The tokenizer (adapter folder first), pad = EOS, right padding, as NV-Embed sets it."""
    from transformers.utils import logging as hf_logging

    folder = base
    if adapter is not None and (adapter / "tokenizer_config.json").is_file():
        folder = adapter
    # AutoTokenizer reads config.json too and warns that `nvembed` is no model type it knows;
    # only the tokenizer files matter here.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = load_tokenizer(folder)
    finally:
        hf_logging.set_verbosity(verbosity)
    tokenizer.padding_side = "right"
    return tokenizer


# ---------------------------------------------------------------------------------------------
# 5. The encoder


@register("nv-embed", aliases=("nv_embed", "nvembed"))
class NVEmbedEncoder(HFEncoder):
    """NV-Embed vectors: bidirectional decoder, latent-attention pooling, L2-normalised.

    Options: `model` (a released NV-Embed folder or Hub id, or the base decoder of an adapter;
    default `nvidia/NV-Embed-v2`, or the base the adapter names), `adapter` (a folder from
    `docsearch.training.nv_embed_train`: latent block and optional LoRA), `max_length` (tokens
    per input, BOS, instruction and EOS included), `query_instruction` (default the model
    card's), `document_instruction` (default none), `pooling` (`latent`, or `mean`: the block
    left out, the mean-pooling baseline of the same decoder), `dtype`. Unset lengths and
    instructions come from the adapter's `nv_embed_config.json`.
    Run-time only: `device`, `batch_size`, `attn_implementation`.
    """

    name = "nv-embed"

    def __init__(
        self,
        model: str | None = None,
        *,
        adapter: str | None = None,
        max_length: int | None = None,
        query_instruction: str | None = None,
        document_instruction: str | None = None,
        pooling: str = "latent",
        dtype: str = "float32",
        device: str | None = None,
        batch_size: int = 8,
        attn_implementation: str | None = None,
    ) -> None:
        where, self.torch_dtype, attn = choose(device, dtype, attn_implementation)
        one_of("pooling", pooling, POOLINGS)
        self.model_ref, base, adapter_dir = resolve_layers(model, adapter)
        settings = read_json(adapter_dir / ADAPTER_CONFIG_FILE) if adapter_dir else {}
        self.adapter, self.pooling = adapter, pooling
        self.dtype = str(self.torch_dtype).removeprefix("torch.")
        self.max_length = int(max_length or settings.get("max_length", DEFAULT_MAX_LENGTH))
        self.query_instruction = self._pick(
            query_instruction, settings, "query_instruction", DEFAULT_QUERY_INSTRUCTION
        )
        self.document_instruction = self._pick(
            document_instruction, settings, "document_instruction", ""
        )
        self.device = torch.device(where)
        self.batch_size = batch_size
        # The base's licence governs: an adapter trained on a released NV-Embed stays non-commercial.
        self.licence = licence_for(self.model_ref, self._config(base))
        if self.licence == LICENCE:
            log.warning("%s: %s", self.model_ref, LICENCE_NOTICE)
        decoder, latent = load_layers(base, adapter_dir, self.torch_dtype, attn)
        if latent is None and pooling == "latent":
            raise EncoderUnavailableError(
                f"{self.model_ref!r} is a plain decoder without a latent-attention block; pass "
                "--adapter <folder trained by nv_embed_train>, a released NV-Embed model, or "
                "pooling=mean"
            )
        self._decoder = decoder.to(self.device).eval()
        # pooling "mean" leaves the block out
        self._latent = latent.to(self.device).eval() if latent and pooling == "latent" else None
        self.tokenizer = load_nv_tokenizer(base, adapter_dir)
        self.dim = int(self._decoder.config.hidden_size)
        self.max_tokens: int | None = self._content_budget()

    @staticmethod
    def _pick(value: str | None, settings: dict[str, Any], key: str, default: str) -> str:
        return value if value is not None else str(settings.get(key, default))

    @staticmethod
    def _config(folder: Path) -> dict[str, Any] | None:
        path = folder / "config.json"
        return read_json(path) if path.is_file() else None

    def _content_budget(self) -> int:
        """Most text tokens a document keeps: max_length minus BOS, instruction and EOS."""
        specials = len(self.tokenizer("")["input_ids"])
        instruction = instruction_length(self.tokenizer, self.document_instruction)
        query = instruction_length(self.tokenizer, self.query_instruction)
        joint = 1 if self.document_instruction else 0  # the join may tokenize one piece longer
        budget = self.max_length - specials - instruction - joint - 1  # - EOS
        if budget < 1 or self.max_length <= specials + query + 1:
            raise UsageError(
                f"max_length {self.max_length} leaves no room for text after the instructions; "
                "raise max_length"
            )
        return budget

    def embed(self, texts: Sequence[str], instruction: str) -> torch.Tensor:
        """Unit float32 vectors, in input order; longest texts first so batches pad little."""
        out = torch.zeros(len(texts), self.dim, dtype=torch.float32)
        with torch.no_grad():
            for rows in longest_first([len(t) for t in texts], self.batch_size):
                batch = [texts[i] for i in rows]
                out[rows] = embed_batch(
                    self._decoder, self._latent, self.tokenizer, batch, instruction, self.max_length
                ).cpu()
        return out  # (n, dim)

    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        instruction = self.query_instruction if side == "query" else self.document_instruction
        return self.embed(texts, instruction).numpy()

    def vector_options(self) -> dict[str, Any]:
        return {
            "model": self.model_ref,
            "max_length": self.max_length,
            "query_instruction": self.query_instruction,
            "document_instruction": self.document_instruction,
            "pooling": self.pooling,
            "dtype": self.dtype,
            "adapter": self.adapter or None,
        }
