"""Writing one version of a collection: `Writer`, what an indexing run holds (with the lock).

Writes are batched: one `merge_insert` replaces the chunks of a batch of files in a single
commit (a file is never half old, half new), a second one their rows in `docs` (one per file,
derived from its chunks: whole text, mean vector), then the `files` table records them. A file
too large to hold in memory is written as uncommitted fragments a group of chunks at a time,
with its document row last, and committed alone (`write_fragments`); the Ray engine's workers
write fragments the same way. A commit lists the paths whose rows it replaces as pending in the
chunks and docs tables' config before the rows change and clears them once their file records
are written: searches leave pending paths out, so a killed run's half-written files are never
found, and the next run redoes them (`pending.py`). The indexes are kept up to date here
(`indexes.py`), and the docs table of a collection from before it is backfilled.
Not here: reads and searches (`reads.Store`, which `store` is), the vector checkpoint's table
(`checkpoint.py`), opening and switching versions (`database.py`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from functools import cached_property
from typing import Any

from docsearch.indexer.filters import sql_in
from docsearch.store.checkpoint import PendingVectors
from docsearch.store.documents import DOC_SOURCE, document_rows
from docsearch.store.indexes import (
    IndexBuild,
    create_search_indexes,
    index_documents,
    vector_index_params,
)
from docsearch.store.pending import PENDING_PATHS_KEY, pending_paths
from docsearch.store.reads import Store
from docsearch.store.schema import (
    ADDED_CHUNK_COLUMNS,
    ADDED_FILE_COLUMNS,
    FileUpdate,
    docs_schema,
)
from docsearch.store.tables import READY, has_index, table_uri

log = logging.getLogger(__name__)


def _replace(table: Any, key: str, rows: list[dict[str, Any]], paths: Sequence[str]) -> None:
    """One commit: upsert `rows` (by `key`) and delete every other row of `paths`."""
    if not rows:
        if paths:
            table.delete(sql_in("path", paths))
        return
    merge = table.merge_insert(key).when_matched_update_all().when_not_matched_insert_all()
    if paths:
        merge = merge.when_not_matched_by_source_delete(sql_in("path", paths))
    merge.execute(rows)


class Writer:
    """Writes `store`'s version of a collection; call its methods holding the writer lock."""

    def __init__(self, store: Store) -> None:
        self.store, self.database = store, store.database
        self.pending = PendingVectors(store)  # the vector checkpoint
        self._search_indexed = False  # the full-text index exists (checked once per Writer)
        self._first_build = False  # this Writer created that index while the table was filling
        self._ocr_columns = False  # the OCR columns exist (checked once per Writer)

    def _table(self, kind: str) -> Any:
        return self.database.connection.open_table(f"{self.store.prefix}__{kind}")

    def _dataset(self, kind: str) -> Any:
        return self.database.dataset(f"{self.store.prefix}__{kind}")

    @cached_property
    def chunks(self) -> Any:
        """The LanceDB chunks table (writes and index management)."""
        return self._table("chunks")

    @cached_property
    def files_table(self) -> Any:
        return self._table("files")

    @cached_property
    def docs(self) -> Any:
        """The LanceDB docs table: one row per file that has chunks."""
        return self._table("docs")

    # -- committing ------------------------------------------------------------------------------

    def commit(
        self,
        updates: Sequence[FileUpdate],
        deleted: Sequence[str] = (),
        fragments: Sequence[Any] = (),
    ) -> None:
        """Replace the chunks and documents of `updates` and drop `deleted` paths: chunks first,
        then documents (each file's row made from its chunks), then files.

        The new chunks are the updates' rows, or `fragments` written beforehand by
        `write_fragments` (the Ray engine's actors; then the updates carry no rows). Either way
        each table changes in one Lance version. The files table is the record of what is done: a
        crash before it is written leaves files that look changed (or deleted files still
        recorded), so the next run redoes them, finding their vectors already stored, and the end
        state equals a clean build.
        """
        self.add_ocr_columns()
        replaced = [u.record.path for u in updates if u.rows is not None]
        gone = [*replaced, *deleted]
        rows = [r for u in updates if u.rows is not None for r in u.rows]
        if rows or fragments:
            self.ensure_search_indexes()  # before the rows land: none is ever unsearchable
            self._set_pending(
                add=replaced if fragments else [u.record.path for u in updates if u.rows]
            )
        if fragments:
            assert not rows, "new chunks come as rows or as fragments, not both"
            for kind in ("chunks", "docs"):
                self._commit_fragments(kind, [f for k, f in fragments if k == kind], gone)
        else:
            _replace(self.chunks, "id", rows, gone)
            _replace(self.docs, "doc_id", document_rows(rows), gone)
        _replace(self.files_table, "path", [asdict(u.record) for u in updates], deleted)
        self._set_pending(remove=gone)

    def _set_pending(self, add: Sequence[str] = (), remove: Sequence[str] = ()) -> None:
        """Add paths to, or remove them from, the chunks and docs tables' pending paths, each in
        one small commit (no data is written). A path is added before any of its rows change
        and removed once its file record is committed: a search reads a table's rows and its
        pending paths from the same version, so it never sees a file that is half written, and
        a run killed in between leaves its files hidden until the next run redoes them."""
        for kind in ("chunks", "docs"):
            dataset = self._dataset(kind)
            before = pending_paths(dataset)
            after = (before | set(add)) - set(remove)
            if after == before:
                continue
            value = json.dumps(sorted(after)) if after else None
            dataset.update_config({PENDING_PATHS_KEY: value})
            getattr(self, kind).checkout_latest()  # the change was committed through another handle

    def write_fragments(
        self, rows: list[dict[str, Any]], documents: list[dict[str, Any]] | None = None
    ) -> list[tuple[str, Any]]:
        """Write chunk rows (with their vectors), and document rows (default: those of the
        files whose rows these are, all of each file's), as new data files of the chunks and
        docs tables without committing them: what `commit(..., fragments=)` adds. Many
        processes may write at once (the Ray engine's actors); nothing is visible until the
        one commit. The local engine writes a large file's chunks a group at a time
        (`documents=[]`), then its document row."""
        import pyarrow as pa
        from lance.fragment import write_fragments

        documents = document_rows(rows) if documents is None else documents
        written = []
        for kind, data in (("chunks", rows), ("docs", documents)):
            if not data:
                continue
            dataset = self._dataset(kind)
            table = pa.Table.from_pylist(data, schema=dataset.schema)
            version = dataset.data_storage_version
            new = write_fragments(
                table, dataset.uri, schema=dataset.schema, data_storage_version=version
            )
            written += [(kind, fragment) for fragment in new]
        return written

    def _commit_fragments(
        self, kind: str, fragments: Sequence[Any], gone_paths: Sequence[str]
    ) -> None:
        """Add `fragments` to table `kind` and delete every older row whose path is in
        `gone_paths`, atomically (one Lance `Update`: the fragments holding such rows are
        rewritten without them)."""
        import lance

        dataset = self._dataset(kind)
        removed, updated = [], []
        if gone_paths:
            where = sql_in("path", gone_paths)
            found = dataset.to_table(columns=[], filter=where, with_row_address=True)
            # A row address is the fragment id << 32 | the row's offset in it.
            ids = sorted({int(a) >> 32 for a in found.column("_rowaddr").to_pylist()})
            for fragment_id in ids:
                kept = dataset.get_fragment(fragment_id).delete(where)
                if kept is None:
                    removed.append(fragment_id)
                else:
                    updated.append(kept)
        operation = lance.LanceOperation.Update(
            removed_fragment_ids=removed, updated_fragments=updated, new_fragments=list(fragments)
        )
        lance.LanceDataset.commit(dataset, operation, read_version=dataset.version)
        getattr(self, kind).checkout_latest()  # `chunks` or `docs`

    # -- schema and derived tables ---------------------------------------------------------------

    def add_ocr_columns(self) -> None:
        """A collection made before OCR gains its columns (unmarked) when next written; one
        schema check per Writer, not one per commit. Before fragments are written for a later
        commit too: they take the table's schema."""
        if self._ocr_columns:
            return
        added = [(self.chunks, column, value) for column, value in ADDED_CHUNK_COLUMNS.items()]
        files = [(self.files_table, column, "''") for column in ADDED_FILE_COLUMNS]
        for table, column, value in [*added, *files]:
            if column not in table.schema.names:
                table.add_columns({column: value})
        self._ocr_columns = True

    def ensure_documents(self) -> None:
        """Give a collection built before the docs table existed (or whose docs creation was
        killed) its documents, made from the stored chunks and vectors: nothing is extracted or
        embedded again. Written in one step, then indexed; a kill between the two leaves a table
        without its index, which `has_documents` does not count and the next writer indexes."""
        store, docs = self.store, f"{self.store.prefix}__docs"
        if self.database.table_state(docs) != READY:
            self.database.drop_tables(store.prefix, ["docs"])  # a creation killed half-way
            dim = store.meta.encoder["dim"] if store.meta.encoder else None
            started, schema = time.perf_counter(), docs_schema(dim)
            data = self._documents_from_chunks(schema)
            # The new table replaces any handle this Writer holds on an older one.
            self.__dict__["docs"] = self.database.connection.create_table(
                docs, data=data, schema=schema
            )
            message = "collection %r: %d documents made from its stored chunks in %.1f s"
            log.info(message, store.name, store.count_documents(), time.perf_counter() - started)
        if not has_index(self.docs, "text_idx"):
            index_documents(self.docs)

    def _documents_from_chunks(self, schema: Any) -> Iterator[Any]:
        import pyarrow as pa

        chunks = self._dataset("chunks").to_table(columns=["path"])["path"].to_pylist()
        paths = sorted(set(chunks))
        columns = [*DOC_SOURCE, "vector"] if self.store.has_vectors else DOC_SOURCE
        yield pa.RecordBatch.from_pylist([], schema=schema)  # a first batch, even for no paths
        for start in range(0, len(paths), 500):
            rows = self.store.rows(sql_in("path", paths[start : start + 500]), columns)
            yield pa.RecordBatch.from_pylist(document_rows(rows), schema=schema)

    # -- indexes ---------------------------------------------------------------------------------

    def ensure_search_indexes(self) -> None:
        """Build the full-text and scalar indexes if the table has none, even while it is
        empty: the indexing service calls this as a run starts and `commit` before the first
        rows land, so lexical search answers throughout a first build. Lance searches rows
        committed after the index was built without it (flat) until `refresh_indexes` indexes
        them (a first build: all its rows again, in one pass)."""
        if self._search_indexed:
            return
        if not has_index(self.chunks, "text_idx"):
            create_search_indexes(self.chunks, self.docs)
            self._first_build = True
        self._search_indexed = True

    def refresh_indexes(self, build: IndexBuild | None = None) -> None:
        """At the end of a run: bring the full-text, scalar and vector indexes up to date (once
        per run, not per row) and drop the vector checkpoint (everything in it is committed).
        `build` says how what is missing is built (default: here, the vector index from
        VECTOR_INDEX_MIN_ROWS chunks)."""
        build = build or IndexBuild()
        self.pending.drop()
        if self.store.count_chunks() == 0:
            return
        if not has_index(self.chunks, "text_idx") or self._first_build:
            # A first build indexes all its rows in one pass, as if built only now.
            if build.workers:  # many small fragments from the workers: merged first
                import lance_ray

                for kind in ("chunks", "docs"):
                    lance_ray.compact_files(self._uri(kind), **build.on_ray())
                    getattr(self, kind).checkout_latest()
            create_search_indexes(self.chunks, self.docs)
            self._first_build = False
        for kind in ("chunks", "docs"):
            self._vector_index(kind, build)
        for table in (self.chunks, self.docs, self.files_table):
            table.optimize()

    def _uri(self, kind: str) -> str:
        return table_uri(self.database.uri, f"{self.store.prefix}__{kind}")

    def _vector_index(self, kind: str, build: IndexBuild) -> None:
        """Table `kind`'s ANN index, built once it holds `build.vector_min_rows` vectors."""
        rows = int(self._dataset(kind).count_rows())
        table = getattr(self, kind)
        has_vectors = self.store.has_vectors
        if not has_vectors or rows < build.vector_min_rows or has_index(table, "vector_idx"):
            return
        params = build.vector_params or vector_index_params(rows)
        if build.workers:
            import lance_ray

            on_ray = {**build.on_ray(), **params}
            lance_ray.create_index(self._uri(kind), column="vector", name="vector_idx", **on_ray)
        else:
            self._dataset(kind).create_index("vector", name="vector_idx", **params)
        table.checkout_latest()  # the index was committed through another handle
