"""LLM2Vec: a decoder LLM turned into a bidirectional text encoder (BehnamGhader et al., 2024).

Top to bottom:
1. The bidirectional decoder, shared with NV-Embed (Llama, Mistral, Qwen2, Qwen3, Gemma3 text):
   every token attends to every non-pad token, with no sliding window, as LLM2Vec and NV-Embed
   compute it whatever `sliding_window` says; and the masks of the causal mode.
2. Adapters: the released LoRA layering (base, then the MNTP LoRA merged, then a SimCSE or
   supervised LoRA), merged with peft, and the folder layout our training writes.
3. LLM2Vec's inputs (`[instruction, text]` pairs, the text cut word-wise to `doc_max_length`,
   left padding, an `embed_mask` over the text's last n tokens) and its five pooling modes.
4. The `llm2vec` encoder.

Deliberate differences from llm2vec 0.2.3: its Qwen2 model is still causal (a bug; we are
bidirectional for every family, `bidirectional=False` reproduces its Qwen2 numbers), and the chat
wrappers it adds for a few hard-coded `_name_or_path` values are not applied (they do not fire for
Hub ids either). Not here: training (`docsearch.training.mntp`, `docsearch.training.simcse`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from docsearch.encoders.base import HFEncoder, hf_count_tokens, one_of, register
from docsearch.encoders.batching import longest_first
from docsearch.encoders.device import choose
from docsearch.encoders.weights import resolve_model
from docsearch.errors import EncoderUnavailableError, UsageError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
POOLING_MODES = ("mean", "weighted_mean", "eos_token", "last_token", "bos_token")
POOLING_ALIASES = {"eos": "eos_token", "bos": "bos_token", "last": "last_token"}
# LLM2Vec marks where the instruction ends with this literal; it never reaches the tokenizer.
SEPARATOR = "!@#$%^&*()"
DEFAULT_QUERY_INSTRUCTION = (
    "Given a web search query, retrieve relevant passages that answer the query:"
)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_CONFIG = "adapter_config.json"
LLM2VEC_CONFIG = "llm2vec_config.json"
PARENT_ADAPTER = "mntp"  # subfolder of an adapter folder: the adapter it was trained on top of
ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


# ---------------------------------------------------------------------------------------------
# 1. The bidirectional decoder (imported by docsearch.encoders.nv_embed)


def make_bidirectional(model: ModuleT) -> ModuleT:
    """Switch a Hugging Face decoder, in place, to bidirectional attention without sliding window.

    Sets `is_causal = False` and `sliding_window = None` on every attention module (read by the
    SDPA and flash-attention kernels when no mask is materialised) and `config.is_causal = False`
    (read by transformers' mask builders). `config.sliding_window` is cleared too, except where
    per-layer `sliding_attention` types need it to build masks (Gemma3); its layers still attend
    beyond the window because `bidirectional_hidden_states` passes an explicit padding-only mask.
    Works on the bare model (`LlamaModel`...) or a wrapper (`...ForCausalLM`, a peft model).
    """
    for module in model.modules():
        for attribute, value in (("is_causal", False), ("sliding_window", None)):
            if hasattr(module, attribute):
                setattr(module, attribute, value)
    config: Any = model.config
    config.is_causal = False
    if "sliding_attention" not in (getattr(config, "layer_types", None) or ()):
        config.sliding_window = None
    return model


def padding_only_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4-D mask from a (batch, seq) 0/1 mask: 0 on real key columns, dtype-min on pads.

    No causal part: every query row, pad rows included, sees every real token. The minimum is
    finite, so a row with no real token gets uniform attention instead of NaN. transformers
    uses a 4-D mask as given for eager and SDPA attention.
    """
    batch, seq = attention_mask.shape
    blocked = (attention_mask == 0)[:, None, None, :]  # (batch, 1, 1, seq)
    mask = torch.zeros(batch, 1, 1, seq, dtype=dtype, device=attention_mask.device)
    mask = mask.masked_fill(blocked, torch.finfo(dtype).min)
    return mask.expand(batch, 1, seq, seq)  # (batch, 1, seq, seq)


def causal_padding_masks(
    config: Any, attention_mask: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive 4-D causal + padding masks eager attention gets, for any attention kernel.

    A left-pad query row sees no key. With every entry at dtype-min it attends uniformly to the
    whole row, as eager attention does (and transformers 4.x, which the LLM2Vec reference ran);
    the boolean mask transformers 5 builds for SDPA makes that row zeros instead, which moves the
    `mean` of an empty text. Sliding windows are kept where the model has them: one mask for
    every layer, or (Gemma3: mixed layer types) one per layer type, which those models accept.
    """
    from transformers.masking_utils import (
        causal_mask_function,
        eager_mask,
        sliding_window_causal_mask_function,
    )

    batch, seq = attention_mask.shape
    window = getattr(config, "sliding_window", None)

    def build(sliding: bool) -> torch.Tensor:
        pattern = causal_mask_function
        if sliding and window is not None:
            pattern = sliding_window_causal_mask_function(int(window))
        return eager_mask(
            batch, seq, seq, mask_function=pattern, attention_mask=attention_mask.bool(),
            dtype=dtype, device=attention_mask.device,
        )  # fmt: skip

    layer_types = set(getattr(config, "layer_types", None) or ())
    if not layer_types:  # Llama, Mistral: the window, if any, applies to every layer
        return build(sliding=True)
    unknown = layer_types - {"full_attention", "sliding_attention"}
    if unknown:
        raise EncoderUnavailableError(f"causal mode does not support layer types {sorted(unknown)}")
    masks = {kind: build(sliding=kind == "sliding_attention") for kind in layer_types}
    return masks.popitem()[1] if len(masks) == 1 else masks


def bidirectional_hidden_states(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    position_ids: torch.Tensor | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Last hidden states (after the final norm) of a decoder run bidirectionally.

    `model` is a bare decoder (`AutoModel`, possibly peft-wrapped) already passed through
    `make_bidirectional`; `input_ids` and `attention_mask` are (batch, seq), left or right padded.
    Positions default to 0..seq-1 for every row, as LLM2Vec and NV-Embed compute them (RoPE only
    sees position differences, so padding shifts change results at rounding level only).
    `causal=True` runs the ordinary causal model instead (the "Uni" baseline); the model must
    then not have been made bidirectional. Returns (batch, seq, hidden).
    """
    config = model.config
    dtype = cast(Any, model).get_input_embeddings().weight.dtype
    mask: torch.Tensor | dict[str, torch.Tensor]
    if str(getattr(config, "_attn_implementation", "")).startswith("flash"):
        mask = attention_mask  # flash kernels take the 2-D mask and read `is_causal` themselves
    elif causal:
        mask = causal_padding_masks(config, attention_mask, dtype)
    else:
        mask = padding_only_mask(attention_mask, dtype)
    out = model(
        input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False
    )
    return cast(torch.Tensor, out.last_hidden_state)  # (batch, seq, hidden)


def load_decoder(
    folder: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
    bidirectional: bool = True,
    device: str | torch.device = "cpu",
) -> PreTrainedModel:
    """The bare decoder (`LlamaModel`, `MistralModel`...) in a local folder, bidirectional by default.

    Checkpoints saved as `...ForCausalLM` load too (transformers drops the `model.` prefix and the
    LM head). Raises `EncoderUnavailableError` for model types other than `SUPPORTED_MODEL_TYPES`.
    """
    model = AutoModel.from_pretrained(
        str(folder), dtype=dtype, attn_implementation=attn_implementation
    )
    check_model_type(model.config.model_type)
    model = model.to(device).eval()
    return make_bidirectional(model) if bidirectional else model


def check_model_type(model_type: str) -> None:
    """Refuse decoders whose attention we have not checked bidirectional."""
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise EncoderUnavailableError(
            f"llm2vec supports the decoder types {', '.join(SUPPORTED_MODEL_TYPES)}, not "
            f"{model_type!r}; pick a Llama, Mistral, Qwen2/3 or Gemma3 model"
        )


# ---------------------------------------------------------------------------------------------
# 2. Adapters: released checkpoint layering and our own adapter folders


def lora_config(r: int = 16, alpha: int = 32, dropout: float = 0.05) -> Any:
    """The LLM2Vec LoRA: rank 16, alpha 32, dropout 0.05 on the seven projections, no bias."""
    from peft import LoraConfig

    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(LORA_TARGETS),
        bias="none",
        task_type=None,
    )


def is_adapter_folder(folder: Path) -> bool:
    """A peft adapter folder (LoRA files, no full model weights)."""
    has_weights = any((folder / name).exists() for name in WEIGHT_FILES)
    return (folder / ADAPTER_CONFIG).exists() and not has_weights


def adapter_base(folder: Path) -> str:
    """The base model an adapter folder names (`base_model_name_or_path`), relative paths allowed."""
    ref = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not ref:
        raise EncoderUnavailableError(
            f"adapter {str(folder)!r} does not name its base model; pass it with --model"
        )
    local = folder / ref
    return str(local) if local.is_dir() else str(ref)


def adapter_stack(folder: Path) -> list[Path]:
    """Adapters to merge, in order, for one adapter folder: its `mntp/` parent first, if any."""
    if not is_adapter_folder(folder):
        raise EncoderUnavailableError(
            f"{str(folder)!r} is not a LoRA adapter folder (no {ADAPTER_CONFIG}); give the folder "
            "written by `docsearch finetune` or a released LLM2Vec adapter"
        )
    parent = folder / PARENT_ADAPTER
    return ([parent] if is_adapter_folder(parent) else []) + [folder]


def merge_adapter(model: PreTrainedModel, folder: Path) -> PreTrainedModel:
    """Apply a saved LoRA to `model` and merge it into the weights: W <- W + (alpha/r) B A."""
    from peft import PeftModel

    return cast(PreTrainedModel, PeftModel.from_pretrained(model, str(folder)).merge_and_unload())


def resolve_layers(model: str, adapter: str | None) -> tuple[Path, Path, list[Path]]:
    """(folder `model` names, base weights folder, adapters to merge in order).

    `model` is a base model or a released `LLM2Vec-*-mntp` style folder (an adapter naming its
    base); `adapter` is a further adapter folder (SimCSE, supervised, or ours).
    """
    first = resolve_model(model)
    base, stack = first, []
    if is_adapter_folder(first):
        base, stack = resolve_model(adapter_base(first)), [first]
    if adapter:
        layers = adapter_stack(resolve_model(adapter))
        if stack and len(layers) == 2:  # both name an MNTP stage: it must be the same one
            if not same_adapter(stack[0], layers[0]):
                raise UsageError(
                    f"{adapter!r} carries its own MNTP adapter, which differs from {model!r}; "
                    "pass the base model with --model"
                )
            layers = layers[1:]
        stack += layers
    return first, base, stack


def same_adapter(a: Path, b: Path) -> bool:
    """True when two adapter folders hold byte-identical LoRA weights."""
    name = "adapter_model.safetensors"
    return (a / name).read_bytes() == (b / name).read_bytes()


def tokenizer_folder(first: Path, base: Path) -> Path:
    """Released `-mntp` folders carry the tokenizer; a bare adapter name defers to the base."""
    has_tokenizer = any((first / f).exists() for f in ("tokenizer_config.json", "tokenizer.json"))
    return first if has_tokenizer else base


def copy_parent(parent: Path, target: Path) -> None:
    """Copy the adapter a second-stage adapter was trained on into `target` (its `mntp/`)."""
    if not is_adapter_folder(parent) or is_adapter_folder(parent / PARENT_ADAPTER):
        raise UsageError(
            f"{str(parent)!r} must be a single first-stage adapter folder (adapters stack two deep)"
        )
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    for name in (ADAPTER_CONFIG, "adapter_model.safetensors"):
        shutil.copy2(parent / name, target / name)


def save_adapter(
    peft_model: Any,
    out_dir: str | Path,
    *,
    base: str,
    tokenizer: Any,
    settings: dict[str, Any],
    parent: str | Path | None = None,
) -> Path:
    """Write an adapter folder that `llm2vec --model <base> --adapter <out_dir>` loads.

    Holds the peft files (their `base_model_name_or_path` set to `base`), the tokenizer,
    `llm2vec_config.json` (`settings`: pooling, lengths) and, for a second-stage adapter, a copy
    of the `parent` adapter it was trained on top of in `mntp/`, so the folder is self-contained.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    peft_model.peft_config["default"].base_model_name_or_path = base
    peft_model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / LLM2VEC_CONFIG).write_text(json.dumps(settings, indent=2) + "\n")
    if parent is not None:
        copy_parent(Path(parent), out / PARENT_ADAPTER)
    return out


def declared_generic_tokenizer(folder: Path) -> bool:
    config = folder / "tokenizer_config.json"
    if not config.exists() or not (folder / "tokenizer.json").exists():
        return False
    declared = json.loads(config.read_text()).get("tokenizer_class")
    return declared in ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(folder: Path) -> Any:
    """The model's tokenizer with LLM2Vec's settings: pad = EOS, left padding."""
    # transformers 5 swaps in its own class for some model types (Qwen2); a folder that declares
    # the generic class means "use tokenizer.json as it is".
    generic = declared_generic_tokenizer(folder)
    tokenizer = (PreTrainedTokenizerFast if generic else AutoTokenizer).from_pretrained(str(folder))
    if tokenizer.eos_token is None:
        raise EncoderUnavailableError(f"the tokenizer in {str(folder)!r} has no EOS token")
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


# ---------------------------------------------------------------------------------------------
# 3. LLM2Vec inputs and pooling


def cut_to_doc_length(tokenizer: Any, text: str, max_length: int, doc_max_length: int) -> str:
    """LLM2Vec's word-wise cut: drop trailing words until `text` has <= doc_max_length tokens."""

    def count(t: str) -> int:
        ids = tokenizer(t, add_special_tokens=False, truncation=True, max_length=max_length)
        return len(ids["input_ids"])

    n = count(text)
    while n > doc_max_length:
        words = text.split()
        text = " ".join(words[: int(len(words) * doc_max_length / n)])
        n = count(text)
    return text


def eos_suffix(tokenizer: Any) -> str:
    """What LLM2Vec appends for eos_token pooling: ' </s>' for SentencePiece EOS, else the EOS."""
    eos = str(tokenizer.eos_token)
    return " " + eos if eos == "</s>" else eos


def join_pair(instruction: str, text: str) -> str:
    """`instruction<SEP>text` as LLM2Vec writes it (the instruction stripped, then one space)."""
    return f"{instruction.strip()} {SEPARATOR}{text}" if instruction else f"{SEPARATOR}{text}"


def build_inputs(
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    *,
    max_length: int,
    doc_max_length: int,
    append_eos: bool = False,
) -> dict[str, torch.Tensor]:
    """Left-padded `input_ids`, `attention_mask` and `embed_mask` for `[instruction, text]` pairs.

    `embed_mask` marks the last n positions of each row, n = the token count of the text part
    alone, with the same truncation; when truncation at `max_length` cuts the text, the mask
    reaches back into the instruction, exactly as in the reference.
    """
    strings = [
        join_pair(i, cut_to_doc_length(tokenizer, t, max_length, doc_max_length)) for i, t in pairs
    ]
    if append_eos:
        strings = [s.strip() + eos_suffix(tokenizer) for s in strings]
    parts = [s.split(SEPARATOR) for s in strings]
    enc = tokenizer(
        ["".join(p) for p in parts],
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    tails = [p[1] if len(p) > 1 else "" for p in parts]
    text_ids = tokenizer(tails, add_special_tokens=False, truncation=True, max_length=max_length)
    embed_mask = torch.zeros_like(enc["attention_mask"])  # (batch, seq)
    for row, ids in enumerate(text_ids["input_ids"]):
        if ids:
            embed_mask[row, -len(ids) :] = 1
    return {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "embed_mask": embed_mask,
    }


def pool(
    hidden: torch.Tensor,
    embed_mask: torch.Tensor,
    attention_mask: torch.Tensor,
    input_ids: torch.Tensor,
    mode: str,
    bos_token_id: int | None = None,
) -> torch.Tensor:
    """One vector per row from (batch, seq, hidden) states, LLM2Vec's rules (not normalised).

    - `mean`: mean over `embed_mask`; a row whose mask is empty averages every position, padding
      included (the reference's `h[-0:]` slice; only happens for an empty text).
    - `weighted_mean`: weights 1..l over the l masked positions in order; zero for an empty mask.
    - `eos_token` / `last_token`: the last real position; `bos_token`: each row's first BOS.
    """
    mask = embed_mask.to(hidden.dtype)  # (batch, seq)
    if mode == "mean":
        mask = torch.where(mask.sum(1, keepdim=True) > 0, mask, torch.ones_like(mask))
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    if mode == "weighted_mean":
        weights = mask.cumsum(1) * mask
        weights = weights / weights.sum(1, keepdim=True).clamp(min=1e-9)
        return (hidden * weights[..., None]).sum(1)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if mode in ("eos_token", "last_token"):
        seq = attention_mask.shape[1]
        last = seq - 1 - attention_mask.flip(1).argmax(1)  # last real position per row
        return hidden[rows, last]
    if mode == "bos_token":
        is_bos = input_ids.eq(-1 if bos_token_id is None else bos_token_id)  # (batch, seq)
        if not bool(is_bos.any(1).all()):
            raise UsageError("bos_token pooling needs a BOS token in every input; use mean pooling")
        return hidden[rows, is_bos.int().argmax(1)]
    raise UsageError(f"unknown pooling {mode!r}")


# ---------------------------------------------------------------------------------------------
# 4. The encoder


def read_settings(folders: Sequence[Path]) -> dict[str, Any]:
    """`llm2vec_config.json` of the last folder that has one (pooling, lengths, skip_instruction)."""
    for folder in reversed(folders):
        if (folder / LLM2VEC_CONFIG).exists():
            return cast(dict[str, Any], json.loads((folder / LLM2VEC_CONFIG).read_text()))
    return {}


@register("llm2vec")
class LLM2VecEncoder(HFEncoder):
    """A bidirectional decoder with LLM2Vec pooling; queries carry an instruction, documents not.

    Options: `model` (base model or released `-mntp` folder / Hub id), `adapter` (a further LoRA
    folder), `pooling`, `max_length` (tokens per input, BOS and instruction included),
    `doc_max_length` (text tokens), `query_instruction`, `document_instruction`,
    `skip_instruction` (pool over the text only), `bidirectional` (False: the causal "Uni"
    baseline), `dtype`. Unset pooling and lengths come from `llm2vec_config.json` if present.
    Run-time only: `device`, `batch_size`, `attn_implementation`.
    """

    name = "llm2vec"

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        pooling: str | None = None,
        max_length: int | None = None,
        doc_max_length: int | None = None,
        query_instruction: str = DEFAULT_QUERY_INSTRUCTION,
        document_instruction: str = "",
        skip_instruction: bool | None = None,
        bidirectional: bool = True,
        dtype: str = "float32",
        device: str | None = None,
        batch_size: int = 16,
        attn_implementation: str | None = None,
    ) -> None:
        self.device, self.torch_dtype, attn = choose(device, dtype, attn_implementation)
        first, base, stack = resolve_layers(model, adapter)
        settings = read_settings([first, *stack])
        self.model_ref, self.adapter = model, adapter
        self.dtype = str(self.torch_dtype).removeprefix("torch.")
        mode = pooling or settings.get("pooling_mode", "mean")
        self.pooling = one_of("pooling", POOLING_ALIASES.get(mode, mode), POOLING_MODES)
        self.max_length = int(max_length or settings.get("max_length", 512))
        self.doc_max_length = int(doc_max_length or settings.get("doc_max_length", 400))
        self.skip_instruction = bool(
            settings.get("skip_instruction", True) if skip_instruction is None else skip_instruction
        )
        self.query_instruction, self.document_instruction = query_instruction, document_instruction
        self.bidirectional, self.batch_size = bidirectional, batch_size
        self.tokenizer = load_tokenizer(tokenizer_folder(first, base))
        decoder: Any = load_decoder(
            base, dtype=self.torch_dtype, attn_implementation=attn, bidirectional=bidirectional
        )
        for folder in stack:
            decoder = merge_adapter(decoder, folder)
        self._model = decoder.to(self.device).eval()
        self.dim = int(self._model.config.hidden_size)
        self.max_tokens = self._content_budget()
        bos = self.tokenizer.bos_token_id
        if self.pooling == "bos_token" and bos not in self.tokenizer("x")["input_ids"]:
            raise UsageError("this tokenizer adds no BOS token; use pooling 'mean' instead")

    def _content_budget(self) -> int:
        """Most text tokens a document input keeps: doc_max_length, within max_length."""
        specials = len(self.tokenizer("", add_special_tokens=True)["input_ids"])
        instruction = hf_count_tokens(self.tokenizer, [self.document_instruction])[0]
        extra = 1 if self.document_instruction else 0  # the joining space may merge differently
        extra += 1 if self.pooling == "eos_token" else 0
        return min(self.doc_max_length, self.max_length - specials - instruction - extra)

    def embed_pairs(self, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
        """Pooled, unnormalised float32 vectors for `[instruction, text]` pairs, in input order.

        Longest texts first, so each batch pads little (as the reference sorts them).
        """
        out = torch.zeros(len(pairs), self.dim, dtype=torch.float32)
        with torch.no_grad():
            for rows in longest_first([len(text) for _, text in pairs], self.batch_size):
                out[rows] = self.embed_batch([pairs[i] for i in rows]).float().cpu()
        return out  # (n, dim)

    def embed_batch(self, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
        """Pooled vectors for one batch, with gradients if enabled (used by training)."""
        lengths = {"max_length": self.max_length, "doc_max_length": self.doc_max_length}
        eos = self.pooling == "eos_token"
        inputs = build_inputs(self.tokenizer, pairs, **lengths, append_eos=eos)
        ids, mask = inputs["input_ids"].to(self.device), inputs["attention_mask"].to(self.device)
        hidden = bidirectional_hidden_states(self._model, ids, mask, causal=not self.bidirectional)
        keep = inputs["embed_mask"].to(self.device) if self.skip_instruction else mask
        return pool(hidden, keep, mask, ids, self.pooling, self.tokenizer.bos_token_id)

    def _instruction(self, side: str) -> str:
        return self.query_instruction if side == "query" else self.document_instruction

    def embed(self, texts: Sequence[str], side: str) -> torch.Tensor:
        """Pooled vectors of one batch with gradients (training); `side`: "query" or "document"."""
        return self.embed_batch([(self._instruction(side), t) for t in texts])  # (n, dim)

    def add_lora(self, r: int = 16, alpha: int = 32) -> Any:
        """Wrap the decoder in a fresh LLM2Vec LoRA (peft), returned for training and saving;
        `embed` and the encode methods run through it from now on."""
        from peft import get_peft_model

        self._model = get_peft_model(self._model, lora_config(r=r, alpha=alpha))
        return self._model

    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        return self.embed_pairs([(self._instruction(side), t) for t in texts]).numpy()

    def vector_options(self) -> dict[str, Any]:
        return {
            "model": self.model_ref,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "doc_max_length": self.doc_max_length,
            "query_instruction": self.query_instruction,
            "document_instruction": self.document_instruction,
            "skip_instruction": self.skip_instruction,
            "bidirectional": self.bidirectional,
            "dtype": self.dtype,
            "adapter": self.adapter or None,
        }
