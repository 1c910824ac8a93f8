"""A database folder (or object-store prefix) of collections: `Database`, as LanceDB's own
`DBConnection` is to its tables.

It holds the address (canonical: every spelling of a local folder is one path), the LanceDB
connection (made only when something is written: importing `lancedb` costs seconds, and reads go
straight to the Lance datasets), and everything about the collections as a set: which exist and
which are incomplete (`survey`), their version pointers (`versions`, `move`), the writer lock,
the caches derived from a collection, creating, opening and dropping them. Opening one
collection reads its own tables only; the survey of them all is for listings and errors.
A collection is complete when its serving version's chunks and files tables are; the chunks
table is created last, so a complete collection never lacks its files table. Its docs table is
derived from the chunks: a collection built before it existed gets it from its next writer.
Not here: reading a collection (`reads.Store`), writing one (`writes.Writer`), the pure
version transitions (`versions.step`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

from docsearch.errors import CollectionNotFoundError, UsageError
from docsearch.store.schema import CollectionMeta, chunks_schema, docs_schema, files_schema
from docsearch.store.schema import validate_name as validate_name
from docsearch.store.tables import (
    ABSENT,
    ALL_TABLES,
    COLLECTION_TABLES,
    INCOMPLETE,
    PENDING_TABLE,
    READY,
    VERSIONS_KEY,
    VERSIONS_TABLE,
    canonical_uri,
    connect,
    dataset,
    has_manifest,
    last_write,
    local_db_path,
    parse_table,
    table_names,
    table_prefix,
    table_uri,
)
from docsearch.store.versions import Event, Versions, VersionState, step

log = logging.getLogger(__name__)

_warned: set[tuple[str, str]] = set()  # (database, collection): incomplete, warned once


class Database:
    """The collections under one address."""

    def __init__(self, uri: str) -> None:
        self.given = uri  # as the user spelled it, for messages
        self.uri = canonical_uri(uri)

    @cached_property
    def connection(self) -> Any:
        """The LanceDB connection (writes, table creation, index management)."""
        return connect(self.uri)

    def dataset(self, table: str) -> Any:
        """The latest version of `table`'s Lance dataset, for reading."""
        return dataset(table_uri(self.uri, table))

    # -- which tables and collections exist ----------------------------------------------------

    def table_state(self, table: str) -> str:
        """READY, INCOMPLETE (a creation was interrupted) or ABSENT; local folders need no lance."""
        root = local_db_path(self.uri)
        if root is not None:
            folder = root / f"{table}.lance"
            if not folder.is_dir():
                return ABSENT
            return READY if has_manifest(folder) else INCOMPLETE
        try:
            self.dataset(table)
        except ValueError as exc:  # Lance's "Dataset at path ... was not found"
            if "not found" not in str(exc):
                raise
            return INCOMPLETE if table in table_names(self.connection) else ABSENT
        return READY

    def table_names(self) -> list[str]:
        """Every table folder in the database, complete or not."""
        root = local_db_path(self.uri)
        if root is None:
            return table_names(self.connection)
        if not root.is_dir():
            return []
        return [p.name[: -len(".lance")] for p in root.glob("*.lance") if p.is_dir()]

    def survey(self) -> tuple[list[str], dict[str, str]]:
        """The complete collections, and the incomplete ones with what is wrong with each (each
        judged by the tables of the version that serves it)."""
        names = set()
        for table in self.table_names():
            parsed = parse_table(table)
            if parsed and parsed[2] in (*COLLECTION_TABLES, VERSIONS_TABLE):
                names.add(parsed[0])
        complete, broken = [], {}
        for name in sorted(names):
            why = self.problem(name)
            if why is None:
                complete.append(name)
            else:
                broken[name] = why
        return complete, broken

    def problem(self, name: str) -> str | None:
        """Why `name` is not a complete collection (None: it is). A switch that swaps versions
        meanwhile drops the tables just read: read again under the new pointer."""
        for _ in range(3):
            active = self.versions(name).active
            prefix = table_prefix(name, active)
            chunks, files = (self.table_state(f"{prefix}__{kind}") for kind in COLLECTION_TABLES)
            if (chunks, files) == (READY, READY) or self.versions(name).active == active:
                break
        return what_is_wrong(chunks, files)

    def list_collections(self) -> list[str]:
        """The complete collections; an incomplete one is left out with a warning (once per
        process), so it never stops listing or searching the others."""
        complete, broken = self.survey()
        for name, why in broken.items():
            if (self.uri, name) not in _warned:
                _warned.add((self.uri, name))
                log.warning("%s", incomplete_message(name, why))
        return complete

    def resolve(self, name: str | None) -> str:
        """`name`, or the only collection, or the most recently written one."""
        if name:
            return name
        names = self.list_collections()
        if not names:
            raise CollectionNotFoundError(
                f"no collections in {self.given} yet; create one with `docsearch index PATH`"
            )
        if len(names) == 1:
            return names[0]
        return max(names, key=self.last_write)

    # -- one collection ----------------------------------------------------------------------

    def check_complete(self, name: str) -> None:
        """CollectionNotFoundError unless `name` is a complete collection (its own tables read;
        the others only to say what there is)."""
        if self.problem(name) is None:
            return
        complete, broken = self.survey()
        if name in broken:
            raise CollectionNotFoundError(incomplete_message(name, broken[name]))
        known = ", ".join(complete) or "none yet"
        raise CollectionNotFoundError(
            f"no collection named {name!r} in {self.given} (collections: {known}); "
            f"create it with `docsearch index PATH --collection {name}`"
        )

    def last_write(self, name: str) -> float:
        """When the serving version's chunks table was last written (a timestamp)."""
        prefix = table_prefix(name, self.versions(name).active)
        return last_write(self.dataset(f"{prefix}__chunks"))

    def create_version(self, name: str, version: int, meta: CollectionMeta) -> None:
        """Make sure version `version` of `name` has its tables: kept if its chunks table
        exists (the files table restored if missing), else created from `meta` (an
        interrupted creation's leftovers dropped first). Call it holding the writer lock."""
        validate_name(name)
        db, prefix = self.connection, table_prefix(name, version)
        state = {kind: self.table_state(f"{prefix}__{kind}") for kind in COLLECTION_TABLES}
        if state["chunks"] == READY:
            if state["files"] != READY:  # cannot come from our creation order; rebuilt anyway
                log.warning("collection %r: recreating its missing files table", name)
                self.drop_tables(prefix, ["files"])
                db.create_table(f"{prefix}__files", schema=files_schema())
            return
        if any(s != ABSENT for s in state.values()):
            log.warning(
                "collection %r was not fully created (interrupted); creating it again", name
            )
        # Stale records would claim files are indexed; stale vectors may be another encoder's.
        self.drop_tables(prefix, [PENDING_TABLE, "files", "docs", "chunks"])
        dim = meta.encoder["dim"] if meta.encoder else None
        db.create_table(f"{prefix}__files", schema=files_schema())
        docs = db.create_table(f"{prefix}__docs", schema=docs_schema(dim))
        from docsearch.store.indexes import index_documents

        index_documents(docs)
        db.create_table(f"{prefix}__chunks", schema=chunks_schema(dim, meta))  # last: the marker

    # -- versions ------------------------------------------------------------------------------

    def versions(self, name: str) -> Versions:
        """The collection's version pointer (version 0 serving, no switch: no pointer table)."""
        table = f"{name}__{VERSIONS_TABLE}"
        if self.table_state(table) != READY:  # absent, or its creation was killed: never used
            return Versions()
        raw = self.dataset(table).schema.metadata.get(VERSIONS_KEY.encode())
        return Versions(**json.loads(raw)) if raw else Versions()

    def version_state(self, name: str) -> VersionState:
        """The pointer, the versions on disk, and whether the build has its chunks table."""
        pointer = self.versions(name)
        building = pointer.building
        started = building is not None and (
            self.table_state(f"{table_prefix(name, building)}__chunks") == READY
        )
        return VersionState(pointer, frozenset(self.stored_versions(name)), started)

    def move(self, name: str, event: Event) -> tuple[VersionState, VersionState]:
        """Apply `event` (`versions.step`) to `name`'s versions: the pointer written in one
        commit, then the tables of the versions it no longer names dropped. Call it holding the
        writer lock. The states before and after (Refused as `step` raises it)."""
        before = self.version_state(name)
        after = step(before, event)
        if after.pointer != before.pointer:
            self._write_versions(name, after.pointer)
        for version in sorted(before.stored - after.stored):
            log.info("collection %r: dropping the tables of its unused version %d", name, version)
            self.drop_tables(table_prefix(name, version), ALL_TABLES)
        return before, after

    def _write_versions(self, name: str, versions: Versions) -> None:
        """Point the collection at `versions`, in one commit (a new pointer table: its creation)."""
        import pyarrow as pa

        table = f"{name}__{VERSIONS_TABLE}"
        state = self.table_state(table)
        if state == READY:
            self.dataset(table).update_schema_metadata({VERSIONS_KEY: versions.to_json()})
            return
        if state == INCOMPLETE:
            self.connection.drop_table(table)
        metadata = {VERSIONS_KEY.encode(): versions.to_json().encode()}
        schema = pa.schema([pa.field("unused", pa.int32())], metadata=metadata)
        self.connection.create_table(table, schema=schema)

    def stored_versions(self, name: str) -> set[int]:
        """Every version of `name` with a table on disk, complete or not."""
        found = (parse_table(table) for table in self.table_names())
        return {p[1] for p in found if p and p[0] == name and p[2] != VERSIONS_TABLE}

    # -- dropping --------------------------------------------------------------------------------

    def drop_tables(self, prefix: str, kinds: Iterable[str]) -> None:
        """Drop the tables `<prefix>__<kind>` that exist (a version's: `table_prefix`)."""
        for kind in kinds:
            if self.table_state(f"{prefix}__{kind}") != ABSENT:
                self.connection.drop_table(f"{prefix}__{kind}")

    def drop_collection(self, name: str) -> None:
        """Drop a collection's tables, complete or not, every version of it; the serving
        version's chunks table first, so an interrupted drop leaves an incomplete collection
        (reported, and repaired or dropped later), then the version pointer; its caches
        (`cache_file`) go last."""
        versions = self.stored_versions(name)
        pointer = self.table_state(f"{name}__{VERSIONS_TABLE}") != ABSENT
        if not versions and not pointer:
            raise CollectionNotFoundError(f"no collection named {name!r} in {self.given}")
        active = self.versions(name).active
        for version in sorted(versions, key=lambda v: v != active):  # the serving one first
            self.drop_tables(table_prefix(name, version), ALL_TABLES)
        self.drop_tables(name, [VERSIONS_TABLE])
        folder = local_db_path(self.uri)
        for cache in folder.glob(f".{name}.*.cache") if folder is not None else []:
            cache.unlink(missing_ok=True)

    # -- beside the tables: the lock, derived caches ---------------------------------------------

    @contextmanager
    def writer_lock(self, name: str) -> Iterator[None]:
        """One writer per collection on a local database; a second one is refused, not queued.

        The lock is a `flock` on `.<name>.lock` in the database folder, reached through its real
        path, so every spelling of one folder (relative, `file://`, `~`, through a symlink)
        meets the same lock. Object stores are single-writer by rule, not by lock: they offer
        no lock that this module could take and test offline, and an unlocked lock file (check,
        then write) would only look like a guard. Concurrent merges there duplicate rows, so a
        write to one warns.
        """
        folder = local_db_path(self.uri)
        if folder is None:
            log.warning(
                "%s is an object store: docsearch cannot lock it, so run at most one indexing "
                "process per collection at a time",
                self.given,
            )
            yield
            return
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        with open(Path(os.path.realpath(folder)) / f".{name}.lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(
                    f"collection {name!r} is being indexed by another process; wait for it "
                    f"to finish"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def cache_file(self, name: str, kind: str) -> Path | None:
        """Where a cache derived from a local collection's tables is kept:
        `.<name>.<kind>.cache` in the database folder, dropped with the collection (names hold
        no dots, so the pattern never reaches another collection's files). None for an object
        store: no cache is kept."""
        folder = local_db_path(self.uri)
        return folder / f".{name}.{kind}.cache" if folder is not None else None


def what_is_wrong(chunks: str, files: str) -> str | None:
    """Why a version whose chunks and files tables are in these states is not complete."""
    if chunks == INCOMPLETE or files == INCOMPLETE:
        return "its creation was interrupted (a table folder holds no table version)"
    if chunks == ABSENT:
        return "it has a files table but no chunks table (creation or drop was interrupted)"
    if files != READY:
        return "its files table is missing"
    return None


def incomplete_message(name: str, why: str) -> str:
    return (
        f"collection {name!r} is incomplete: {why}; `docsearch index PATH --collection {name}` "
        f"repairs it, `docsearch collections drop {name}` removes it"
    )


def resolve_collection(db: str | Database, name: str | None) -> str:
    """`Database.resolve` for a caller holding the database's address."""
    return (db if isinstance(db, Database) else Database(db)).resolve(name)


def cache_file(db: str | Database, name: str, kind: str) -> Path | None:
    """`Database.cache_file` for a caller holding the database's address."""
    return (db if isinstance(db, Database) else Database(db)).cache_file(name, kind)
