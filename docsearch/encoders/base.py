"""The `Encoder` protocol and the registry that maps names to encoder factories.

An encoder turns texts into unit-norm float32 vectors, counts tokens with its own tokenizer (the
chunker needs that) and describes itself with `spec()` so a collection can store the encoder's
identity beside its vectors and rebuild the same encoder at query time.

Built-in families live in sibling modules that are imported only when their name is asked for;
third-party families register through the `docsearch.encoders` entry-point group, and modules
named in `DOCSEARCH_PLUGINS` (comma-separated) are imported too (how tests add a fake encoder to a
subprocess). Not here: batching, chunking, storage.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

import numpy as np

from docsearch.errors import EncoderUnavailableError, UnknownEncoderError, UsageError


@runtime_checkable
class Encoder(Protocol):
    """What the indexer and the retriever need from an encoder.

    `max_tokens` is the most content tokens (as `count_tokens` counts them, without the special
    tokens and prompts the encoder adds itself) that one document input can hold faithfully; None
    means unbounded. Query and document prompts live inside the encoder, never in callers. Both
    encode methods return (n, dim) float32 rows of unit norm.
    """

    name: str
    dim: int
    max_tokens: int | None

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of each content token of `text`, in order (used for exact splits)."""
        ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def spec(self) -> dict[str, Any]:
        """`{"encoder": name, "options": {...}, "dim": ..., "max_tokens": ...}`.

        `options` holds everything that changes the vectors (model id or path, revision, prompts,
        pooling); `get_encoder(spec["encoder"], **spec["options"])` rebuilds the encoder.
        Run-time settings that do not change the vectors (device, batch size) stay out of it.
        """
        ...


Factory = Callable[..., Encoder]

_FACTORIES: dict[str, Factory] = {}
_ALIASES: dict[str, str] = {}
# Built-in families by registry name -> module that registers them when imported.
_BUILTIN_MODULES: dict[str, str] = {
    "sentence-transformers": "docsearch.encoders.sentence_transformers",
    "m2-bert": "docsearch.encoders.m2_bert",
    "llm2vec": "docsearch.encoders.llm2vec",
    "nv-embed": "docsearch.encoders.nv_embed",
    "kv-embedding": "docsearch.encoders.kv_embedding",
    "last-token": "docsearch.encoders.baselines",
    "mean": "docsearch.encoders.baselines",
    "prompteol": "docsearch.encoders.baselines",
    "echo": "docsearch.encoders.baselines",
}
_plugins_loaded = False


def register(name: str, *, aliases: Sequence[str] = ()) -> Callable[[Factory], Factory]:
    """Decorator: `@register("m2-bert")` on a class or function returning an `Encoder`."""

    def decorate(factory: Factory) -> Factory:
        _FACTORIES[name] = factory
        for alias in aliases:
            _ALIASES[alias] = name
        return factory

    return decorate


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group="docsearch.encoders"):
        ep.load()
    for module in filter(None, os.environ.get("DOCSEARCH_PLUGINS", "").split(",")):
        importlib.import_module(module.strip())


def _resolve(name: str) -> Factory:
    _load_plugins()
    name = _ALIASES.get(name, name)
    if name not in _FACTORIES and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
        name = _ALIASES.get(name, name)
    if name not in _FACTORIES:
        known = ", ".join(available())
        raise UnknownEncoderError(f"unknown encoder {name!r}; available: {known}")
    return _FACTORIES[name]


def available() -> list[str]:
    """Every encoder name that `get_encoder` accepts (built-in families are not imported)."""
    _load_plugins()
    return sorted(set(_FACTORIES) | set(_BUILTIN_MODULES))


def get_encoder(name: str, **options: Any) -> Encoder:
    """Build the encoder registered under `name` (or an alias) with its options."""
    return _resolve(name)(**options)


def encoder_from_spec(spec: dict[str, Any], **runtime: Any) -> Encoder:
    """Rebuild the encoder a collection was indexed with; `runtime` adds device, batch size..."""
    return get_encoder(spec["encoder"], **spec.get("options", {}), **runtime)


def same_identity(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two specs produce the same vectors (same family and vector-relevant options)."""
    return bool(a.get("encoder") == b.get("encoder") and a.get("options") == b.get("options"))


def describe(spec: dict[str, Any]) -> str:
    """One-line human name of a spec, e.g. `sentence-transformers (model=all-MiniLM-L6-v2)`."""
    opts = spec.get("options") or {}
    inner = ", ".join(f"{k}={v}" for k, v in sorted(opts.items()) if v not in (None, "", {}))
    return f"{spec.get('encoder')} ({inner})" if inner else str(spec.get("encoder"))


# ---------------------------------------------------------------------------------------------
# Helpers shared by encoder families


class HFEncoder:
    """The `Encoder` methods the built-in families share: token counts and spans from their
    Hugging Face `tokenizer`, both sides through `_vectors(texts, side)`, `spec()` from
    `vector_options()`.

    A family sets `name`, `dim`, `max_tokens` and `tokenizer`, and implements `_vectors` (side is
    "query" or "document"; (n, dim) vectors, not yet normalised; never called with no texts) and
    `vector_options` (what changes the vectors; see `spec_of`).
    """

    name: str
    dim: int
    max_tokens: int | None
    tokenizer: Any

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return hf_count_tokens(self.tokenizer, texts)

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return hf_token_spans(self.tokenizer, text)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "query")

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "document")

    def spec(self) -> dict[str, Any]:
        return spec_of(self, self.vector_options())

    def _encode(self, texts: Sequence[str], side: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(self._vectors(texts, side))

    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        raise NotImplementedError

    def vector_options(self) -> dict[str, Any]:
        raise NotImplementedError


def spec_of(encoder: Any, options: dict[str, Any]) -> dict[str, Any]:
    """`encoder`'s spec from the options that change its vectors; None-valued ones are unset
    (left out, so the spec reads as the family's default and matches older specs)."""
    return {
        "encoder": encoder.name,
        "options": {k: v for k, v in options.items() if v is not None},
        "dim": encoder.dim,
        "max_tokens": encoder.max_tokens,
    }


def one_of(option: str, value: str, allowed: Sequence[str]) -> str:
    """`value` when it is one of `allowed`, else a `UsageError` that lists them."""
    if value not in allowed:
        raise UsageError(f"unknown {option} {value!r}; use one of: {', '.join(allowed)}")
    return value


def check_keys(found: set[str], expected: set[str], what: str = "checkpoint") -> None:
    """Strict loading: a checkpoint's tensor names must be exactly the module's."""
    missing, unexpected = sorted(expected - found), sorted(found - expected)
    if missing or unexpected:
        raise EncoderUnavailableError(
            f"the {what} does not match its config.json: {len(missing)} missing keys "
            f"{missing[:3]}, {len(unexpected)} unexpected {unexpected[:3]}"
        )


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero); float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def hf_token_spans(tokenizer: Any, text: str) -> list[tuple[int, int]]:
    """Character spans of a Hugging Face fast tokenizer's content tokens for `text`."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return [(int(a), int(b)) for a, b in enc["offset_mapping"]]


def hf_count_tokens(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Number of content tokens (no special tokens) per text."""
    if not texts:
        return []
    enc = tokenizer(list(texts), add_special_tokens=False, verbose=False)
    return [len(ids) for ids in enc["input_ids"]]
