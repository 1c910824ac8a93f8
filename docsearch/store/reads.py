"""Reading one version of a collection: `Store`, what a Retriever holds.

Reads go straight to the Lance datasets under the tables (the same files, the same indexes and
scores as LanceDB's): importing `lancedb` costs seconds, and `search --mode lexical` must start
fast. Every read opens the table's latest version, so it sees other writers' commits; within
`tables.reading()` (one search) a table is opened once and read at that version. Searches
(vector, BM25, phrase) return typed `Candidate`s filtered by a `ChunkFilter` (whole documents:
`DocCandidate`s; BM25 over unstemmed words, cosine to the mean chunk vector); they leave out the
paths a commit lists as pending in the version they read (`pending.py`). Unfiltered nearest
searches on a table without an ANN index run in memory (`exact.py`); such a table, once held, has
its full-text index loaded into Lance's cache where it is small (`warm_text_index`). The files
table is read through typed methods.
Not here: opening and switching versions (`database.py`, `versions.py`), writing, checkpoints
and indexes (`writes.py`, `checkpoint.py`, `indexes.py`), fusion (`docsearch.fusion`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from docsearch.errors import UsageError
from docsearch.indexer.filters import ChunkFilter, bad_where, lance_problem, sql_in, sql_str
from docsearch.store.checkpoint import read_pending_vectors
from docsearch.store.database import Database
from docsearch.store.exact import ROW_ID, ExactVectors
from docsearch.store.pending import hiding, pending_paths
from docsearch.store.schema import (
    DOC_COLUMNS,
    META_KEY,
    SCHEMA_VERSION,
    Candidate,
    CollectionMeta,
    DocCandidate,
    FileRecord,
    FileStats,
    candidate,
    changed,
    doc_candidate,
    result_columns,
)
from docsearch.store.tables import READY, VECTOR_INDEX_MIN_ROWS, OpenedTables, table_prefix

log = logging.getLogger(__name__)

TEXT_INDEX = "text_idx"  # the full-text index of the chunks and of the docs table
# A table held in memory (`HeldVectors`) has its full-text index loaded into Lance's cache too
# when it is read, where the index takes up to this much on disk (3-5x that in the cache: the
# 2k-chunk peers' folder's two indexes, 1.1 MB on disk, take 4.9 MB there and 22 ms once; this
# bound is ~45k chunks' worth). A search otherwise reads each new word's posting lists: in a
# fresh process a chunk BM25 search of words not searched yet took 1.0 ms, 0.55 warm.
WARM_TEXT_INDEX_BYTES = 16 << 20

# Queries visit every partition's graph of an ANN index with a wide beam (measured in
# benchmarks/speed.py: latency and recall@10 against exact search).
ANN_SEARCH = {"nprobes": 8, "ef": 300}


def _sql(where: str | ChunkFilter | None) -> str | None:
    """A read's filter as Lance takes it: docsearch's own SQL as is, a caller's filter compiled."""
    return where.sql() if isinstance(where, ChunkFilter) else where


def _narrows(where: ChunkFilter | None) -> bool:
    """Whether `where` lets fewer than all chunks through."""
    return where is not None and where.sql() is not None


def _nearest(vector: np.ndarray, k: int) -> dict[str, Any]:
    """A cosine nearest-neighbour query for `k` rows. The ANN settings apply only where the
    table has a vector index; HNSW refuses a beam (ef) narrower than k, hence the max."""
    query = {"column": "vector", "q": vector.astype(np.float32), "k": k, "metric": "cosine"}
    return query | ANN_SEARCH | {"ef": max(ANN_SEARCH["ef"], k)}


