"""The collection store: LanceDB tables per collection, `<name>__chunks`, `__docs` and `__files`.

The chunks table carries the collection's identity in its schema metadata (schema version, the
encoder spec, the chunker settings), so a later run re-opens it with the same encoder and a
different encoder is refused, unless the run switches: it then builds a new version of the
collection (the same tables under `<name>.vN__`) beside the serving one, and one commit to
`<name>__versions` swaps it in (see "Versions" below). Writes are batched: one `merge_insert` replaces the chunks of a
batch of files in a single commit (a file is never half old, half new), a second one their rows
in `docs` (one per file, derived from its chunks: whole text, mean vector), then the `files` table
records them. A file too large to hold in memory is written as uncommitted fragments a group of
chunks at a time, with its document row last, and committed alone (`write_fragments`). A docs
row holds at most DOC_TEXT_CHARS characters of its document's text (see `whole_text`). Lexical search is LanceDB's native BM25 full-text index (built before the first
rows are committed); vector search is cosine. A commit lists the paths whose rows it replaces as
pending in the chunks and docs tables' config before the rows change and clears them once their
file records are written: searches leave pending paths out (read from the version they search;
no filter when none is pending), so a killed run's half-written files are never found, and the
next run redoes them (`pending_paths`). While a run embeds, `<name>__pending_vectors`
checkpoints vectors not yet committed (dropped at the end of the run). A collection whose
creation was killed is listed as incomplete and repaired by the next writer; one writer per
collection holds a lock on local databases (object stores: single writer by rule).
This is the only module that talks to Lance: searches (vector, BM25, phrase) return typed
`Candidate`s filtered by a `ChunkFilter` (whole documents: `DocCandidate`s; BM25 over unstemmed
words, cosine to the mean chunk vector), the files table is read through typed methods, and the
Ray engine's workers write fragments that `commit` adds (lance-ray builds indexes on request).
Not here: walking folders, embedding, fusion (see `plan.py`, `pipeline.py`, `retriever.py`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from docsearch.encoders.base import describe, same_identity
from docsearch.errors import CollectionNotFoundError, EncoderMismatchError, UsageError
from docsearch.indexer.exact import ExactVectors
from docsearch.indexer.filters import ChunkFilter, bad_where, lance_problem
from docsearch.indexer.filters import sql_in as sql_in  # re-exported
from docsearch.indexer.filters import sql_str as sql_str
from docsearch.indexer.pending import PENDING_PATHS_KEY, hiding, pending_paths

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# Exact (flat) vector search reads every vector: fine up to tens of thousands of chunks (about
# 30 ms at 10k here). Above this many rows refresh_indexes() builds an IVF-HNSW index (scalar
# quantised); queries visit every partition's graph with a wide beam (measured in
# benchmarks/speed.py: latency and recall@10 against exact search).
VECTOR_INDEX_MIN_ROWS = 50_000
ANN_SEARCH = {"nprobes": 8, "ef": 300}
META_KEY = b"docsearch"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass
class CollectionMeta:
    """What a collection was built with; stored in the chunks table's schema metadata."""

    encoder: dict[str, Any] | None  # encoder spec, None for a lexical-only collection
    chunker: dict[str, Any]
    schema_version: int = SCHEMA_VERSION
    created_at: float = field(default_factory=time.time)
    source: str = ""  # the folder first indexed, for display

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CollectionMeta:
        return cls(**json.loads(raw))


@dataclass
class FileRecord:
    path: str
    sha256: str
    size: int
    mtime: float
    status: str  # "indexed" or "failed"
    reason: str = ""  # why it failed, or a warning (scanned pages) for an indexed file
    n_chunks: int = 0
    indexed_at: float = 0.0
    title: str = ""
    ocr_pages: str = ""  # pages whose text OCR read ("1-3, 7")
    page_starts: str = ""  # where each page starts in the text, as gaps ("0,1834,177"); `pages`
    encoding: str = ""  # a text, Markdown or HTML file's encoding as read ("utf-8", "cp1252"...)


@dataclass
class FileUpdate:
    """One file's new state: its record and the chunk rows that replace its old ones.

    `rows is None` keeps whatever chunks the file had (a changed file that now fails to read
    keeps serving its last good version: nothing indexed is lost).
    """

    record: FileRecord
    rows: list[dict[str, Any]] | None


@dataclass(frozen=True)
class ChunkView:
    """A chunk as results show it: its text and where it comes from (offsets into the
    extracted document's text, 1-based pages)."""

    text: str
    path: str
    title: str
    page_start: int
    page_end: int
    char_start: int
    char_end: int
    heading_path: str
    chunk_id: str
    doc_id: str
    ordinal: int
    ocr: bool  # some of its text was read by OCR
    # Provenance (columns added later: a collection from before them reads them as empty). The
    # chain of attachments leading to its document in the file ("" for the file's own), where
    # its pages are when a number is not enough (a sheet's rows, a chapter), its e-mail's
    # subject, from, to and date (an attachment has its message's).
    part: str = field(default="", kw_only=True)
    location: str = field(default="", kw_only=True)
    email_subject: str = field(default="", kw_only=True)
    email_from: str = field(default="", kw_only=True)
    email_to: str = field(default="", kw_only=True)
    email_date: str = field(default="", kw_only=True)
    # Where pages after page_start begin inside it: "offset:page ..." (offsets in the
    # document's text); what says the page of a word in a chunk over several pages.
    page_breaks: str = field(default="", kw_only=True)

    def page_of(self, char: int) -> int | None:
        """The page holding character `char` of the document's text, if this chunk says (one
        over several pages indexed before page breaks were recorded does not: None)."""
        if self.page_start == self.page_end:
            return self.page_start
        if not self.page_breaks:
            return None
        page = self.page_start
        for at, number in (pair.split(":") for pair in self.page_breaks.split()):
            if int(at) > char:
                break
            page = int(number)
        return page


@dataclass(frozen=True)
class Candidate(ChunkView):
    """A chunk one search leg found. `score` orders the leg (BM25, cosine similarity, or BM25
    lifted for verbatim identifiers); `raw_score` is the leg's own score, shown to people."""

    score: float
    raw_score: float


# What a search reads: the chunk columns of ChunkView (`id` is its chunk_id), not the vector.
RESULT_COLUMNS = ["id" if f.name == "chunk_id" else f.name for f in fields(ChunkView)]


def _result_columns(text: bool) -> list[str]:
    """RESULT_COLUMNS, less the text where a search reads it later, for the chunks it shows:
    reading 500 chunks' text was a third of a short query's document search."""
    return RESULT_COLUMNS if text else [c for c in RESULT_COLUMNS if c != "text"]


@dataclass(frozen=True)
class DocCandidate:
    """A document one document-level leg found (whole-text BM25, or the cosine similarity of
    its mean chunk vector); `score` orders the leg, `raw_score` is the leg's own score."""

    doc_id: str
    path: str
    score: float
    raw_score: float
    n_chunks: int
    page_start: int
    page_end: int


DOC_COLUMNS = ["doc_id", "path", "n_chunks", "page_start", "page_end"]
# Whole documents are matched on their words as written: measured best by the retired doclevel study
# ("lance-plain"); the chunks keep the stemmed index. No positions: BM25 does not read them (the
# same scores), they only serve phrase queries, and they made the index 3.7 times larger (qmsum).
DOC_FTS: dict[str, Any] = {"with_position": False, "stem": False, "remove_stop_words": False}


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


