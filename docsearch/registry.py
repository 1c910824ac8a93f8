"""`CollectionRegistry`: the open collections of one process, by name, sharing their encoders.

`docsearch serve` keeps one for the API and the UI it mounts, `docsearch ui` one for its UI: a
collection is opened (its `Retriever` made) once, and an encoder is loaded once per spec in the
process however many collections, versions or front ends use it. A Retriever whose collection
was rebuilt or dropped since is opened again (the old one is closed); `close()` ends them all.
`collection_info` describes a collection as `collections info`, the API and the UI show it.
Imports nothing heavy until used (the CLI imports `collection_info` from here).
Not here: searching (`docsearch.retriever`), the store (`docsearch.store`).
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

from docsearch.errors import EncoderUnavailableError, UsageError

if TYPE_CHECKING:
    from docsearch.config import Settings
    from docsearch.encoders.base import Encoder
    from docsearch.retriever import Retriever
    from docsearch.store.reads import Store


class CollectionRegistry:
    """name -> its open Retriever; spec -> its loaded Encoder. Safe to share between threads."""

    def __init__(self, settings: Settings | None = None, *, db: str | None = None) -> None:
        from docsearch.config import Settings

        self.settings = settings or Settings()
        self.db = db or self.settings.db
        self._retrievers: dict[str, Retriever] = {}
        self._encoders: list[tuple[dict[str, Any], Encoder]] = []
        # One opening at a time, the encoder loaded then: requests that arrive meanwhile wait
        # for that one load instead of each loading the model.
        self._opening = threading.RLock()
        self.encoder_loads = 0  # encoders this registry has loaded (one per spec)

    def retriever(self, name: str | None) -> Retriever:
        """The collection's Retriever, opened again once the collection was rebuilt or
        dropped; its encoder loaded now if it has vectors (lexical answers if it cannot be)."""
        from docsearch.retriever import Retriever
        from docsearch.store.schema import validate_name

        if not name:
            raise UsageError("no collection yet: index a folder first")
        validate_name(name)
        cached = self._retrievers.get(name)
        if cached is not None and cached.store.is_current():
            return cached
        with self._opening:
            cached = self._retrievers.get(name)
            if cached is not None and cached.store.is_current():
                return cached
            fresh = Retriever(name, db=self.db, settings=self.settings, encoders=self.encoder)
            if fresh.store.has_vectors:
                with contextlib.suppress(EncoderUnavailableError):
                    fresh.encoder()
            self._retrievers[name] = fresh
        if cached is not None:  # a search under way on it finishes first
            cached.close()
        return fresh

    def encoder(self, spec: dict[str, Any]) -> Encoder:
        """The encoder of `spec`, loaded on first use and shared from then on."""
        from docsearch.encoders.base import encoder_from_spec, same_identity

        with self._opening:
            for known, loaded in self._encoders:
                if same_identity(known, spec):
                    return loaded
            loaded = encoder_from_spec(spec)
            self.encoder_loads += 1
            self._encoders.append((spec, loaded))
            return loaded

    def forget(self, name: str | None = None) -> None:
        """Reopen the collection `name` (None: every one) on its next use, as after indexing."""
        with self._opening:
            names = [name] if name is not None else list(self._retrievers)
            old = [self._retrievers.pop(one) for one in names if one in self._retrievers]
        for retriever in old:
            retriever.close()

    def close(self) -> None:
        """Close every open Retriever and let go of the encoders."""
        self.forget()
        with self._opening:
            self._encoders.clear()

    def collection_info(self, name: str) -> dict[str, Any]:
        """What the collection's serving version holds (`collection_info`)."""
        return collection_info(self.db, self.retriever(name).collection)


def collection_info(db: str, name: str) -> dict[str, Any]:
    """What the serving version holds and was built with; `switch`: the same for the version
    an unfinished switch is building (None when there is none)."""
    from docsearch.store.database import Database
    from docsearch.store.reads import Store, building

    database = Database(db)
    store = Store.open(database, name)
    pending = building(database, name)
    return {
        "name": name,
        "source": store.meta.source,
        **version_info(store),
        "switch": version_info(pending) if pending is not None else None,
    }


def version_info(store: Store) -> dict[str, Any]:
    """One version of a collection: its encoder and chunker, and what it holds so far."""
    from docsearch.encoders.base import describe

    files = store.file_stats()
    return {
        "encoder": describe(store.meta.encoder) if store.meta.encoder else "none (lexical only)",
        "encoder_spec": store.meta.encoder,
        "chunker": store.meta.chunker,
        "schema_version": store.meta.schema_version,
        "files": files.indexed,
        "failed_files": len(files.failed),
        "chunks": store.count_chunks(),
        "version": store.version,
    }
