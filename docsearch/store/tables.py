"""Where a collection's tables live and what they are called; opening them with Lance.

A collection's version 0 is the tables `<name>__chunks`, `__docs`, `__files` (and, while a run
embeds, `__pending_vectors`); version N > 0 has the same tables under `<name>.vN__` (collection
names hold no dot), and `<name>__versions` is the pointer naming the serving and building
versions (`versions.py`). A Lance table exists once its first manifest (`_versions/*.manifest`)
is written; a process killed while creating one leaves a folder without it (only
`_transactions/`): not a table, and no data in it, hence the three states READY, INCOMPLETE and
ABSENT.
`OpenedTables`: one version's tables opened for reading, once per search within `reading()`.
Not here: which collections exist and opening them (`database.py`), reads and writes.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docsearch.store.database import Database

READY, INCOMPLETE, ABSENT = "ready", "incomplete", "absent"
COLLECTION_TABLES = ("chunks", "files")
PENDING_TABLE = "pending_vectors"  # embedded vectors not yet committed (a run's checkpoint)
# Every table of a version, in the order they are dropped: the chunks table (the marker) first.
ALL_TABLES = ("chunks", "docs", PENDING_TABLE, "files")
VERSIONS_TABLE = "versions"
VERSIONS_KEY = "docsearch_versions"
# Exact (flat) vector search reads every vector: fine up to tens of thousands of chunks (about
# 30 ms at 10k here). Above this many rows a run's end builds an IVF-HNSW index (scalar
# quantised; `indexes.py`); below it unfiltered searches run in memory (`exact.py`).
VECTOR_INDEX_MIN_ROWS = 50_000


def table_prefix(name: str, version: int) -> str:
    """What a version's table names start with, before `__kind`."""
    return name if version == 0 else f"{name}.v{version}"


def parse_table(table: str) -> tuple[str, int, str] | None:
    """(collection, version, kind) of a docsearch table name; None for any other table."""
    prefix, _, kind = table.rpartition("__")
    name, dot, version = prefix.partition(".v")
    if not name or not kind or (dot and not version.isdigit()):
        return None
    return name, int(version) if dot else 0, kind


def local_db_path(db_uri: str) -> Path | None:
    """The folder of a local database, read the way LanceDB reads the address: a path (relative,
    or with `~`) or a `file://` / `file:/` URI; None for an object store (s3://, gs://, az://...)."""
    if db_uri.startswith("file://"):
        db_uri = db_uri[len("file://") :]
    elif db_uri.startswith("file:/"):
        db_uri = db_uri[len("file:") :]
    elif "://" in db_uri:
        return None
    return Path(db_uri).expanduser().absolute()


def canonical_uri(db_uri: str) -> str:
    """A local database as an absolute path (how LanceDB reads it); an object store as given."""
    folder = local_db_path(db_uri)
    return str(folder) if folder is not None else db_uri


def table_uri(db_uri: str, table: str) -> str:
    """Where LanceDB keeps a table: `<db>/<table>.lance` (local folders and object stores)."""
    return f"{db_uri.rstrip('/')}/{table}.lance"


def has_manifest(table_dir: Path) -> bool:
    try:
        with os.scandir(table_dir / "_versions") as entries:
            return any(entry.name.endswith(".manifest") for entry in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False


def connect(db_uri: str):  # type: ignore[no-untyped-def]
    import lancedb

    return lancedb.connect(db_uri)


def table_names(db) -> list[str]:  # type: ignore[no-untyped-def]
    """The tables a LanceDB connection lists (every page of them)."""
    names: list[str] = []
    page_token = None
    while True:
        response = db.list_tables(page_token=page_token)
        names.extend(response.tables)
        page_token = getattr(response, "page_token", None)
        if not page_token:
            return names


@functools.cache
def _session():  # type: ignore[no-untyped-def]
    """One Lance session per process: its caches keep loaded indexes across reads.

    Every read opens the table's latest version (cheap: a manifest), so it sees other writers'
    commits; without a shared session each open would reload the vector index (~100 ms at 100k
    chunks) on every query.
    """
    import lance

    return lance.Session()


def dataset(uri: str):  # type: ignore[no-untyped-def]
    """The latest version of the Lance dataset at `uri` (a table's, see `table_uri`)."""
    import lance

    return lance.dataset(uri, session=_session())


def last_write(dataset: Any) -> float:
    """When a table's latest version was written (a timestamp; 0 for none)."""
    versions = dataset.versions()
    stamp = versions[-1]["timestamp"] if versions else None
    return stamp.timestamp() if stamp is not None else 0.0


def has_index(table: Any, name: str) -> bool:
    """Whether a LanceDB table has the index `name`."""
    return name in {cfg.name for cfg in table.list_indices()}


class OpenedTables:
    """One version's tables opened for reading: each read opens a table's latest version (it sees
    other writers' commits), except within `reading()` on a thread, where each table is opened
    once and read at that version until the block ends. A search runs in one such block, so its
    legs and passages read one version of each table (and six opens cost a short query ~1 ms)."""

    def __init__(self, database: Database, prefix: str) -> None:
        self.database, self.prefix = database, prefix
        self._local = threading.local()  # `opened`: table -> dataset, within `reading()`

    def dataset(self, table: str) -> Any:
        """`table`'s dataset: the one this thread's `reading()` opened first, else the latest."""
        opened: dict[str, Any] | None = getattr(self._local, "opened", None)
        if opened is None:
            return self.latest(table)
        found = opened.get(table)
        if found is None:
            found = opened[table] = self.latest(table)
        return found

    def latest(self, table: str) -> Any:
        return self.database.dataset(f"{self.prefix}__{table}")

    @contextmanager
    def reading(self) -> Iterator[None]:
        if getattr(self._local, "opened", None) is not None:  # within one already
            yield
            return
        self._local.opened = {}
        try:
            yield
        finally:
            self._local.opened = None