class Store:
    """One version of a collection, read: its chunks, documents and file records, and what it
    was built with. `Store.open` opens the serving version; a writer the version it writes."""

    def __init__(self, database: Database, name: str, version: int) -> None:
        self.database, self.name, self.version = database, name, version
        self.uri = database.uri
        self.prefix = table_prefix(name, version)  # its tables are `<prefix>__<kind>`
        self._has_documents = False
        # The chunks' text is held too: the passages a search shows read it there.
        self._exact = {"chunks": HeldVectors(texts=True), "docs": HeldVectors()}
        self.tables = OpenedTables(database, self.prefix)  # `tables.reading()`: one search
        self.meta = stored_meta(self.dataset("chunks"))
        if self.meta.schema_version > SCHEMA_VERSION:
            raise UsageError(
                f"collection {name!r} was written by a newer docsearch (schema "
                f"{self.meta.schema_version}); upgrade docsearch to read it"
            )

    @classmethod
    def open(cls, db: str | Database, name: str) -> Store:
        """The version of `name` that serves searches in `db` (its own tables read, no
        others); CollectionNotFoundError if there is no such complete collection."""
        database = db if isinstance(db, Database) else Database(db)
        database.check_complete(name)
        for attempt in range(3):
            active = database.versions(name).active
            try:
                return cls(database, name, active)
            except (OSError, ValueError, KeyError):
                # A switch swapped versions and dropped this one since the pointer was read.
                if attempt == 2 or database.versions(name).active == active:
                    raise
        raise AssertionError("unreachable")

    def dataset(self, table: str) -> Any:
        """A table's Lance dataset, for reading (`OpenedTables.dataset`)."""
        return self.tables.dataset(table)

    def is_current(self, *, fresh: bool = False) -> bool:
        """Whether the collection on disk is still the one this Store opened: False once it was
        dropped, dropped and built again, or switched to another version (another encoder,
        other chunks); reopen it then. Within `tables.reading()` the chunks table is the one
        the block opened (a search checks the version it then reads), unless `fresh`."""
        try:
            serving = self.database.versions(self.name).active == self.version
            chunks = self.tables.latest("chunks") if fresh else self.dataset("chunks")
            return serving and stored_meta(chunks) == self.meta
        except Exception:  # noqa: BLE001 - gone or half-written: either way, reopen and report
            return False

    @property
    def has_vectors(self) -> bool:
        return self.meta.encoder is not None

    @property
    def has_documents(self) -> bool:
        """Whether the docs table is there with its full-text index. False for a collection
        built before docsearch had it, until a writer opens it (`docsearch index` backfills
        it): the retriever then ranks documents by their chunks alone."""
        if not self._has_documents:  # once there, it stays (a rebuilt collection: is_current)
            ready = self.database.table_state(f"{self.prefix}__docs") == READY
            indexes = self.dataset("docs").describe_indices() if ready else []
            self._has_documents = any(index.name == TEXT_INDEX for index in indexes)
        return self._has_documents

    # -- files and bookkeeping -------------------------------------------------------------------

    def file_records(self) -> dict[str, FileRecord]:
        rows = self.dataset("files").to_table().to_pylist()
        return {r["path"]: FileRecord(**r) for r in rows}

    def file_record(self, path: str) -> FileRecord | None:
        """The record of exactly `path` (any string: it is quoted, never read as SQL)."""
        rows = self.dataset("files").to_table(filter=f"path = {sql_str(path)}", limit=1)
        return FileRecord(**rows.to_pylist()[0]) if rows.num_rows else None

    def file_stats(self) -> FileStats:
        columns = ["path", "status", "reason"]
        rows = self.dataset("files").to_table(columns=columns).to_pylist()
        failed = {r["path"]: r["reason"] for r in rows if r["status"] == "failed"}
        return FileStats(sum(r["status"] == "indexed" for r in rows), failed)

    def pending_paths(self) -> list[str]:
        """Paths whose rows an interrupted run left half written: hidden from search, and redone
        (or dropped, if the file is gone) by the next run."""
        chunks, docs = (pending_paths(self.dataset(kind)) for kind in ("chunks", "docs"))
        return sorted(chunks | docs)

    def unrecorded_paths(self) -> list[str]:
        """Paths with a document row but no file record: what a run killed between those two
        commits left before paths were marked pending (an earlier docsearch). Searchable, and
        redone (or dropped) by the next run as pending ones are."""
        if not self.has_documents:
            return []
        documents = self.dataset("docs").to_table(columns=["path"]).column("path").to_pylist()
        records = self.dataset("files").to_table(columns=["path"]).column("path").to_pylist()
        return sorted(set(documents) - set(records))

    def documents_version(self) -> str:
        """The docs table's latest version as a key for caches derived from it: its number and
        when it was written (a collection dropped and built again restarts the numbers, not the
        clock). Read from the manifest already open: no data is read."""
        return version_key(self.dataset("docs"))

    def chunks_version(self) -> str:
        """The chunks table's latest version as a cache key (as `documents_version`)."""
        return version_key(self.dataset("chunks"))

    # -- rows ------------------------------------------------------------------------------------

    def count_chunks(self, where: str | ChunkFilter | None = None) -> int:
        """Chunks matching `where`: docsearch's own SQL (a str) or a caller's ChunkFilter."""
        with filter_errors(self.dataset, where):
            return int(self.dataset("chunks").count_rows(filter=_sql(where)))

    def rows(
        self, where: str | ChunkFilter, columns: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Chunk rows matching `where` (as for `count_chunks`), with `columns` or all of them."""
        scan: dict[str, Any] = {"columns": list(columns or []) or None}
        return self._scan(where, **scan)

    def rows_and_vectors(
        self, where: str | ChunkFilter, columns: Sequence[str]
    ) -> tuple[list[dict[str, Any]], np.ndarray]:
        """Chunk rows matching `where` with `columns`, and their vectors as one (rows, dim)
        float32 array in the same order: read as numbers, not as lists of Python floats
        (8,700 vectors: 0.05 s instead of 0.3 s)."""
        table = self._scan_table(where, columns=[*columns, "vector"])
        column = table.column("vector")
        flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vectors = np.asarray(flat, dtype=np.float32).reshape(table.num_rows, column.type.list_size)
        return table.drop(["vector"]).to_pylist(), vectors

    def vectors_for(self, text_shas: Iterable[str]) -> dict[str, np.ndarray]:
        """Vectors already computed for these text hashes: stored with a chunk of any file, or
        checkpointed by an interrupted run. Reused, not re-embedded."""
        wanted = sorted(set(text_shas))
        if not wanted or not self.has_vectors:
            return {}
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(wanted), 500):
            where = sql_in("text_sha", wanted[start : start + 500])
            rows, vectors = self.rows_and_vectors(where, ["text_sha"])
            found.update(zip((row["text_sha"] for row in rows), vectors, strict=True))
        missing = set(wanted) - found.keys()
        if missing:
            found.update(read_pending_vectors(self, missing))
        return found

    def count_documents(self) -> int:
        return int(self.dataset("docs").count_rows())

    def documents(
        self, columns: Sequence[str], where: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Rows of the docs table (`where`: docsearch's own SQL), read a batch at a time."""
        for batch in self.dataset("docs").to_batches(columns=list(columns), filter=where):
            yield from batch.to_pylist()

    def spread_texts(self, limit: int) -> list[str]:
        """The text of `limit` chunks spread evenly over the chunks table in its stored order
        (so over its documents), or of every chunk of a smaller table: a sample that is the
        same for the same version."""
        dataset = self.dataset("chunks")
        rows = dataset.count_rows()
        if not rows:
            return []
        picks = sorted({i * rows // limit for i in range(limit)}) if rows > limit else range(rows)
        return dataset.take(list(picks), columns=["text"]).column("text").to_pylist()

    def with_text(self, found: Sequence[Candidate]) -> list[Candidate]:
        """`found` with each chunk's text, in order; a chunk no longer stored (its file was
        indexed again since the search read it) is left out."""
        if not found:
            return []
        dataset = self.dataset("chunks")
        held = self._exact["chunks"].of(dataset, result_columns(False))
        texts = held.texts if held is not None and held.texts is not None else None
        if texts is None:
            texts = read_texts(dataset, found)
        return [changed(one, text=texts[one.chunk_id]) for one in found if one.chunk_id in texts]

    # -- searching -------------------------------------------------------------------------------

    def search_vector(
        self, vector: np.ndarray, k: int, where: ChunkFilter | None, *, text: bool = True
    ) -> list[Candidate]:
        """The `k` chunks nearest to `vector` by cosine similarity, best first (`text=False`:
        their text is left empty, for `with_text` to fill)."""
        if not self.has_vectors:
            raise UsageError(f"collection {self.name!r} has no vectors (lexical only)")
        columns = result_columns(False)
        exact = (
            None if _narrows(where) else self._exact["chunks"].of(self.dataset("chunks"), columns)
        )
        if exact is not None:
            near = exact.nearest_rows(vector, k)
            found = exact.candidates([i for i, _ in near], [s for _, s in near])
            return self.with_text(found) if text else found
        scan = {
            "nearest": _nearest(vector, k),
            "prefilter": True,
            "columns": [*result_columns(text), "_distance"],
        }
        # Lance reports the cosine distance; candidates score by similarity (higher is better).
        nearest = self._scan(where, hide_pending=True, **scan)
        return [candidate(r, 1.0 - r.pop("_distance")) for r in nearest]

    def search_documents_text(
        self, query: str, k: int, where: ChunkFilter | None
    ) -> list[DocCandidate]:
        """The `k` best documents for `query` by BM25 over their whole text (words as written:
        no stemming, no stop words), best first. See `per_document` for what is empty."""
        # A quoted query would be a phrase query, which this index (no word positions) refuses;
        # as words, the quotes change no BM25 score.
        words = query.replace('"', " ")
        if not words.strip():
            return []
        if not per_document(where, self.has_documents):
            return []
        docs = self.dataset("docs")
        held = None if _narrows(where) else self._exact["docs"].of(docs, DOC_COLUMNS)
        found = held_documents_text(held, docs, words, k) if held is not None else None
        if found is not None:
            return found
        scan = {"full_text_query": words, "limit": k}
        rows = read_documents(docs, where, "_score", scan)
        return [doc_candidate(r, r.pop("_score")) for r in rows]

    def search_documents_vector(
        self, vector: np.ndarray, k: int, where: ChunkFilter | None
    ) -> list[DocCandidate]:
        """The `k` documents whose mean chunk vector is nearest to `vector` (cosine), best first."""
        if not self.has_vectors:
            raise UsageError(f"collection {self.name!r} has no vectors (lexical only)")
        exact = None
        if not _narrows(where) and self.has_documents:
            exact = self._exact["docs"].of(self.dataset("docs"), DOC_COLUMNS)
        if exact is not None:
            return [doc_candidate(exact.row(i), s) for i, s in exact.nearest_rows(vector, k)]
        if not per_document(where, self.has_documents):
            return []
        scan = {"nearest": _nearest(vector, k)}
        rows = read_documents(self.dataset("docs"), where, "_distance", scan)
        return [doc_candidate(r, 1.0 - r.pop("_distance")) for r in rows]

    def search_phrase(self, phrase: str, k: int, where: ChunkFilter | None) -> list[Candidate]:
        """BM25 over the chunks whose text has the words of `phrase` next to each other, in order
        (as the index splits words: punctuation, and words it leaves out such as "a", are not
        compared)."""
        from lance.query import PhraseQuery

        return self.search_text(PhraseQuery(phrase, "text"), k, where)

    def search_phrases(
        self, phrases: Sequence[str], k: int, where: ChunkFilter | None
    ) -> list[Candidate]:
        """One search for the chunks holding any of `phrases` (as `search_phrase` matches one),
        best first by the summed BM25 of the phrases they hold: however many phrases, one
        full-text query."""
        from lance.query import BooleanQuery, Occur, PhraseQuery

        if len(phrases) == 1:
            return self.search_phrase(phrases[0], k, where)
        anyone = BooleanQuery([(Occur.SHOULD, PhraseQuery(p, "text")) for p in phrases])
        return self.search_text(anyone, k, where) if phrases else []

    def search_text(
        self, query: str | Any, k: int, where: ChunkFilter | None, *, text: bool = True
    ) -> list[Candidate]:
        """The `k` best chunks for `query` by BM25 over `text` (stemmed words), best first
        (`text=False`: their text is left empty, for `with_text` to fill). `query`: words, or
        one of Lance's full-text queries (`search_phrases`)."""
        dataset = self.dataset("chunks")
        held = (
            None
            if text or _narrows(where)
            else self._exact["chunks"].of(dataset, result_columns(False))
        )
        if held is not None:
            found = self._search_held(held, dataset, query, k, where)
            if found is not None:
                return found
        columns = [*result_columns(text), "_score"]
        scan = {"full_text_query": query, "prefilter": True, "limit": k, "columns": columns}
        try:
            rows = self._scan(where, hide_pending=True, dataset=dataset, **scan)
        except ValueError:
            # Read on a version from before the full-text index (checked on the error path only)
            latest = self.tables.latest("chunks")
            indexed, empty = text_index_state(latest)
            if not indexed and empty:
                return []
            if not indexed:
                raise
            # The index landed since: again, on the version that has it (not through `dataset`:
            # within `tables.reading()` that is the version this search read first).
            rows = self._scan(where, hide_pending=True, dataset=latest, **scan)
        return [candidate(r, r.pop("_score")) for r in rows]

    def _search_held(
        self, held: ExactVectors, dataset: Any, query: str | Any, k: int, where: ChunkFilter | None
    ) -> list[Candidate] | None:
        """`search_text` without text where the chunks are held: Lance gives the row ids and
        scores, the held rows the rest (None: a row is not held, or the index is not there:
        read it all from Lance)."""
        scan = {"full_text_query": query, "prefilter": True, "limit": k, "columns": ["_score"]}
        try:
            found = self._scan_table(
                where, hide_pending=True, dataset=dataset, with_row_id=True, **scan
            )
        except ValueError:
            return None
        rows = held.at_row_ids(found.column(ROW_ID).to_pylist())
        if rows is None:
            return None
        scores = found.column("_score").to_pylist()
        return held.candidates(rows, scores)

    def _scan(
        self,
        where: str | ChunkFilter | None,
        *,
        hide_pending: bool = False,
        dataset: Any = None,
        **scan: Any,
    ) -> list[dict[str, Any]]:
        """Rows of one read of the chunks table, filtered by `where` (see `count_chunks`)."""
        read = self._scan_table(where, hide_pending=hide_pending, dataset=dataset, **scan)
        return list(read.to_pylist())

    def _scan_table(
        self,
        where: str | ChunkFilter | None,
        *,
        hide_pending: bool = False,
        dataset: Any = None,
        **scan: Any,
    ) -> Any:
        """One read of the chunks table (`dataset`: the version given, else `Store.dataset`'s),
        filtered by `where`, as an Arrow table. `hide_pending` (searches): without the rows of
        files not committed in every table yet."""
        with filter_errors(self.dataset, where):
            # not `dataset or ...`: a Lance dataset's truth is its length, a count of its rows
            dataset = dataset if dataset is not None else self.dataset("chunks")
            # A collection from before OCR, not written since, lacks a column a search reads
            # (Lance's own columns, "_score" and the like, are always there).
            if any(c[0] != "_" for c in scan.get("columns") or ()):
                stored = set(dataset.schema.names)  # once: each `schema` is built anew
                scan["columns"] = [c for c in scan["columns"] if c in stored or c[0] == "_"]
            sql = hiding(_sql(where), pending_paths(dataset)) if hide_pending else _sql(where)
            return dataset.to_table(filter=sql, **scan)


def read_texts(chunks: Any, found: Sequence[Candidate]) -> dict[str, str]:
    """chunk id -> text of the chunks of `found` still in this chunks table version."""
    chunk_ids = list(dict.fromkeys(one.chunk_id for one in found))
    # The path index narrows the read to the chunks' files before the ids are compared.
    paths = sorted({one.path for one in found})
    where = f"{sql_in('path', paths)} AND {sql_in('id', chunk_ids)}"
    table = chunks.to_table(filter=where, columns=["id", "text"])
    return dict(zip(table.column("id").to_pylist(), table.column("text").to_pylist(), strict=True))


def building(db: str | Database, name: str) -> Store | None:
    """The version an unfinished switch of `name` is building, if its creation got as far as
    its chunks table (else None: nothing of it is worth resuming)."""
    database = db if isinstance(db, Database) else Database(db)
    version = database.versions(name).building
    if version is None or database.table_state(f"{table_prefix(name, version)}__chunks") != READY:
        return None
    return Store(database, name, version)


def per_document(where: ChunkFilter | None, has_documents: bool) -> bool:
    """Whether the docs table answers a read filtered by `where`. Its `path` and `paths` apply
    as they do to chunks; a chunk-column `where` (page_start >= 3) cannot be judged per
    document, so the read finds nothing, as it does without a docs table (`has_documents`):
    the retriever then ranks documents by their chunks."""
    return (where is None or not where.has_where) and has_documents


def held_documents_text(
    held: ExactVectors, docs: Any, words: str, k: int
) -> list[DocCandidate] | None:
    """`search_documents_text` where the documents are held: Lance gives the row ids and scores
    (reading the documents' columns as well doubled its 0.4 ms at 2k chunks), the held rows the
    rest; None where a row is not held (read it all from Lance)."""
    scan = {"full_text_query": words, "limit": k, "columns": ["_score"]}
    found = docs.to_table(prefilter=True, with_row_id=True, **scan)
    rows = held.at_row_ids(found.column(ROW_ID).to_pylist())
    if rows is None:
        return None
    scores = found.column("_score").to_pylist()
    return [doc_candidate(held.row(i), s) for i, s in zip(rows, scores, strict=True)]


def read_documents(
    docs: Any, where: ChunkFilter | None, score: str, scan: dict[str, Any]
) -> list[dict[str, Any]]:
    """Rows of one read of a docs table version (DOC_COLUMNS and `score`), without the paths
    pending in it."""
    sql = hiding(where.sql() if where is not None else None, pending_paths(docs))
    columns = [*DOC_COLUMNS, score]
    return list(docs.to_table(filter=sql, prefilter=True, columns=columns, **scan).to_pylist())


# -- helpers over one Lance dataset (a table version) ---------------------------------------------


def stored_meta(chunks: Any) -> CollectionMeta:
    """The identity a chunks table's schema metadata records."""
    return CollectionMeta.from_json(chunks.schema.metadata[META_KEY])


def version_key(dataset: Any) -> str:
    """A table version as a cache key: its number and when it was written."""
    version = dataset.get_version()
    return f"{version['version']}@{version['timestamp'].isoformat()}"


def text_index_state(chunks: Any) -> tuple[bool, bool]:
    """(has a full-text index, is empty) for a chunks table version. A new collection's chunks
    table is created first without the index (it marks the collection as there) and its first
    run builds the index before any row lands: a search that read a version in between finds
    nothing, which is the truth for it; one that read it just before the index landed is run
    again."""
    indexed = any(found["type"] == "Inverted" for found in chunks.list_indices())
    return indexed, chunks.count_rows() == 0


class HeldVectors:
    """One table's vectors held in memory for unfiltered nearest searches, where the table has
    no vector index (at most VECTOR_INDEX_MIN_ROWS rows), decided once per table version."""

    def __init__(self, *, texts: bool = False) -> None:
        self.seen: tuple[int, ExactVectors | None] | None = None  # (version, held or None)
        self.texts = texts  # hold the `text` column too (ExactVectors.texts)

    def of(self, dataset: Any, columns: Sequence[str]) -> ExactVectors | None:
        """The vectors and `columns` of `dataset` (read again once it has a newer version), or
        None: search it in Lance."""
        if self.seen is not None and self.seen[0] == dataset.version:
            return self.seen[1]
        held = None
        indexes = {found["name"] for found in dataset.list_indices()}
        rows = dataset.count_rows()
        # A version with rows pending is searched in Lance, where they are filtered out.
        small = "vector_idx" not in indexes and rows <= VECTOR_INDEX_MIN_ROWS
        stored = set(dataset.schema.names)
        # A lexical-only collection has no vectors to hold (nor texts: `with_text` reads them).
        if small and "vector" in stored and not pending_paths(dataset):
            names = [c for c in columns if c in stored]
            if self.texts:
                names = [*dict.fromkeys([*names, "id", "text"])]
            table = dataset.to_table(columns=[*names, "vector"], with_row_id=True)
            held = ExactVectors.of(table, texts=self.texts)
            if self.texts:  # the chunks: their pools are made of Candidates
                held.make_fields()
            if TEXT_INDEX in indexes:
                warm_text_index(dataset)
        self.seen = (dataset.version, held)
        return held


def warm_text_index(dataset: Any) -> None:
    """Load the posting lists of `dataset`'s full-text index into the process's Lance cache
    (`tables._session`) where the index is small (WARM_TEXT_INDEX_BYTES), so no search waits for
    them; a failure only leaves them to be read when a search first needs them."""
    try:
        found = [one for one in dataset.describe_indices() if one.name == TEXT_INDEX]
        size = getattr(found[0], "total_size_bytes", None) if found else None
        if size is not None and size <= WARM_TEXT_INDEX_BYTES:
            dataset.prewarm_index(TEXT_INDEX)
    except Exception as exc:  # noqa: BLE001 - an older Lance, or the index replaced meanwhile
        log.debug("full-text index of %s left cold: %s", dataset.uri, exc)


@contextmanager
def filter_errors(read: Callable[[str], Any], where: str | ChunkFilter | None) -> Iterator[None]:
    """A caller's filter that Lance rejects (types, values) becomes a UsageError.

    Lance reports a bad filter like any other failure, so a failed read is put down to the
    filter only if the filter alone fails too and the table itself reads (checked on the error
    path only: counting through a filter scans). `read(kind)` opens a table.
    """
    try:
        yield
    except (ValueError, OSError):
        if not isinstance(where, ChunkFilter) or not where.has_where:
            raise
        dataset, sql = read("chunks"), where.sql()
        try:
            dataset.count_rows(filter=sql)
        except (ValueError, OSError) as exc:
            dataset.count_rows()  # a broken table raises its own error, not the filter's
            raise bad_where(where.where or "", lance_problem(exc, sql)) from None
        raise
