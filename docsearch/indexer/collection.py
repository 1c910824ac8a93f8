"""Getting a collection ready to index: which encoder, which chunker, which store.

Shared by the CLI, the UI and `docsearch eval`. An existing collection keeps the encoder and
chunker it was built with (asking for another is refused); a new one takes the requested encoder,
or the default one, and falls back to lexical-only (BM25) with a warning when the default encoder
cannot run here. `encoder="none"` asks for a lexical-only collection on purpose.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docsearch.encoders.base import Encoder, encoder_from_spec, get_encoder
from docsearch.errors import EncoderUnavailableError
from docsearch.indexer.chunk import Chunker, ChunkerSettings
from docsearch.indexer.store import CollectionMeta, Store, survey

if TYPE_CHECKING:
    from docsearch.config import Settings

log = logging.getLogger(__name__)

LEXICAL_ONLY = "none"
DEFAULT_LEXICAL_WINDOW = 400  # words per chunk when there is no encoder to set the window
_WORD = re.compile(r"\w+")


@dataclass
class Prepared:
    store: Store
    encoder: Encoder | None
    chunker: Chunker


def word_count(texts: Sequence[str]) -> list[int]:
    return [len(_WORD.findall(t)) for t in texts]


def word_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _WORD.finditer(text)]


def chunk_budget(encoder: Encoder | None, cap: int | None) -> int:
    """Window size: the encoder's own limit, lowered by the user's cap."""
    limit = encoder.max_tokens if encoder is not None else DEFAULT_LEXICAL_WINDOW
    if cap and limit:
        return min(cap, limit)
    return cap or limit or DEFAULT_LEXICAL_WINDOW


def make_chunker(encoder: Encoder | None, settings: ChunkerSettings) -> Chunker:
    if encoder is None:
        return Chunker(settings, word_count, word_spans)
    return Chunker(settings, encoder.count_tokens, encoder.token_spans)


def load_encoder(
    name: str | None, options: dict[str, Any], default: str, runtime: dict[str, Any]
) -> Encoder | None:
    """The requested encoder; the default one, or None (lexical) if the default cannot run."""
    if name == LEXICAL_ONLY:
        return None
    if name is not None:
        return get_encoder(name, **options, **runtime)
    try:
        return get_encoder(default, **options, **runtime)
    except EncoderUnavailableError as exc:
        log.warning(
            "default encoder %r unavailable (%s); indexing for lexical search only", default, exc
        )
        return None


def prepare(
    db: str,
    name: str,
    *,
    encoder_name: str | None,
    options: Mapping[str, Any],
    settings: Settings,
    source: str = "",
    runtime: dict[str, Any] | None = None,
) -> Prepared:
    """Open (checking compatibility) or create the collection `name`, with its encoder.

    A new collection takes `encoder_name` (None: the settings' default encoder, with the
    settings' model) and the settings' chunk cap and overlap. An existing one keeps its own
    encoder; a different explicit request is refused. A collection whose creation was
    interrupted counts as new: creating it repairs it.
    """
    options = settings.with_default_model(encoder_name, options)
    runtime = runtime or {}
    complete, _ = survey(db)
    if name not in complete:
        encoder = load_encoder(encoder_name, options, settings.encoder, runtime)
        chunking = ChunkerSettings(chunk_budget(encoder, settings.max_tokens), settings.overlap)
        meta = CollectionMeta(_spec(encoder), chunking.as_dict(), source=source)
        return Prepared(
            Store.open_or_create(db, name, meta), encoder, make_chunker(encoder, chunking)
        )
    store = Store.open(db, name)
    if encoder_name is not None:
        encoder = load_encoder(encoder_name, options, settings.encoder, runtime)
        store.check_compatible(CollectionMeta(_spec(encoder), store.meta.chunker))
    elif store.meta.encoder is not None:
        encoder = encoder_from_spec(store.meta.encoder, **runtime)
    else:
        encoder = None
    store.ensure_documents()  # a collection from before the docs table: backfilled
    return Prepared(store, encoder, make_chunker(encoder, ChunkerSettings(**store.meta.chunker)))


def _spec(encoder: Encoder | None) -> dict[str, Any] | None:
    return encoder.spec() if encoder else None
