"""Getting a collection ready to index: which encoder, which chunker, which store.

Shared by the CLI, the UI and `docsearch eval`. An existing collection keeps the encoder and
chunker it was built with (asking for another is refused, unless the run switches: then the new
encoder's version is built beside the serving one, see `prepare`; which version a run writes is
decided by `store.versions.step`); a new one takes the requested encoder,
or the default one, and falls back to lexical-only (BM25) with a warning when the default encoder
cannot run here. `encoder="none"` asks for a lexical-only collection on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docsearch.encoders.base import Encoder, encoder_from_spec, get_encoder
from docsearch.errors import EncoderUnavailableError, UsageError
from docsearch.indexer.chunk import Chunker, ChunkerSettings
from docsearch.store.database import Database
from docsearch.store.reads import Store
from docsearch.store.schema import CollectionMeta, check_compatible, validate_name
from docsearch.store.versions import Refused, Run, VersionState
from docsearch.store.writes import Writer
from docsearch.text import WORD

if TYPE_CHECKING:
    from docsearch.config import Settings

log = logging.getLogger(__name__)

LEXICAL_ONLY = "none"
DEFAULT_LEXICAL_WINDOW = 400  # words per chunk when there is no encoder to set the window


@dataclass
class Prepared:
    writer: Writer  # of the version the run writes
    encoder: Encoder | None
    chunker: Chunker

    @property
    def store(self) -> Store:
        return self.writer.store


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
    database: Database,
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
    if database.problem(validate_name(name)) is not None:
        encoder = load_encoder(encoder_name, options, settings.encoder, runtime)
        return _create(database, name, encoder, settings, source)
    serving = Store.open(database, name)
    state = database.version_state(name)
    pending = Store(database, name, state.pending) if state.pending is not None else None
    encoder, wanted = None, None
    if switch or encoder_name is not None:
        encoder = (
            load_encoder(encoder_name, options, settings.encoder, runtime)
            if encoder_name is not None
            else _encoder_of(serving.meta, runtime)
        )
        chunker = (
            ChunkerSettings(chunk_budget(encoder, settings.max_tokens), settings.overlap).as_dict()
            if switch
            else serving.meta.chunker
        )
        wanted = CollectionMeta(_spec(encoder), chunker, source=source or serving.meta.source)
    run = Run(
        switch=switch,
        named=encoder_name is not None,
        asks_serving=wanted is None or _asks(serving.meta, wanted, switch),
        asks_building=bool(pending and wanted and _asks(pending.meta, wanted, switch)),
    )
    try:
        before, after = database.move(name, run)
    except Refused as refused:
        raise _refusal(refused, name, serving, wanted, pending) from None
    _report_dropped_build(name, before, after, pending)
    store = serving
    if after.pointer.building is not None:
        resumed = pending.meta if pending is not None and before.pending == after.writes else None
        store = _build(database, name, after.writes, resumed or wanted)
    return _prepared(store, encoder if wanted is not None else _encoder_of(store.meta, runtime))


def _create(
    database: Database, name: str, encoder: Encoder | None, settings: Settings, source: str
) -> Prepared:
    """A new collection (or one whose creation was interrupted, repaired) with `encoder` and
    the settings' chunking."""
    chunking = ChunkerSettings(chunk_budget(encoder, settings.max_tokens), settings.overlap)
    meta = CollectionMeta(_spec(encoder), chunking.as_dict(), source=source)
    active = database.versions(name).active
    database.create_version(name, active, meta)
    store = Store(database, name, active)
    check_compatible(name, store.meta, meta)
    return _prepared(store, encoder)


def _build(database: Database, name: str, version: int, meta: CollectionMeta | None) -> Store:
    """The version a switch builds, its tables created from `meta` unless it has them."""
    assert meta is not None, "a new build comes from a run that asked for an identity"
    database.create_version(name, version, meta)
    log.info("collection %r: building version %d with %s", name, version, meta.identity())
    return Store(database, name, version)


def _asks(built: CollectionMeta, wanted: CollectionMeta, switch: bool) -> bool:
    """Whether a run asking for `wanted` asks for a version `built` so: a switch compares the
    encoder and the chunking, a run that only names an encoder the encoder."""
    return built.same_identity(wanted) if switch else built.same_encoder(wanted)


def _refusal(
    refused: Refused,
    name: str,
    serving: Store,
    wanted: CollectionMeta | None,
    pending: Store | None,
) -> Exception:
    """The error a refused run reports."""
    if refused.reason == Refused.MISMATCH and wanted is not None:
        try:
            check_compatible(name, serving.meta, wanted)
        except UsageError as mismatch:
            return mismatch
    building = pending.meta.identity() if pending is not None else "another encoder"
    return UsageError(
        f"collection {name!r} has an unfinished switch to {building}; index "
        f"without --encoder to finish it, or add --switch to cancel it and keep the "
        f"current encoder"
    )


def _report_dropped_build(
    name: str, before: VersionState, after: VersionState, pending: Store | None
) -> None:
    """Warn when the run gave up an unfinished switch (cancelled, or replaced by a new one)."""
    if pending is None or before.pending == after.pointer.building:
        return
    if after.pointer.building is None:
        log.warning("collection %r: cancelling the switch to %s", name, pending.meta.identity())
    else:
        log.warning(
            "collection %r: dropping the unfinished switch to %s", name, pending.meta.identity()
        )


def _prepared(store: Store, encoder: Encoder | None) -> Prepared:
    """The run's writer (a collection from before the docs table backfilled), encoder, chunker."""
    writer = Writer(store)
    writer.ensure_documents()
    chunker = make_chunker(encoder, ChunkerSettings(**store.meta.chunker))
    return Prepared(writer, encoder, chunker)


def _encoder_of(meta: CollectionMeta, runtime: dict[str, Any]) -> Encoder | None:
    return encoder_from_spec(meta.encoder, **runtime) if meta.encoder is not None else None


def _spec(encoder: Encoder | None) -> dict[str, Any] | None:
    return encoder.spec() if encoder else None
