"""A sentence-transformers BERT folder (MiniLM) run in plain torch, for inference.

Why: loading the model through sentence-transformers or transformers' model classes imports
scipy, sympy, sklearn and accelerate, about 190 MB resident in every indexing and search process
(benchmarks/results/peers.md), for a forward that is a few lines of torch. This one follows
`BertModel` with absolute positions and GELU (attention through torch's SDPA), then the folder's
pooling (mean or CLS) and normalisation, and reads the folder's own safetensors and tokenizer
(`folder_tokenizer.py`: its tokenizer.json run without importing transformers).

`load_bert_folder` returns None for any folder it does not describe exactly: another
architecture, a Dense or custom module, pooling that leaves the prompt out, extra loading
arguments, weights not in safetensors. The caller then loads the folder with sentence-transformers.
Not here: training (the encoder hands the sentence-transformers model to the trainer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

# The modules a folder may list, by class name (the import paths moved between releases).
_LAYOUTS = (("Transformer", "Pooling"), ("Transformer", "Pooling", "Normalize"))
# sentence_bert_config.json keys whose values this forward reproduces; any other key is a setting
# it does not know, so the folder goes to sentence-transformers.
_TEXT_ONLY = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
_KNOWN_SETTINGS: dict[str, Any] = {
    "transformer_task": "feature-extraction",
    "modality_config": _TEXT_ONLY,
    "module_output_name": "token_embeddings",
}
_EMPTY_ARGS = ("model_args", "tokenizer_args", "config_args", "processor_args")
_NOT_USED_WEIGHTS = ("pooler.", "embeddings.position_ids")  # BertModel's pooler: unused here
_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class FolderLayout:
    """What a sentence-transformers BERT folder asks of the forward."""

    config: dict[str, Any]
    pooling: str  # "mean" or "cls"
    normalize: bool
    lowercase: bool
    max_seq_length: int | None
    prompts: dict[str, str] = field(default_factory=dict)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _pooling(config: dict[str, Any]) -> str | None:
    """ "mean" or "cls" when that is all the pooling module does, else None."""
    if config.get("include_prompt", True) is not True:
        return None
    mode = config.get("pooling_mode")
    if mode is None:  # the older file: one flag per mode
        modes = [name for key, name in _POOLING_FLAGS.items() if config.get(key)]
        mode = modes[0] if len(modes) == 1 else None
    elif isinstance(mode, list):
        mode = mode[0] if len(mode) == 1 else None
    return mode if mode in ("mean", "cls") else None


def _settings_known(settings: dict[str, Any]) -> bool:
    for key, value in settings.items():
        if key in ("max_seq_length", "do_lower_case"):
            continue
        if key in _EMPTY_ARGS:
            if value:
                return False
        elif key not in _KNOWN_SETTINGS or _KNOWN_SETTINGS[key] != value:
            return False
    return True


def _plain_bert(config: dict[str, Any]) -> bool:
    return (
        config.get("model_type") == "bert"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and config.get("hidden_act", "gelu") == "gelu"
        and not config.get("is_decoder", False)
        and not config.get("add_cross_attention", False)
    )


def describe(folder: Path) -> FolderLayout | None:
    """The layout of `folder` when this module runs it as sentence-transformers would, else None."""
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list) or not modules:
        return None
    kinds = tuple(str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules)
    if kinds not in _LAYOUTS or modules[0].get("path", "") != "":
        return None
    config = _read_json(folder / "config.json")
    settings = _read_json(folder / "sentence_bert_config.json")
    pooling = _pooling(_read_json(folder / str(modules[1].get("path", "")) / "config.json"))
    if not (
        _plain_bert(config)
        and _settings_known(settings)
        and pooling
        and (folder / "model.safetensors").is_file()
    ):
        return None
    limit = settings.get("max_seq_length")
    own = _read_json(folder / "config_sentence_transformers.json")
    return FolderLayout(
        config=config,
        pooling=pooling,
        normalize=len(kinds) == 3,
        lowercase=bool(settings.get("do_lower_case", False)),
        max_seq_length=int(limit) if limit else None,
        prompts=dict(own.get("prompts") or {}),
    )


class _Embeddings(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        hidden = c["hidden_size"]
        # Left uninitialised: every weight comes from the folder (`load_bert_folder`), and
        # nn.Embedding's random start, even on the meta device, imports torch._dynamo (1.2-2 s
        # of every process that loads MiniLM).
        self.word_embeddings = nn.Embedding(
            c["vocab_size"], hidden, padding_idx=c.get("pad_token_id"),
            _weight=torch.empty(c["vocab_size"], hidden),
        )  # fmt: skip
        self.position_embeddings = nn.Embedding(
            c["max_position_embeddings"], hidden,
            _weight=torch.empty(c["max_position_embeddings"], hidden),
        )  # fmt: skip
        types = c.get("type_vocab_size", 2)
        self.token_type_embeddings = nn.Embedding(types, hidden, _weight=torch.empty(types, hidden))
        self.LayerNorm = nn.LayerNorm(hidden, eps=c.get("layer_norm_eps", 1e-12))
        self.dropout = nn.Dropout(c.get("hidden_dropout_prob", 0.1))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        summed = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)[None]
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(summed))


class _SelfAttention(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout_p = float(c.get("attention_probs_dropout_prob", 0.1))
        # An int8 inference copy's one product for query, key and value (`int8.quantise`): the
        # three share their input, so it is quantised once, not three times.
        self.fused: nn.Module | None = None

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(batch, length, self.heads, hidden // self.heads).transpose(1, 2)

        if self.fused is not None:
            q, k, v = (split(t) for t in self.fused(x).split(hidden, dim=-1))
        else:
            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        p = self.dropout_p if self.training else 0.0
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p)
        return out.transpose(1, 2).reshape(batch, length, hidden)


class _Residual(nn.Module):
    """dense -> dropout -> LayerNorm(+ the block's input): BERT's `*Output` modules."""

    def __init__(self, c: dict[str, Any], width: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c.get("layer_norm_eps", 1e-12))
        self.dropout = nn.Dropout(c.get("hidden_dropout_prob", 0.1))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _Residual(c, c["hidden_size"])


class _Intermediate(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])


class _Layer(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _Residual(c, c["intermediate_size"])

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        attended = self.attention.output(self.attention.self(x, keep), x)
        widened = nn.functional.gelu(self.intermediate.dense(attended))
        return self.output(widened, attended)


class _Encoder(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c["num_hidden_layers"]))


class BertSentenceModel(nn.Module):
    """BERT + pooling (+ normalisation), with the parts of a SentenceTransformer the encoder uses:
    `preprocess`, a forward on its features returning "sentence_embedding", `tokenizer`,
    `max_seq_length`, `prompts` and `get_embedding_dimension`."""

    def __init__(self, layout: FolderLayout, tokenizer: Any) -> None:
        super().__init__()
        self.embeddings = _Embeddings(layout.config)
        self.encoder = _Encoder(layout.config)
        self.layout = layout
        self.tokenizer = tokenizer
        self.prompts = layout.prompts
        self.max_seq_length = layout.max_seq_length

    def get_embedding_dimension(self) -> int:
        return int(self.layout.config["hidden_size"])

    def preprocess(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Token ids, attention mask and token types, padded to the longest, truncated as
        sentence-transformers truncates (to `max_seq_length`)."""
        return tokenize(self.tokenizer, self.layout, self.max_seq_length, texts)

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids, mask = features["input_ids"], features["attention_mask"]
        types = features.get("token_type_ids")
        x = self.embeddings(ids, torch.zeros_like(ids) if types is None else types)
        keep = mask.bool()[:, None, None, :]
        for layer in self.encoder.layer:
            x = layer(x, keep)
        if self.layout.pooling == "cls":
            pooled = x[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        if self.layout.normalize:
            pooled = nn.functional.normalize(pooled, p=2, dim=1)
        return {"sentence_embedding": pooled}


def tokenize(
    tokenizer: Any, layout: FolderLayout, max_seq_length: int | None, texts: list[str]
) -> dict[str, torch.Tensor]:
    """`preprocess` for any engine that runs the folder's forward (torch here, onnx_backend.py)."""
    if layout.lowercase:
        texts = [t.lower() for t in texts]
    return dict(
        tokenizer(
            texts, padding=True, truncation="longest_first", return_tensors="pt",
            max_length=max_seq_length,
        )
    )  # fmt: skip


def load_bert_folder(folder: Path, device: str = "cpu") -> BertSentenceModel | None:
    """The folder's model in fp32 on `device`, or None when `describe` does not cover it."""
    layout = describe(folder)
    if layout is None:
        return None
    from safetensors.torch import load_file

    from docsearch.encoders.folder_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(folder)
    if layout.max_seq_length is None:  # the newer layout keeps it as the tokenizer's limit
        limit = min(int(tokenizer.model_max_length), int(layout.config["max_position_embeddings"]))
        layout = replace(layout, max_seq_length=limit)
    # Built without storage and handed the file's tensors: random initial weights cost MiniLM
    # 150 ms of every process start, only to be overwritten.
    with torch.device("meta"):
        model = BertSentenceModel(layout, tokenizer)
    state = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()
             if not k.startswith(_NOT_USED_WEIGHTS)}  # fmt: skip
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:  # another BERT variant: leave it to sentence-transformers
        return None
    return model.to(device).eval()
