"""What a collection's tables hold: their columns, the identity a collection is built with, and
the typed rows the rest of docsearch reads (file records, chunk views, search candidates).

`CollectionMeta` is the collection's identity (encoder spec, chunker, schema version), kept in
the chunks table's schema metadata; `same_encoder` is the one place that decides whether two
identities share an encoder, and `check_compatible` the one refusal a run meets when it asks for
another encoder or chunker without switching.
Not here: document rows made from chunks (`documents.py`), reading or writing tables
(`reads.py`, `writes.py`), where tables live (`tables.py`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from docsearch.encoders.base import describe, same_identity
from docsearch.errors import EncoderMismatchError, UsageError

SCHEMA_VERSION = 1
META_KEY = b"docsearch"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
LEXICAL = "no encoder (lexical only)"


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

    def same_encoder(self, other: CollectionMeta) -> bool:
        return same_encoder(self.encoder, other.encoder)

    def same_identity(self, other: CollectionMeta) -> bool:
        """The same encoder and the same chunking: what a switch compares."""
        return self.same_encoder(other) and self.chunker == other.chunker

    def identity(self) -> str:
        """The encoder and chunk size, for messages."""
        encoder = describe(self.encoder) if self.encoder else "no encoder (lexical)"
        return f"{encoder}, {self.chunker.get('max_tokens', '?')}-token chunks"


def same_encoder(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether two encoder specs (None: lexical only) name one encoder: the one place it is
    decided."""
    if old is None or new is None:
        return old is None and new is None
    return same_identity(old, new)


def check_compatible(name: str, built: CollectionMeta, wanted: CollectionMeta) -> None:
    """Refuse to write collection `name`, built with `built`, with another encoder or chunker."""
    if not built.same_encoder(wanted):
        was = describe(built.encoder) if built.encoder else LEXICAL
        now = describe(wanted.encoder) if wanted.encoder else LEXICAL
        raise EncoderMismatchError(
            f"collection {name!r} was built with {was}, not {now}; add --switch to "
            f"rebuild it with {now} while searches keep using the current version, index "
            f"into a new collection (--collection NEW), or re-index from scratch after "
            f"`docsearch collections drop {name}`"
        )
    if built.chunker != wanted.chunker:
        raise EncoderMismatchError(
            f"collection {name!r} was chunked with {built.chunker}, not "
            f"{wanted.chunker}; use the same --max-tokens/--overlap, add --switch to rechunk "
            f"it beside the current version, or use a new collection"
        )


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
class FileStats:
    """How a collection's files fared: how many are searchable, and which failed and why."""

    indexed: int
    failed: dict[str, str]  # path -> reason


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


CHUNK_VIEW_FIELDS = tuple(f.name for f in fields(ChunkView))
_View = TypeVar("_View", bound=ChunkView)


def changed(one: _View, **changes: Any) -> _View:
    """`dataclasses.replace` for a ChunkView and its subclasses (frozen, every field set by
    __init__, no __post_init__): a copy of its attributes with `changes`, made without the
    generated __init__ (~10 us a call; a search copies ~30 chunks to add their text)."""
    if not changes.keys() <= one.__dict__.keys():
        raise TypeError(
            f"{type(one).__name__} has no field {sorted(changes.keys() - one.__dict__.keys())}"
        )
    made = object.__new__(type(one))
    made.__dict__.update(one.__dict__, **changes)
    return made


# What a search reads: the chunk columns of ChunkView (`id` is its chunk_id), not the vector.
RESULT_COLUMNS = ["id" if f.name == "chunk_id" else f.name for f in fields(ChunkView)]


def result_columns(text: bool) -> list[str]:
    """RESULT_COLUMNS, less the text where a search reads it later, for the chunks it shows:
    reading 500 chunks' text was a third of a short query's document search."""
    return RESULT_COLUMNS if text else [c for c in RESULT_COLUMNS if c != "text"]


def candidate(row: dict[str, Any], score: float) -> Candidate:
    """A row of a search read (RESULT_COLUMNS, its score column already taken out; a read
    without text leaves `text` empty, see `Store.with_text`)."""
    row["chunk_id"] = row.pop("id")
    row.setdefault("text", "")
    row.setdefault("ocr", False)  # a collection from before OCR has no such column
    row["score"] = row["raw_score"] = float(score)
    if row.keys() == CANDIDATE_FIELDS:
        # Every field and nothing else (the common case): set at once what the frozen
        # dataclass's __init__ sets one field at a time (a search makes 1,000 of them: the
        # __init__ was ~10 us each). Anything else goes through __init__ (defaults, errors).
        made = object.__new__(Candidate)
        made.__dict__.update(row)
        return made
    return Candidate(**row)


CANDIDATE_FIELDS = frozenset(f.name for f in fields(Candidate))
# What a read may lack: the text (read later, `Store.with_text`), and the columns added since
# a collection was written (as `candidate` fills them).
_READ_LATER = {"text": "", "ocr": False} | {
    f.name: f.default for f in fields(ChunkView) if isinstance(f.default, str)
}


def candidate_fields(columns: Sequence[str]) -> Callable[[tuple[Any, ...]], dict[str, Any]] | None:
    """What makes a row of `columns` (its values; `id` is the chunk_id) into a Candidate's
    fields less its scores, filling what a read may lack (`_READ_LATER`); None where `columns`
    are not a Candidate's (`candidate` then fills or refuses a row at a time)."""
    names = tuple("chunk_id" if c == "id" else c for c in columns)
    fill = {name: value for name, value in _READ_LATER.items() if name not in names}
    if set(names) | set(fill) | {"score", "raw_score"} != CANDIDATE_FIELDS:
        return None
    every, fills = (*names, *fill), tuple(fill.values())
    return lambda row: dict(zip(every, (*row, *fills), strict=True))


def scored(fields: Iterable[dict[str, Any]], scores: Iterable[float]) -> list[Candidate]:
    """Candidates with these fields (`candidate_fields`' dicts, copied, not kept), each with its
    score: each instance's dict filled by one C-level copy, where a __init__ sets a field at a
    time (a pool of 500 real rows took 0.7-0.8 ms from value tuples, 0.25 ms from held dicts)."""
    made = []
    for one_fields, score in zip(fields, scores, strict=True):
        one, value = object.__new__(Candidate), float(score)
        attributes = one.__dict__
        attributes.update(one_fields)
        attributes["score"] = attributes["raw_score"] = value
        made.append(one)
    return made


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


def doc_candidate(row: dict[str, Any], score: float) -> DocCandidate:
    return DocCandidate(**row, score=float(score), raw_score=float(score))


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
# collection gains them when next written (`Writer.add_ocr_columns`).
ADDED_CHUNK_COLUMNS = {"ocr": "false"} | dict.fromkeys(
    "part location email_subject email_from email_to email_date page_breaks".split(), "''"
)
ADDED_FILE_COLUMNS = ("ocr_pages", "page_starts", "encoding")
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
