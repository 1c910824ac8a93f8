"""The REST API's contract: request and response models, path parameters and each route's errors.

What `/openapi.json` says is what the server does: path parameters carry the patterns the
server checks (a bad one is a 422 like any invalid input), every answer has its model (a hit
with its passages and per-leg scores, a collection, an index job, a document, an error), and
each route lists the error statuses it can answer. Answers are built by `api.py` as dicts and
checked against these models on the way out.
Not here: the routes themselves (`api.py`), keys (`api_auth.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from docsearch.retriever import MAX_K, MAX_QUERY_CHARS

# Path parameters, as the server checks them.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # store.schema.validate_name's
DOC_ID_PATTERN = r"^[0-9a-f]{16}$"  # as search hits name documents
JOB_ID_PATTERN = r"^[0-9a-f]{12}$"  # api.IndexJob ids
MAX_PAGE = 10_000_000

Name = Annotated[str, PathParam(pattern=NAME_PATTERN, description="a collection's name")]
DocId = Annotated[str, PathParam(pattern=DOC_ID_PATTERN, description="16 hex digits")]
JobId = Annotated[str, PathParam(pattern=JOB_ID_PATTERN, description="12 hex digits")]
PageNumber = Annotated[int, PathParam(ge=1, le=MAX_PAGE, description="1-based")]

Mode = Literal["hybrid", "vector", "lexical"]  # docsearch.defaults.MODES
FormMode = Literal["", "hybrid", "vector", "lexical"]  # a form field cannot say null: ''
Granularity = Literal["document", "passage"]  # docsearch.retriever.GRANULARITIES


# ---------------------------------------------------------------------------------------------
# Requests


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # No pattern: what is left of a query once control characters and lone surrogates are
    # cleaned out differs between regex dialects; one with nothing left is a 400.
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(10, ge=1, le=MAX_K)
    mode: Mode | None = Field(None, description="default: hybrid")
    where: str | None = Field(None, description="SQL over chunk columns: page_start >= 3")
    path: str | None = Field(None, description="glob on the file path: *.pdf")
    granularity: Granularity = "document"


class SimilarRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    doc_id: str = Field(pattern=DOC_ID_PATTERN, description="a document, as search hits name it")
    k: int = Field(10, ge=1, le=MAX_K)
    mode: Mode | None = Field(None, description="default: hybrid")


class IndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    folder: str | None = Field(None, description="under the server's --root (default: its own)")


# ---------------------------------------------------------------------------------------------
# Answers


class ErrorBody(BaseModel):
    error: str = Field(description="what went wrong, in one line")
    details: list[dict[str, Any]] | None = Field(None, description="each invalid input (422)")


class Health(BaseModel):
    status: Literal["ok"]
    version: str


class PassageView(BaseModel):
    """A passage of a hit: where it lies, its score and its marked snippet."""

    page_start: int
    page_end: int
    char_start: int
    char_end: int
    heading_path: str
    chunk_id: str
    ordinal: int
    ocr: bool
    score: float
    snippet: str = Field(description="the passage, query terms marked **so**")
    snippet_marks: list[tuple[int, int]]
    snippet_span: tuple[int, int]
    pages: str
    page: int | None = Field(
        description="the page of the snippet's first marked word (a pin cite); null if unknown"
    )
    provenance: str = Field(
        description="where the text comes from beyond path and page: an attachment's message, "
        "a slide deck's sheet or chapter ('' for most files)"
    )
    part: str = Field(description="the attachment chain inside its file ('' for the file's own)")
    location: str = Field(description="sheet and rows, or chapter ('' where pages say it)")
    email_subject: str
    email_from: str
    email_to: str
    email_date: str


class ChunkPassage(PassageView):
    """A passage with its document's fields (a passage hit, or a similar hit's side)."""

    text: str
    path: str
    title: str
    doc_id: str


class Hit(ChunkPassage):
    """A document (or passage) found: per-leg scores, `fused` among them; its best passages."""

    scores: dict[str, dict[str, float]] = Field(
        description="per leg (dense, lexical, doc_dense, doc_lexical...) and fused: rank, score"
    )
    passages: list[PassageView] = Field(
        description="a document's best passages, best first (the hit's own passage fields are "
        "the first's); empty for a passage search's hit, which is its passage"
    )


class PassagePair(BaseModel):
    by: str
    score: float
    query: ChunkPassage
    match: ChunkPassage


class SimilarHit(Hit):
    terms: list[str] = Field(description="the query document's key terms this one holds")
    query_passage: ChunkPassage | None
    pairs: list[PassagePair]


class SearchAnswer(BaseModel):
    collection: str
    mode: str = Field(description="the mode that answered (hybrid falls back to lexical)")
    asked_mode: str = Field(description="the mode asked for, or the collection's default")
    rule: str = Field(
        description="the rule that ranked: hybrid, lexical, vector, long-query, "
        "key-terms, whole-document, chunk or custom (docsearch.results)"
    )
    fallback: str | None = Field(
        description="why mode is not asked_mode: 'no vectors' or "
        "'encoder unavailable'; null when it is"
    )
    seconds: float
    hits: list[Hit]


class SimilarQuery(BaseModel):
    doc_id: str | None
    path: str


class SimilarAnswer(BaseModel):
    collection: str
    mode: str = Field(description="the mode that answered (hybrid falls back to lexical)")
    asked_mode: str
    rule: str
    fallback: str | None
    query: SimilarQuery
    seconds: float
    hits: list[SimilarHit]


class VersionInfo(BaseModel):
    encoder: str
    encoder_spec: dict[str, Any] | None
    chunker: dict[str, Any]
    schema_version: int
    files: int
    failed_files: int
    chunks: int
    version: int


class Collection(VersionInfo):
    name: str
    source: str = Field(description="the folder it was created with (index jobs are bound to it)")
    switch: VersionInfo | None = Field(description="the version an unfinished switch builds")


class FileRecord(BaseModel):
    path: str
    sha256: str
    size: int
    mtime: float
    status: str
    reason: str
    n_chunks: int
    indexed_at: float
    title: str
    ocr_pages: str


class DocumentPassage(BaseModel):
    id: str
    ordinal: int
    page_start: int
    page_end: int
    char_start: int
    char_end: int
    text: str


class Document(BaseModel):
    doc_id: str
    path: str
    title: str
    pages: int
    record: FileRecord | None
    passages: list[DocumentPassage]


class Page(BaseModel):
    doc_id: str
    number: int
    text: str


class IndexJob(BaseModel):
    collection: str
    folder: str
    id: str
    state: Literal["running", "done", "failed"]
    started_at: float
    finished_at: float | None
    files_total: int
    files_done: int
    chunks_embedded: int
    tokens_embedded: int
    result: dict[str, Any] | None = Field(description="the index report, once done")
    error: str | None
    url: str


# ---------------------------------------------------------------------------------------------
# Each route's error statuses


_WHY = {
    400: "a body that is not JSON, or input no schema can check (a filter, an unreadable file)",
    401: "no key, or an unknown or revoked one",
    403: "the key does not give this right",
    404: "no such collection, document, page or job",
    409: "the collection is being indexed",
    413: "request body too large",
    422: "invalid input: the first problem, and each in `details`",
    503: "busy or the encoder is unavailable: retry later",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status with the error model."""
    return {s: {"model": ErrorBody, "description": _WHY[s]} for s in statuses}


KEYED = (401, 403, 404, 422)  # every route that takes a key and a collection or id