def candidate(row: dict[str, Any], score: float) -> Candidate:
    """A row of a search read (RESULT_COLUMNS, its score column already taken out; a read
    without text leaves `text` empty, see `Store.with_text`)."""
    row["chunk_id"] = row.pop("id")
    row.setdefault("text", "")
    row.setdefault("ocr", False)  # a collection from before OCR has no such column
    return Candidate(**row, score=float(score), raw_score=float(score))


@dataclass(frozen=True)
class FileStats:
    """How a collection's files fared: how many are searchable, and which failed and why."""

    indexed: int
    failed: dict[str, str]  # path -> reason


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(
            f"invalid collection name {name!r}: use letters, digits, '-' and '_' (max 64)"
        )
    return name


def collection_name_for(folder_name: str) -> str:
    """A valid collection name derived from a folder name ('My Contracts' -> 'My-Contracts')."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", folder_name).strip("-_")[:64]
    return name or "default"


# ---------------------------------------------------------------------------------------------
# Schemas


# Each table's columns, "name:type" (pyarrow's type constructors), the vector column aside.
CHUNK_COLUMNS = (
    "id:string doc_id:string path:string title:string text:string ordinal:int32 "
    "page_start:int32 page_end:int32 char_start:int64 char_end:int64 heading_path:string "
    "n_tokens:int32 truncated:bool_ file_sha256:string text_sha:string ocr:bool_ "
    "part:string location:string email_subject:string email_from:string email_to:string "
    "email_date:string page_breaks:string"
)
# Columns added after collections existed without them, with the value their old rows get: a
# collection gains them when next written (`Store.add_ocr_columns`).
ADDED_CHUNK_COLUMNS = {"ocr": "false"} | dict.fromkeys(
    "part location email_subject email_from email_to email_date page_breaks".split(), "''"
)
DOC_TABLE_COLUMNS = (
    "doc_id:string path:string title:string text:string n_chunks:int32 page_start:int32 "
    "page_end:int32"
)
FILE_COLUMNS = (
    "path:string sha256:string size:int64 mtime:float64 status:string reason:string "
    "n_chunks:int32 indexed_at:float64 title:string ocr_pages:string page_starts:string "
    "encoding:string"
)


def _schema(
    columns: str, dim: int | None = None, metadata: dict[bytes, bytes] | None = None
) -> Any:
    """The Arrow schema of `columns`, with a float32 `vector` of `dim` when `dim` is set."""
    import pyarrow as pa

    named = (column.split(":") for column in columns.split())
    fields = [pa.field(name, getattr(pa, kind)()) for name, kind in named]
    if dim:
        fields.append(pa.field("vector", pa.list_(pa.float32(), dim)))
    return pa.schema(fields, metadata=metadata)


def chunks_schema(dim: int | None, meta: CollectionMeta) -> Any:
    return _schema(CHUNK_COLUMNS, dim, {META_KEY: meta.to_json()})


def docs_schema(dim: int | None) -> Any:
    return _schema(DOC_TABLE_COLUMNS, dim)


def files_schema() -> Any:
    return _schema(FILE_COLUMNS)


# Columns of the chunk rows a document row is made from.
DOC_SOURCE = "doc_id path title text ordinal page_start page_end char_start char_end".split()
# The most text a docs row holds: the document's text up to the end of its last chunk that ends
# within this many characters. Every file the default 16 million character text limit admits
# is held whole, so its whole-document BM25 is that of all its words; a longer one is matched
# on its first 16 million characters (its chunks hold all of it), and a row never costs more
# than about 100 MB to build, index or read.
DOC_TEXT_CHARS = 16_000_000


def document_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The docs-table rows of the files whose chunk rows (all of each file's) are `rows`: one
    per document (a file with attachments holds several)."""
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    documents = []
    for chunks in by_doc.values():
        builder = DocumentBuilder()
        builder.add(sorted(chunks, key=lambda r: r["ordinal"]))
        documents.append(builder.row())
    return documents


class DocumentBuilder:
    """A file's docs row, made from its chunk rows as they come (in order, a group at a time):
    its text (`whole_text`, at most DOC_TEXT_CHARS), pages, chunk count and mean vector."""

    def __init__(self, max_chars: int = DOC_TEXT_CHARS) -> None:
        self.max_chars = max_chars
        self._first: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._end = 0  # the text's length so far
        self._full = False  # a chunk ended past max_chars: the text is complete
        self._n, self._page_start, self._page_end = 0, 0, 0
        self._sum: np.ndarray | None = None  # (dim,) float64

    def add(self, chunks: Sequence[dict[str, Any]]) -> None:
        if not chunks:
            return
        if self._first is None:
            self._first = {key: chunks[0][key] for key in ("doc_id", "path", "title")}
            self._page_start = chunks[0]["page_start"]
        self._n += len(chunks)
        self._page_start = min(self._page_start, *(c["page_start"] for c in chunks))
        self._page_end = max(self._page_end, *(c["page_end"] for c in chunks))
        self._add_text(chunks)
        if "vector" in chunks[0]:  # summed in float64, row after row in order
            block = np.asarray([c["vector"] for c in chunks], dtype=np.float64)
            if self._sum is not None:
                block = np.vstack([self._sum[None], block])
            self._sum = block.sum(axis=0)

    def _add_text(self, chunks: Sequence[dict[str, Any]]) -> None:
        for chunk in chunks:
            if self._full or chunk["char_end"] > self.max_chars:
                self._full = True
                return
            start = chunk["char_start"]
            self._parts.append(" " * (start - self._end) if start > self._end else "")
            self._parts.append(chunk["text"][max(0, self._end - start) :])
            self._end = max(self._end, chunk["char_end"])

    def row(self) -> dict[str, Any]:
        assert self._first is not None, "a document row needs at least one chunk"
        row = {**self._first, "text": "".join(self._parts), "n_chunks": self._n}
        row["page_start"], row["page_end"] = self._page_start, self._page_end
        if self._sum is not None:
            row["vector"] = mean_vector(self._sum, self._n).tolist()
        return row


def mean_vector(total: np.ndarray, count: int) -> np.ndarray:
    """A document's vector from the (float64) sum of its `count` chunk vectors: their mean,
    scaled to unit length (a zero mean stays zero); float32."""
    mean = total / count
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm else mean).astype(np.float32)


def whole_text(chunks: Sequence[dict[str, Any]], max_chars: int = DOC_TEXT_CHARS) -> str:
    """A document's text from its chunks (in order): every character at its own offset, up to
    the end of the last chunk that ends within `max_chars` characters.

    The chunker leaves out only whitespace (between pieces, and around the text), so the
    characters no chunk holds are written as spaces: the same words at the same offsets, which is
    all the full-text index reads. Overlapping chunks contribute their new characters only.
    """
    builder = DocumentBuilder(max_chars)
    builder._add_text(chunks)
    return "".join(builder._parts)


def connect(db_uri: str):  # type: ignore[no-untyped-def]
    import lancedb

    return lancedb.connect(db_uri)


def _table_names(db) -> list[str]:  # type: ignore[no-untyped-def]
    names: list[str] = []
    page_token = None
    while True:
        response = db.list_tables(page_token=page_token)
        names.extend(response.tables)
        page_token = getattr(response, "page_token", None)
        if not page_token:
            return names


