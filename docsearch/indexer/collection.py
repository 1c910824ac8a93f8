"""Getting a collection ready to index: which encoder, which chunker, which store.

Shared by the CLI, the UI and `docsearch eval`. An existing collection keeps the encoder and
chunker it was built with (asking for another is refused, unless the run switches: then the new
encoder's version is built beside the serving one, see `prepare`); a new one takes the requested encoder,
or the default one, and falls back to lexical-only (BM25) with a warning when the default encoder
cannot run here. `encoder="none"` asks for a lexical-only collection on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docsearch.encoders.base import Encoder, encoder_from_spec, get_encoder, same_identity
from docsearch.errors import EncoderUnavailableError, UsageError
from docsearch.indexer.chunk import Chunker, ChunkerSettings
from docsearch.indexer.store import (
    CollectionMeta,
    Store,
    drop_unused_versions,
    read_versions,
    survey,
)
from docsearch.text import WORD

if TYPE_CHECKING:
    from docsearch.config import Settings

log = logging.getLogger(__name__)

LEXICAL_ONLY = "none"
DEFAULT_LEXICAL_WINDOW = 400  # words per chunk when there is no encoder to set the window


@dataclass
class Prepared:
    store: Store
    encoder: Encoder | None
    chunker: Chunker


def word_count(texts: Sequence[str]) -> list[int]:
    return [len(WORD.findall(t)) for t in texts]


def word_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in WORD.finditer(text)]


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
    """The requested encoder; the default one, or None (lexical) if the default cannot run
    or is `none` (DOCSEARCH_ENCODER=none: BM25 only)."""
    if LEXICAL_ONLY in (name, default if name is None else None):
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
    switch: bool = False,
) -> Prepared:
    """Open (checking compatibility) or create the collection `name`, with its encoder; call it
    holding the writer lock.

    A new collection takes `encoder_name` (None: the settings' default encoder, with the
    settings' model) and the settings' chunk cap and overlap. An existing one keeps its own
    encoder and chunker; a different explicit encoder is refused, unless `switch`: then the
    Prepared store is a new version built beside the serving one (`encoder_name`, or the
    serving encoder, with the settings' chunking), which the run swaps in when done. A switch
    that did not finish is resumed by the next run that names no other encoder. A collection
    whose creation was interrupted counts as new: creating it repairs it.
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
    drop_unused_versions(db, name)  # what a kill during the last swap's drop left
    pending = _pending(db, name)
    if switch:
        encoder = (
            load_encoder(encoder_name, options, settings.encoder, runtime)
            if encoder_name is not None
            else _encoder_of(store.meta, runtime)
        )
        chunking = ChunkerSettings(chunk_budget(encoder, settings.max_tokens), settings.overlap)
        meta = CollectionMeta(
            _spec(encoder), chunking.as_dict(), source=source or store.meta.source
        )
        if not store.identity_matches(meta):
            return _building(db, name, meta, encoder)
        if pending is not None:  # asked for the serving identity: the unfinished switch goes
            log.warning("collection %r: cancelling the switch to %s", name, pending.identity())
            Store.cancel_build(db, name)
    elif encoder_name is not None:
        encoder = load_encoder(encoder_name, options, settings.encoder, runtime)
        if pending is not None and _same_encoder(pending.meta.encoder, _spec(encoder)):
            return _building(db, name, pending.meta, encoder)
        store.check_compatible(CollectionMeta(_spec(encoder), store.meta.chunker))
        if pending is not None:
            raise UsageError(
                f"collection {name!r} has an unfinished switch to {pending.identity()}; index "
                f"without --encoder to finish it, or add --switch to cancel it and keep the "
                f"current encoder"
            )
    elif pending is not None:  # the unfinished switch resumes
        return _building(db, name, pending.meta, _encoder_of(pending.meta, runtime))
    else:
        encoder = _encoder_of(store.meta, runtime)
    store.ensure_documents()  # a collection from before the docs table: backfilled
    return Prepared(store, encoder, make_chunker(encoder, ChunkerSettings(**store.meta.chunker)))


def _pending(db: str, name: str) -> Store | None:
    """The version an unfinished switch is building; a switch killed before its chunks table
    existed built nothing, and is forgotten."""
    pending = Store.pending_build(db, name)
    if pending is None and read_versions(db, name).building is not None:
        Store.cancel_build(db, name)
    return pending


def _building(db: str, name: str, meta: CollectionMeta, encoder: Encoder | None) -> Prepared:
    store = Store.build_version(db, name, meta)
    log.info("collection %r: building version %d with %s", name, store.version, store.identity())
    return Prepared(store, encoder, make_chunker(encoder, ChunkerSettings(**store.meta.chunker)))


def _encoder_of(meta: CollectionMeta, runtime: dict[str, Any]) -> Encoder | None:
    return encoder_from_spec(meta.encoder, **runtime) if meta.encoder is not None else None


def _same_encoder(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    if old is None or new is None:
        return old is None and new is None
    return same_identity(old, new)


def _spec(encoder: Encoder | None) -> dict[str, Any] | None:
    return encoder.spec() if encoder else None