@dataclass(frozen=True)
class IndexBuild:
    """How `Store.refresh_indexes` builds the indexes a table lacks. With `workers`, on the Ray
    cluster this process is connected to (lance-ray): the fragments are compacted before a first
    full-text build, and the vector index is trained and built by the workers."""

    vector_min_rows: int = VECTOR_INDEX_MIN_ROWS  # no vector index on a table with fewer rows
    vector_params: dict[str, Any] | None = None  # default: vector_index_params(rows); both tables
    workers: int = 0
    worker_cpus: float = 0.25

    def on_ray(self) -> dict[str, Any]:
        return {"num_workers": self.workers, "ray_remote_args": {"num_cpus": self.worker_cpus}}


def vector_index_params(rows: int) -> dict[str, Any]:
    """The ANN index built above VECTOR_INDEX_MIN_ROWS (local and Ray engines alike)."""
    partitions = min(8, max(1, rows // 100_000))  # all of them are probed (ANN_SEARCH)
    return {"index_type": "IVF_HNSW_SQ", "metric": "cosine", "num_partitions": partitions}


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


def table_uri(db_uri: str, table: str) -> str:
    """Where LanceDB keeps a table: `<db>/<table>.lance` (local folders and object stores)."""
    return f"{db_uri.rstrip('/')}/{table}.lance"


# ---------------------------------------------------------------------------------------------
# Which tables exist, and whether they are complete
#
# A Lance table exists once its first manifest (`_versions/*.manifest`) is written. A process
# killed while creating one leaves a folder without it (only `_transactions/`): not a table, and
# no data in it. A collection is complete when its chunks and files tables are; the chunks table
# is created last, so a complete collection never lacks its files table. Its docs table is derived
# from the chunks: a collection built before it existed gets it from its next writer (backfill).

READY, INCOMPLETE, ABSENT = "ready", "incomplete", "absent"
COLLECTION_TABLES = ("chunks", "files")
PENDING_TABLE = "pending_vectors"  # embedded vectors not yet committed (a run's checkpoint)
# Every table of a version, in the order they are dropped: the chunks table (the marker) first.
ALL_TABLES = ("chunks", "docs", PENDING_TABLE, "files")


# ---------------------------------------------------------------------------------------------
# Versions: an encoder or chunker switch builds a collection anew beside the one serving
#
# Version 0 is the tables above (`<name>__chunks`...); version N > 0 has the same tables under
# `<name>.vN__` (collection names hold no dot). `<name>__versions`, a table without rows, records
# in its schema metadata which version serves searches and which one a switch is building; a
# collection that never switched has no such table (version 0 serves). Changing it is one Lance
# commit, so every reader sees the old pointer or the new one: the swap at the end of a switch
# is atomic, and until then searches read the old version only. The retired version's tables
# are dropped right after the swap (readers that opened them retry on the new one, see
# `Retriever`); leftovers of a kill during that drop go at the collection's next write.

VERSIONS_TABLE = "versions"
VERSIONS_KEY = "docsearch_versions"


@dataclass(frozen=True)
class Versions:
    """Which version of a collection serves searches, and which one a switch is building."""

    active: int = 0
    building: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


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


def read_versions(db_uri: str, name: str) -> Versions:
    """The collection's version pointer (version 0 serving, no switch: no pointer table)."""
    table = f"{name}__{VERSIONS_TABLE}"
    if table_state(db_uri, table) != READY:  # absent, or its creation was killed: never used
        return Versions()
    raw = _dataset(table_uri(db_uri, table)).schema.metadata.get(VERSIONS_KEY.encode())
    return Versions(**json.loads(raw)) if raw else Versions()


def _write_versions(db: Any, db_uri: str, name: str, versions: Versions) -> None:
    """Point the collection at `versions`, in one commit (a new pointer table: its creation)."""
    import pyarrow as pa

    table = f"{name}__{VERSIONS_TABLE}"
    state = table_state(db_uri, table)
    if state == READY:
        _dataset(table_uri(db_uri, table)).update_schema_metadata(
            {VERSIONS_KEY: versions.to_json()}
        )
        return
    if state == INCOMPLETE:
        db.drop_table(table)
    metadata = {VERSIONS_KEY.encode(): versions.to_json().encode()}
    db.create_table(table, schema=pa.schema([pa.field("unused", pa.int32())], metadata=metadata))


def _stored_versions(db_uri: str, name: str) -> set[int]:
    """Every version of `name` with a table on disk, complete or not."""
    found = (parse_table(table) for table in _table_names_anywhere(db_uri))
    return {p[1] for p in found if p and p[0] == name and p[2] != VERSIONS_TABLE}


def _has_manifest(table_dir: Path) -> bool:
    try:
        with os.scandir(table_dir / "_versions") as entries:
            return any(entry.name.endswith(".manifest") for entry in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False


def table_state(db_uri: str, table: str) -> str:
    """READY, INCOMPLETE (a creation was interrupted) or ABSENT; local folders need no lance."""
    root = local_db_path(db_uri)
    if root is not None:
        folder = root / f"{table}.lance"
        if not folder.is_dir():
            return ABSENT
        return READY if _has_manifest(folder) else INCOMPLETE
    try:
        _dataset(table_uri(db_uri, table))
    except ValueError as exc:  # Lance's "Dataset at path ... was not found"
        if "not found" not in str(exc):
            raise
        return INCOMPLETE if table in _table_names(connect(db_uri)) else ABSENT
    return READY


def _table_names_anywhere(db_uri: str) -> list[str]:
    """Every table folder in the database, complete or not."""
    root = local_db_path(db_uri)
    if root is None:
        return _table_names(connect(db_uri))
    if not root.is_dir():
        return []
    return [p.name[: -len(".lance")] for p in root.glob("*.lance") if p.is_dir()]


def survey(db_uri: str) -> tuple[list[str], dict[str, str]]:
    """The complete collections, and the incomplete ones with what is wrong with each (each
    judged by the tables of the version that serves it)."""
    names = set()
    for table in _table_names_anywhere(db_uri):
        parsed = parse_table(table)
        if parsed and parsed[2] in (*COLLECTION_TABLES, VERSIONS_TABLE):
            names.add(parsed[0])
    complete, broken = [], {}
    for name in sorted(names):
        chunks, files = _serving_state(db_uri, name)
        if chunks == READY and files == READY:
            complete.append(name)
        else:
            broken[name] = _what_is_wrong(chunks, files)
    return complete, broken


def _serving_state(db_uri: str, name: str) -> tuple[str, str]:
    """The states of the chunks and files tables of the version serving `name`. A switch that
    swaps versions meanwhile drops the tables just read: read again under the new pointer."""
    for _ in range(3):
        active = read_versions(db_uri, name).active
        prefix = table_prefix(name, active)
        chunks, files = (table_state(db_uri, f"{prefix}__{kind}") for kind in COLLECTION_TABLES)
        if (chunks, files) == (READY, READY) or read_versions(db_uri, name).active == active:
            break
    return chunks, files


def _what_is_wrong(chunks: str, files: str) -> str:
    if chunks == INCOMPLETE or files == INCOMPLETE:
        return "its creation was interrupted (a table folder holds no table version)"
    if chunks == ABSENT:
        return "it has a files table but no chunks table (creation or drop was interrupted)"
    return "its files table is missing"


_warned: set[tuple[str, str]] = set()


def list_collections(db_uri: str) -> list[str]:
    """The complete collections; an incomplete one is left out with a warning (once per process),
    so it never stops listing or searching the others."""
    complete, broken = survey(db_uri)
    for name, why in broken.items():
        if (db_uri, name) not in _warned:
            _warned.add((db_uri, name))
            log.warning("%s", incomplete_message(name, why))
    return complete


def resolve_collection(db_uri: str, name: str | None) -> str:
    """`name`, or the only collection, or the most recently written one."""
    if name:
        return name
    names = list_collections(db_uri)
    if not names:
        raise CollectionNotFoundError(
            f"no collections in {db_uri} yet; create one with `docsearch index PATH`"
        )
    if len(names) == 1:
        return names[0]
    return max(names, key=lambda n: Store.open(db_uri, n).last_write())


def incomplete_message(name: str, why: str) -> str:
    return (
        f"collection {name!r} is incomplete: {why}; `docsearch index PATH --collection {name}` "
        f"repairs it, `docsearch collections drop {name}` removes it"
    )


@functools.cache
def _session():  # type: ignore[no-untyped-def]
    """One Lance session per process: its caches keep loaded indexes across reads.

    Every read opens the table's latest version (cheap: a manifest), so it sees other writers'
    commits; without a shared session each open would reload the vector index (~100 ms at 100k
    chunks) on every query.
    """
    import lance

    return lance.Session()


def _dataset(uri: str):  # type: ignore[no-untyped-def]
    import lance

    return lance.dataset(uri, session=_session())


def _has_index(table: Any, name: str) -> bool:
    return name in {cfg.name for cfg in table.list_indices()}


def _index_documents(table: Any) -> Any:
    from lancedb.index import FTS

    table.create_index("text", config=FTS(**DOC_FTS), replace=True)
    return table


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


# ---------------------------------------------------------------------------------------------


class Store:
    """One version of a collection: its chunks and files tables and what it was built with."""

    def __init__(
        self, db: Any, name: str, *, uri: str | None = None, version: int | None = None
    ) -> None:
        """`db` is a LanceDB connection, or None to connect only when something is written.
        `version`: which of the collection's versions (None: the one serving searches).

        Reads go straight to the Lance datasets under the tables (the same files, the same
        indexes and scores): importing `lancedb` costs seconds, and `search --mode lexical`
        must start fast.
        """
        self._db, self.name = db, name
        self.uri = _canonical_uri(uri or db.uri)
        self.version = read_versions(self.uri, name).active if version is None else version
        self.prefix = table_prefix(name, self.version)  # its tables are `<prefix>__<kind>`
        self._search_indexed = False  # the full-text index exists (checked once per Store)
        self._first_build = False  # this Store created that index while the table was filling
        self._has_documents = False
        self._ocr_columns = False  # the OCR columns exist (checked once per Store)
        # table kind -> (the version seen, its vectors in memory or None: searched in Lance)
        self._exact: dict[str, tuple[int, ExactVectors | None]] = {}
        self.meta = self._stored_meta()
        if self.meta.schema_version > SCHEMA_VERSION:
            raise UsageError(
                f"collection {name!r} was written by a newer docsearch (schema "
                f"{self.meta.schema_version}); upgrade docsearch to read it"
            )

    @property
    def db(self) -> Any:
        if self._db is None:
            self._db = connect(self.uri)
        return self._db

    @cached_property
    def chunks(self) -> Any:
        """The LanceDB chunks table (writes and index management)."""
        return self.db.open_table(f"{self.prefix}__chunks")

    @cached_property
    def files_table(self) -> Any:
        return self.db.open_table(f"{self.prefix}__files")

    @cached_property
    def docs(self) -> Any:
        """The LanceDB docs table: one row per file that has chunks."""
        return self.db.open_table(f"{self.prefix}__docs")

    def _uri(self, table: str) -> str:
        return table_uri(self.uri, f"{self.prefix}__{table}")

    def _read(self, table: str) -> Any:
        """The latest version of a table's Lance dataset, for reading."""
        return _dataset(self._uri(table))

    def _stored_meta(self) -> CollectionMeta:
        return CollectionMeta.from_json(self._read("chunks").schema.metadata[META_KEY])

    def is_current(self) -> bool:
        """Whether the collection on disk is still the one this Store opened: False once it was
        dropped, dropped and built again, or switched to another version (another encoder,
        other chunks); reopen it then."""
        try:
            serving = read_versions(self.uri, self.name).active == self.version
            return serving and self._stored_meta() == self.meta
        except Exception:  # noqa: BLE001 - gone or half-written: either way, reopen and report
            return False

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(cls, db_uri: str, name: str) -> Store:
        """The version of `name` that serves searches."""
        complete, broken = survey(db_uri)
        if name in broken:
            raise CollectionNotFoundError(incomplete_message(name, broken[name]))
        if name not in complete:
            known = ", ".join(complete) or "none yet"
            raise CollectionNotFoundError(
                f"no collection named {name!r} in {db_uri} (collections: {known}); "
                f"create it with `docsearch index PATH --collection {name}`"
            )
        for attempt in range(3):
            active = read_versions(db_uri, name).active
            try:
                return cls(None, name, uri=db_uri, version=active)
            except (OSError, ValueError, KeyError):
                # A switch swapped versions and dropped this one since the pointer was read.
                if attempt == 2 or read_versions(db_uri, name).active == active:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def open_or_create(cls, db_uri: str, name: str, meta: CollectionMeta) -> Store:
        """Open `name`, checking it was built like `meta`; create it if it does not exist.

        What an interrupted creation left behind is repaired here (call it holding the writer
        lock): without a chunks table nothing was indexed yet, so the leftovers are recreated;
        a chunks table that exists is never touched.
        """
        validate_name(name)
        db = connect(db_uri)
        active = read_versions(db_uri, name).active
        store = cls._open_or_create_version(db, db_uri, name, active, meta)
        store.check_compatible(meta)
        store.ensure_documents()
        return store

    @classmethod
    def _open_or_create_version(
        cls, db: Any, db_uri: str, name: str, version: int, meta: CollectionMeta
    ) -> Store:
        """Version `version` of `name`: opened if its chunks table exists (the files table
        restored if missing), else created from `meta` (an interrupted creation's leftovers
        dropped first)."""
        prefix = table_prefix(name, version)
        state = {kind: table_state(db_uri, f"{prefix}__{kind}") for kind in COLLECTION_TABLES}
        if state["chunks"] == READY:
            if state["files"] != READY:  # cannot come from our creation order; rebuilt anyway
                log.warning("collection %r: recreating its missing files table", name)
                _drop_tables(db, db_uri, prefix, ["files"])
                db.create_table(f"{prefix}__files", schema=files_schema())
            return cls(db, name, version=version)
        if any(s != ABSENT for s in state.values()):
            log.warning(
                "collection %r was not fully created (interrupted); creating it again", name
            )
        # Stale records would claim files are indexed; stale vectors may be another encoder's.
        _drop_tables(db, db_uri, prefix, [PENDING_TABLE, "files", "docs", "chunks"])
        dim = meta.encoder["dim"] if meta.encoder else None
        db.create_table(f"{prefix}__files", schema=files_schema())
        _index_documents(db.create_table(f"{prefix}__docs", schema=docs_schema(dim)))
        db.create_table(f"{prefix}__chunks", schema=chunks_schema(dim, meta))  # last: the marker
        return cls(db, name, version=version)

    # -- switching to another encoder or chunker ----------------------------------------------
    # Call these holding the writer lock. A run that switches writes a `building` Store as any
    # run writes the serving one (the same commits, checkpoints and resumption), then swaps.

    @classmethod
    def build_version(cls, db_uri: str, name: str, meta: CollectionMeta) -> Store:
        """The version of `name` being built with `meta`'s encoder and chunker beside the one
        serving: the unfinished one if it was started with the same identity (what it holds
        is kept: the run resumes), else a new one (an unfinished one of another identity is
        dropped). The pointer names it before its tables exist, so a kill in between leaves
        an incomplete build that the next call recreates."""
        db = connect(db_uri)
        versions = read_versions(db_uri, name)
        if versions.building is not None:
            pending = cls._open_or_create_version(db, db_uri, name, versions.building, meta)
            if pending.identity_matches(meta):
                pending.ensure_documents()
                return pending
            log.warning(
                "collection %r: dropping the unfinished switch to %s", name, pending.identity()
            )
        number = max({versions.active, *_stored_versions(db_uri, name)}) + 1
        _write_versions(db, db_uri, name, Versions(versions.active, number))
        drop_unused_versions(db_uri, name, db)
        return cls._open_or_create_version(db, db_uri, name, number, meta)

    @classmethod
    def pending_build(cls, db_uri: str, name: str) -> Store | None:
        """The version an unfinished switch was building, if its creation got as far as its
        chunks table (else None: nothing of it is worth resuming)."""
        building = read_versions(db_uri, name).building
        if building is None:
            return None
        prefix = table_prefix(name, building)
        if table_state(db_uri, f"{prefix}__chunks") != READY:
            return None
        return cls(None, name, uri=db_uri, version=building)

    @property
    def is_building(self) -> bool:
        """Whether this is the version a switch builds (not yet serving)."""
        return read_versions(self.uri, self.name).building == self.version

    def swap(self) -> int:
        """Make this version (the one being built) serve searches, in one commit, then drop the
        version it replaces; the replaced version's number."""
        versions = read_versions(self.uri, self.name)
        if versions.building != self.version:
            raise UsageError(f"version {self.version} of {self.name!r} is not being built")
        _write_versions(self.db, self.uri, self.name, Versions(self.version, None))
        drop_unused_versions(self.uri, self.name, self.db)
        return versions.active

    @classmethod
    def cancel_build(cls, db_uri: str, name: str) -> None:
        """Give up an unfinished switch: its version is dropped; the serving one stays."""
        versions = read_versions(db_uri, name)
        if versions.building is None:
            return
        db = connect(db_uri)
        _write_versions(db, db_uri, name, Versions(versions.active, None))
        drop_unused_versions(db_uri, name, db)

    def identity_matches(self, meta: CollectionMeta) -> bool:
        """Whether `meta` asks for this version's encoder and chunker."""
        try:
            self.check_compatible(meta)
        except EncoderMismatchError:
            return False
        return True

    def identity(self) -> str:
        """The version's encoder and chunk size, for messages."""
        encoder = describe(self.meta.encoder) if self.meta.encoder else "no encoder (lexical)"
        return f"{encoder}, {self.meta.chunker.get('max_tokens', '?')}-token chunks"

    def ensure_documents(self) -> None:
        """Give a collection built before the docs table existed (or whose docs creation was
        killed) its documents, made from the stored chunks and vectors: nothing is extracted or
        embedded again. Written in one step, then indexed; a kill between the two leaves a table
        without its index, which `has_documents` does not count and the next writer indexes."""
        if table_state(self.uri, f"{self.prefix}__docs") != READY:
            _drop_tables(self.db, self.uri, self.prefix, ["docs"])  # a creation killed half-way
            started, schema = time.perf_counter(), docs_schema(self._dim)
            data = self._documents_from_chunks(schema)
            # The new table replaces any handle this Store holds on an older one.
            self.__dict__["docs"] = self.db.create_table(
                f"{self.prefix}__docs", data=data, schema=schema
            )
            message = "collection %r: %d documents made from its stored chunks in %.1f s"
            log.info(message, self.name, self.count_documents(), time.perf_counter() - started)
        if not _has_index(self.docs, "text_idx"):
            _index_documents(self.docs)

    def _documents_from_chunks(self, schema: Any) -> Iterator[Any]:
        import pyarrow as pa

        paths = sorted(set(self._read("chunks").to_table(columns=["path"])["path"].to_pylist()))
        columns = [*DOC_SOURCE, "vector"] if self.has_vectors else DOC_SOURCE
        yield pa.RecordBatch.from_pylist([], schema=schema)  # a first batch, even for no paths
        for start in range(0, len(paths), 500):
            rows = self.rows(sql_in("path", paths[start : start + 500]), columns)
            yield pa.RecordBatch.from_pylist(document_rows(rows), schema=schema)

    @property
    def has_documents(self) -> bool:
        """Whether the docs table is there with its full-text index. False for a collection
        built before docsearch had it, until a writer opens it (`docsearch index` backfills
        it): the retriever then ranks documents by their chunks alone."""
        if not self._has_documents:  # once there, it stays (a rebuilt collection: is_current)
            ready = table_state(self.uri, f"{self.prefix}__docs") == READY
            indexes = self._read("docs").describe_indices() if ready else []
            self._has_documents = any(index.name == "text_idx" for index in indexes)
        return self._has_documents

    def add_ocr_columns(self) -> None:
        """A collection made before OCR gains its columns (unmarked) when next written; one
        schema check per Store, not one per commit. Before fragments are written for a later
        commit too: they take the table's schema."""
        if self._ocr_columns:
            return
        added = [(self.chunks, column, value) for column, value in ADDED_CHUNK_COLUMNS.items()]
        files = [
            (self.files_table, column, "''") for column in ("ocr_pages", "page_starts", "encoding")
        ]
        for table, column, value in [*added, *files]:
            if column not in table.schema.names:
                table.add_columns({column: value})
        self._ocr_columns = True

    def check_compatible(self, meta: CollectionMeta) -> None:
        old, new = self.meta.encoder, meta.encoder
        same_encoder = (old is None and new is None) or (
            old is not None and new is not None and same_identity(old, new)
        )
        if not same_encoder:
            was = describe(old) if old else "no encoder (lexical only)"
            now = describe(new) if new else "no encoder (lexical only)"
            raise EncoderMismatchError(
                f"collection {self.name!r} was built with {was}, not {now}; add --switch to "
                f"rebuild it with {now} while searches keep using the current version, index "
                f"into a new collection (--collection NEW), or re-index from scratch after "
                f"`docsearch collections drop {self.name}`"
            )
        if self.meta.chunker != meta.chunker:
            raise EncoderMismatchError(
                f"collection {self.name!r} was chunked with {self.meta.chunker}, not "
                f"{meta.chunker}; use the same --max-tokens/--overlap, add --switch to rechunk "
                f"it beside the current version, or use a new collection"
            )

    @property
    def has_vectors(self) -> bool:
        return self.meta.encoder is not None

    @property
    def _dim(self) -> int | None:
        return self.meta.encoder["dim"] if self.meta.encoder else None

    # -- reading ------------------------------------------------------------------------------

    def file_records(self) -> dict[str, FileRecord]:
        rows = self._read("files").to_table().to_pylist()
        return {r["path"]: FileRecord(**r) for r in rows}

    def file_record(self, path: str) -> FileRecord | None:
        """The record of exactly `path` (any string: it is quoted, never read as SQL)."""
        rows = self._read("files").to_table(filter=f"path = {sql_str(path)}", limit=1)
        return FileRecord(**rows.to_pylist()[0]) if rows.num_rows else None

    def file_stats(self) -> FileStats:
        columns = ["path", "status", "reason"]
        rows = self._read("files").to_table(columns=columns).to_pylist()
        failed = {r["path"]: r["reason"] for r in rows if r["status"] == "failed"}
        return FileStats(sum(r["status"] == "indexed" for r in rows), failed)

    def count_chunks(self, where: str | ChunkFilter | None = None) -> int:
        """Chunks matching `where`: docsearch's own SQL (a str) or a caller's ChunkFilter."""
        with self._filter_errors(where):
            return int(self._read("chunks").count_rows(filter=_sql(where)))

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
            found.update(self._pending_vectors(missing))
        return found

    # -- the vector checkpoint ----------------------------------------------------------------
    # Embedding a large file takes minutes, but its chunks are committed in one step. Vectors
    # embedded meanwhile are appended to `<name>__pending_vectors` (text_sha, vector) every few
    # seconds, so a run killed before the commit resumes from them. The table is a cache: rows
    # whose chunks are committed are deleted, the table is dropped at the end of a run, and a
    # collection created anew drops any leftover (it may hold another encoder's vectors).

    @property
    def _pending_name(self) -> str:
        return f"{self.prefix}__{PENDING_TABLE}"

    def has_pending_vectors(self) -> bool:
        return table_state(self.uri, self._pending_name) == READY

    def save_pending_vectors(self, text_shas: Sequence[str], vectors: np.ndarray) -> None:
        """Append embedded vectors (n, dim) to the checkpoint table, creating it if needed."""
        import pyarrow as pa

        dim = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        data = pa.table(
            {
                "text_sha": pa.array(list(text_shas), pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            }
        )
        state = table_state(self.uri, self._pending_name)
        if state == READY:
            self.db.open_table(self._pending_name).add(data)
            return
        if state == INCOMPLETE:  # a kill while creating it: nothing in it
            self.db.drop_table(self._pending_name)
        self.db.create_table(self._pending_name, data=data)

    def _pending_vectors(self, wanted: set[str]) -> dict[str, np.ndarray]:
        if not self.has_pending_vectors():
            return {}
        dataset = self._read(PENDING_TABLE)
        present = sorted(
            wanted.intersection(dataset.to_table(columns=["text_sha"])["text_sha"].to_pylist())
        )
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(present), 500):
            where = sql_in("text_sha", present[start : start + 500])
            for row in dataset.to_table(filter=where, columns=["text_sha", "vector"]).to_pylist():
                found[row["text_sha"]] = np.asarray(row["vector"], dtype=np.float32)
        return found

    def clear_pending_vectors(self, text_shas: Iterable[str]) -> None:
        """Forget checkpointed vectors whose chunks are committed now."""
        shas = sorted(set(text_shas))
        if not shas or not self.has_pending_vectors():
            return
        table = self.db.open_table(self._pending_name)
        for start in range(0, len(shas), 500):
            table.delete(sql_in("text_sha", shas[start : start + 500]))

    def drop_pending_vectors(self) -> None:
        _drop_tables(self.db, self.uri, self.prefix, [PENDING_TABLE])

    # -- writing ------------------------------------------------------------------------------

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
            dataset = self._read(kind)
            before = pending_paths(dataset)
            after = (before | set(add)) - set(remove)
            if after == before:
                continue
            value = json.dumps(sorted(after)) if after else None
            dataset.update_config({PENDING_PATHS_KEY: value})
            getattr(self, kind).checkout_latest()  # the change was committed through another handle

    def pending_paths(self) -> list[str]:
        """Paths whose rows an interrupted run left half written: hidden from search, and redone
        (or dropped, if the file is gone) by the next run."""
        chunks, docs = (pending_paths(self._read(kind)) for kind in ("chunks", "docs"))
        return sorted(chunks | docs)

    def unrecorded_paths(self) -> list[str]:
        """Paths with a document row but no file record: what a run killed between those two
        commits left before paths were marked pending (an earlier docsearch). Searchable, and
        redone (or dropped) by the next run as pending ones are."""
        if not self.has_documents:
            return []
        documents = self._read("docs").to_table(columns=["path"]).column("path").to_pylist()
        records = self._read("files").to_table(columns=["path"]).column("path").to_pylist()
        return sorted(set(documents) - set(records))

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
            dataset = self._read(kind)
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

        dataset = self._read(kind)
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

    def ensure_search_indexes(self) -> None:
        """Build the full-text and scalar indexes if the table has none, even while it is
        empty: the indexing service calls this as a run starts and `commit` before the first
        rows land, so lexical search answers throughout a first build. Lance searches rows
        committed after the index was built without it (flat) until `refresh_indexes` indexes
        them (a first build: all its rows again, in one pass)."""
        if self._search_indexed:
            return
        if not _has_index(self.chunks, "text_idx"):
            self._create_search_indexes()
            self._first_build = True
        self._search_indexed = True

    def _create_search_indexes(self) -> None:
        from lancedb.index import FTS, BTree

        self.chunks.create_index("text", config=FTS(with_position=True), replace=True)
        for column in ("path", "text_sha"):
            self.chunks.create_index(column, config=BTree(), replace=True)
        _index_documents(self.docs)

    def refresh_indexes(self, build: IndexBuild | None = None) -> None:
        """At the end of a run: bring the full-text, scalar and vector indexes up to date (once
        per run, not per row) and drop the vector checkpoint (everything in it is committed).
        `build` says how what is missing is built (default: here, the vector index from
        VECTOR_INDEX_MIN_ROWS chunks)."""
        build = build or IndexBuild()
        self.drop_pending_vectors()
        if self.count_chunks() == 0:
            return
        if not _has_index(self.chunks, "text_idx") or self._first_build:
            # A first build indexes all its rows in one pass, as if built only now.
            if build.workers:  # many small fragments from the workers: merged first
                import lance_ray

                for kind in ("chunks", "docs"):
                    lance_ray.compact_files(self._uri(kind), **build.on_ray())
                    getattr(self, kind).checkout_latest()
            self._create_search_indexes()
            self._first_build = False
        for kind in ("chunks", "docs"):
            self._vector_index(kind, build)
        for table in (self.chunks, self.docs, self.files_table):
            table.optimize()

    def _vector_index(self, kind: str, build: IndexBuild) -> None:
        """Table `kind`'s ANN index, built once it holds `build.vector_min_rows` vectors."""
        rows = int(self._read(kind).count_rows())
        table = getattr(self, kind)
        if not self.has_vectors or rows < build.vector_min_rows or _has_index(table, "vector_idx"):
            return
        params = build.vector_params or vector_index_params(rows)
        if build.workers:
            import lance_ray

            on_ray = {**build.on_ray(), **params}
            lance_ray.create_index(self._uri(kind), column="vector", name="vector_idx", **on_ray)
        else:
            self._read(kind).create_index("vector", name="vector_idx", **params)
        table.checkout_latest()  # the index was committed through another handle

    def index_health(self) -> dict[str, Any]:
        """FTS coverage, versions and sizes, for `docsearch doctor`."""
        names = {cfg.name for cfg in self.chunks.list_indices()}
        fts = self.chunks.index_stats("text_idx") if "text_idx" in names else None
        return {
            "chunks": self.count_chunks(),
            "files": int(self.files_table.count_rows()),
            "fts_index": fts is not None,
            "fts_unindexed_rows": fts.num_unindexed_rows if fts else self.count_chunks(),
            "documents": self.count_documents() if self.has_documents else None,
            "versions": len(self.chunks.list_versions()),
            "last_write": self.last_write(),
        }

    def documents_version(self) -> str:
        """The docs table's latest version as a key for caches derived from it: its number and
        when it was written (a collection dropped and built again restarts the numbers, not the
        clock). Read from the manifest already open: no data is read."""
        return self._version_key("docs")

    def chunks_version(self) -> str:
        """The chunks table's latest version as a cache key (as `documents_version`)."""
        return self._version_key("chunks")

    def _version_key(self, table: str) -> str:
        version = self._read(table).get_version()
        return f"{version['version']}@{version['timestamp'].isoformat()}"

    def spread_texts(self, limit: int) -> list[str]:
        """The text of `limit` chunks spread evenly over the chunks table in its stored order
        (so over its documents), or of every chunk of a smaller table: a sample that is the
        same for the same version."""
        dataset = self._read("chunks")
        rows = dataset.count_rows()
        if not rows:
            return []
        picks = sorted({i * rows // limit for i in range(limit)}) if rows > limit else range(rows)
        return dataset.take(list(picks), columns=["text"]).column("text").to_pylist()

    def last_write(self) -> float:
        versions = self._read("chunks").versions()
        stamp = versions[-1]["timestamp"] if versions else None
        return stamp.timestamp() if stamp is not None else 0.0

    # -- searching ----------------------------------------------------------------------------

    def search_vector(
        self, vector: np.ndarray, k: int, where: ChunkFilter | None, *, text: bool = True
    ) -> list[Candidate]:
        """The `k` chunks nearest to `vector` by cosine similarity, best first (`text=False`:
        their text is left empty, for `with_text` to fill)."""
        if not self.has_vectors:
            raise UsageError(f"collection {self.name!r} has no vectors (lexical only)")
        exact = None if _narrows(where) else self._exact_vectors("chunks", _result_columns(False))
        if exact is not None:
            found = [candidate(r, r.pop("_similarity")) for r in exact.nearest(vector, k)]
            return self.with_text(found) if text else found
        scan = {
            "nearest": _nearest(vector, k),
            "prefilter": True,
            "columns": [*_result_columns(text), "_distance"],
        }
        # Lance reports the cosine distance; candidates score by similarity (higher is better).
        nearest = self._scan(where, hide_pending=True, **scan)
        return [candidate(r, 1.0 - r.pop("_distance")) for r in nearest]

    def search_documents_text(
        self, query: str, k: int, where: ChunkFilter | None
    ) -> list[DocCandidate]:
        """The `k` best documents for `query` by BM25 over their whole text (words as written:
        no stemming, no stop words), best first. See `_search_documents` for what is empty."""
        # A quoted query would be a phrase query, which this index (no word positions) refuses;
        # as words, the quotes change no BM25 score.
        words = query.replace('"', " ")
        if not words.strip():
            return []
        scan = {"full_text_query": words, "limit": k}
        return [
            self._doc(r, r.pop("_score")) for r in self._search_documents(where, "_score", scan)
        ]

    def search_documents_vector(
        self, vector: np.ndarray, k: int, where: ChunkFilter | None
    ) -> list[DocCandidate]:
        """The `k` documents whose mean chunk vector is nearest to `vector` (cosine), best first."""
        if not self.has_vectors:
            raise UsageError(f"collection {self.name!r} has no vectors (lexical only)")
        exact = None
        if not _narrows(where) and self.has_documents:
            exact = self._exact_vectors("docs", DOC_COLUMNS)
        if exact is not None:
            return [self._doc(r, r.pop("_similarity")) for r in exact.nearest(vector, k)]
        rows = self._search_documents(where, "_distance", {"nearest": _nearest(vector, k)})
        return [self._doc(r, 1.0 - r.pop("_distance")) for r in rows]

    def _exact_vectors(self, kind: str, columns: Sequence[str]) -> ExactVectors | None:
        """Table `kind`'s vectors and `columns` in memory, for an unfiltered nearest search, where
        the table has no vector index (at most VECTOR_INDEX_MIN_ROWS rows); read again once the
        table has a newer version. None: search it in Lance."""
        dataset = self._read(kind)
        seen = self._exact.get(kind)
        if seen is not None and seen[0] == dataset.version:  # decided for this version already
            return seen[1]
        held = None
        indexed = any(found["name"] == "vector_idx" for found in dataset.list_indices())
        # A version with rows pending is searched in Lance, where they are filtered out.
        small = not indexed and dataset.count_rows() <= VECTOR_INDEX_MIN_ROWS
        if small and not pending_paths(dataset):
            names = [c for c in columns if c in dataset.schema.names]
            held = ExactVectors.of(dataset.to_table(columns=[*names, "vector"]))
        self._exact[kind] = (dataset.version, held)
        return held

    def _search_documents(
        self, where: ChunkFilter | None, score: str, scan: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Rows of one read of the docs table. `where`'s `path` and `paths` apply as they do to
        chunks; a chunk-column `where` (page_start >= 3) cannot be judged per document, so the
        read finds nothing, as it does without a docs table (`has_documents`): the retriever
        then ranks documents by their chunks."""
        if (where is not None and where.has_where) or not self.has_documents:
            return []
        columns = [*DOC_COLUMNS, score]
        dataset = self._read("docs")
        sql = hiding(where.sql() if where is not None else None, pending_paths(dataset))
        return list(
            dataset.to_table(filter=sql, prefilter=True, columns=columns, **scan).to_pylist()
        )

    @staticmethod
    def _doc(row: dict[str, Any], score: float) -> DocCandidate:
        return DocCandidate(**row, score=float(score), raw_score=float(score))

    def count_documents(self) -> int:
        return int(self._read("docs").count_rows())

    def documents(
        self, columns: Sequence[str], where: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Rows of the docs table (`where`: docsearch's own SQL), read a batch at a time."""
        for batch in self._read("docs").to_batches(columns=list(columns), filter=where):
            yield from batch.to_pylist()

    def search_text(
        self, query: str, k: int, where: ChunkFilter | None, *, text: bool = True
    ) -> list[Candidate]:
        """The `k` best chunks for `query` by BM25 over `text` (stemmed words), best first
        (`text=False`: their text is left empty, for `with_text` to fill)."""
        return self._search_fts(query, k, where, text)

    def with_text(self, found: Sequence[Candidate]) -> list[Candidate]:
        """`found` with each chunk's text, in order; a chunk no longer stored (its file was
        indexed again since the search read it) is left out."""
        if not found:
            return []
        chunk_ids = list(dict.fromkeys(one.chunk_id for one in found))
        # The path index narrows the read to the chunks' files before the ids are compared.
        paths = sorted({one.path for one in found})
        where = f"{sql_in('path', paths)} AND {sql_in('id', chunk_ids)}"
        table = self._read("chunks").to_table(filter=where, columns=["id", "text"])
        texts = dict(
            zip(table.column("id").to_pylist(), table.column("text").to_pylist(), strict=True)
        )
        return [replace(one, text=texts[one.chunk_id]) for one in found if one.chunk_id in texts]

    def search_phrase(self, phrase: str, k: int, where: ChunkFilter | None) -> list[Candidate]:
        """BM25 over the chunks whose text has the words of `phrase` next to each other, in order
        (as the index splits words: punctuation, and words it leaves out such as "a", are not
        compared)."""
        from lance.query import PhraseQuery

        return self._search_fts(PhraseQuery(phrase, "text"), k, where)

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
        return self._search_fts(anyone, k, where) if phrases else []

    def _search_fts(
        self, query: Any, k: int, where: ChunkFilter | None, text: bool = True
    ) -> list[Candidate]:
        columns = [*_result_columns(text), "_score"]
        scan = {"full_text_query": query, "prefilter": True, "limit": k, "columns": columns}
        try:
            rows = self._scan(where, hide_pending=True, **scan)
        except ValueError:
            # Read on a version from before the full-text index (checked on the error path only)
            indexed, empty = self._text_index_state()
            if not indexed and empty:
                return []
            if not indexed:
                raise
            rows = self._scan(where, hide_pending=True, **scan)  # the index landed since: again
        return [candidate(r, r.pop("_score")) for r in rows]

    def _text_index_state(self) -> tuple[bool, bool]:
        """(has a full-text index, is empty) for the chunks table's latest version. A new
        collection's chunks table is created first without the index (it marks the collection
        as there) and its first run builds the index before any row lands: a search that read
        a version in between finds nothing, which is the truth for it; one that read it just
        before the index landed is run again."""
        dataset = self._read("chunks")
        indexed = any(found["type"] == "Inverted" for found in dataset.list_indices())
        return indexed, dataset.count_rows() == 0

    def _scan(
        self, where: str | ChunkFilter | None, *, hide_pending: bool = False, **scan: Any
    ) -> list[dict[str, Any]]:
        """Rows of one read of the chunks table, filtered by `where` (see `count_chunks`)."""
        return list(self._scan_table(where, hide_pending=hide_pending, **scan).to_pylist())

    def _scan_table(
        self, where: str | ChunkFilter | None, *, hide_pending: bool = False, **scan: Any
    ) -> Any:
        """One read of the chunks table, filtered by `where`, as an Arrow table. `hide_pending`
        (searches): without the rows of files not committed in every table yet."""
        with self._filter_errors(where):
            dataset = self._read("chunks")
            if scan.get("columns"):  # a collection from before OCR, not written since, lacks it
                scan["columns"] = [
                    c for c in scan["columns"] if c in dataset.schema.names or c[0] == "_"
                ]
            sql = hiding(_sql(where), pending_paths(dataset)) if hide_pending else _sql(where)
            return dataset.to_table(filter=sql, **scan)

    @contextmanager
    def _filter_errors(self, where: str | ChunkFilter | None) -> Iterator[None]:
        """A caller's filter that Lance rejects (types, values) becomes a UsageError.

        Lance reports a bad filter like any other failure, so a failed read is put down to the
        filter only if the filter alone fails too and the table itself reads (checked on the
        error path only: counting through a filter scans).
        """
        try:
            yield
        except (ValueError, OSError):
            if not isinstance(where, ChunkFilter) or not where.has_where:
                raise
            dataset, sql = self._read("chunks"), where.sql()
            try:
                dataset.count_rows(filter=sql)
            except (ValueError, OSError) as exc:
                dataset.count_rows()  # a broken table raises its own error, not the filter's
                raise bad_where(where.where or "", lance_problem(exc, sql)) from None
            raise


@contextmanager
def writer_lock(db_uri: str, name: str) -> Iterator[None]:
    """One writer per collection on a local database; a second one is refused, not queued.

    The lock is a `flock` on `.<name>.lock` in the database folder, reached through its real
    path, so every spelling of one folder (relative, `file://`, `~`, through a symlink) meets
    the same lock. Object stores are single-writer by rule, not by lock: they offer no lock
    that this module could take and test offline, and an unlocked lock file (check, then
    write) would only look like a guard. Concurrent merges there duplicate rows, so a write
    to one warns.
    """
    folder = local_db_path(db_uri)
    if folder is None:
        log.warning(
            "%s is an object store: docsearch cannot lock it, so run at most one indexing "
            "process per collection at a time",
            db_uri,
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
                f"collection {name!r} is being indexed by another process; wait for it to finish"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def drop_unused_versions(db_uri: str, name: str, db: Any = None) -> None:
    """Drop the tables of every version of `name` that neither serves nor is being built: the
    one a swap retired, or what a kill during that drop or a superseded build left. Call it
    holding the writer lock; `db` is connected only if there is something to drop."""
    versions = read_versions(db_uri, name)
    for version in sorted(_stored_versions(db_uri, name) - {versions.active, versions.building}):
        log.info("collection %r: dropping the tables of its retired version %d", name, version)
        db = db or connect(db_uri)
        _drop_tables(db, db_uri, table_prefix(name, version), ALL_TABLES)


def drop_collection(db_uri: str, name: str) -> None:
    """Drop a collection's tables, complete or not, every version of it; the serving version's
    chunks table first, so an interrupted drop leaves an incomplete collection (reported, and
    repaired or dropped later), then the version pointer; its caches (`cache_file`) go last."""
    versions = _stored_versions(db_uri, name)
    pointer = table_state(db_uri, f"{name}__{VERSIONS_TABLE}") != ABSENT
    if not versions and not pointer:
        raise CollectionNotFoundError(f"no collection named {name!r} in {db_uri}")
    db, active = connect(db_uri), read_versions(db_uri, name).active
    for version in sorted(versions, key=lambda v: v != active):  # the serving one first
        _drop_tables(db, db_uri, table_prefix(name, version), ALL_TABLES)
    _drop_tables(db, db_uri, name, [VERSIONS_TABLE])
    folder = local_db_path(db_uri)
    for cache in folder.glob(f".{name}.*.cache") if folder is not None else []:
        cache.unlink(missing_ok=True)


def cache_file(db_uri: str, name: str, kind: str) -> Path | None:
    """Where a cache derived from a local collection's tables is kept: `.<name>.<kind>.cache`
    in the database folder, dropped with the collection (names hold no dots, so the pattern
    never reaches another collection's files). None for an object store: no cache is kept."""
    folder = local_db_path(db_uri)
    return folder / f".{name}.{kind}.cache" if folder is not None else None


def _drop_tables(db: Any, db_uri: str, prefix: str, kinds: Sequence[str]) -> None:
    """Drop the tables `<prefix>__<kind>` that exist (a version's: `table_prefix`)."""
    for kind in kinds:
        if table_state(db_uri, f"{prefix}__{kind}") != ABSENT:
            db.drop_table(f"{prefix}__{kind}")


def _canonical_uri(db_uri: str) -> str:
    """A local database as an absolute path (how LanceDB reads it); an object store as given."""
    folder = local_db_path(db_uri)
    return str(folder) if folder is not None else db_uri
