"""The stages of an index run after planning, and the local engine that runs them in this process.

One function per stage, shared by both engines (`ray_engine.py` maps the same ones on a cluster):
extract (`extract_file`: read, fingerprint, classify and extract one planned file) -> chunk
(`chunk_file`) -> embed (`embed_rows`: reuse the vector of every text already stored, embed the
rest under a token budget) -> write (`Writer.commit`). A `Job` carries what a run works with and an
`Engine` runs the stages over a `plan.Plan`.

Incremental by construction. A file whose size and mtime match its record is never read; one
whose bytes hash the same as before (touched, or renamed: same sha256 at a new path) is
re-chunked but not re-embedded, because every chunk's vector is looked up by the hash of its text
before anything is encoded. The local engine writes files in groups, each group in one commit, so
a crash leaves every file fully old or fully new and the next run finishes the job. A group closes
at the job's `group_chunks` chunks or COMMIT_SECONDS after the last commit; while it embeds, its
vectors are checkpointed every CHECKPOINT_SECONDS, so a run killed inside one large file resumes
from the vectors already made. Deleted files are removed last (after their vectors had the chance
to be reused by a rename).

Memory stays bounded on huge files: the local engine extracts with `spool` (a long document
reaches it on disk, not in memory, see `extract.Document`), chunks a section at a time
(`Chunker.chunk_pages`), and a file with more than `group_chunks` chunks is streamed
(`StreamedFile`): each group of its chunks is embedded and written as uncommitted fragments, its
document row is built as the groups go by, and the file is committed alone once its last chunk
is written. Extraction runs ahead of the encoder: the next files are read and extracted in a
thread (the parsers in their own process) while this one embeds (`prefetch.prefetched`).
Not here: locking and preparing the collection (`service.py`), progress rendering (a
`ProgressSink` receives events), distribution (`ray_engine.py`).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from docsearch import paths
from docsearch.defaults import DEFAULT_TOKEN_BUDGET, GROUP_CHUNKS
from docsearch.encoders.base import Encoder
from docsearch.encoders.batching import token_batches
from docsearch.errors import ExtractionError
from docsearch.indexer.chunk import Chunk, Chunker
from docsearch.indexer.extract import Document, Limits, open_limited, ranges, read_limited
from docsearch.indexer.extract_process import extract_guarded
from docsearch.indexer.heap import release_free_memory
from docsearch.indexer.pages import encode_file_starts
from docsearch.indexer.plan import Plan, WorkItem, sha256_bytes
from docsearch.indexer.prefetch import prefetched
from docsearch.indexer.readers.mail import MAIL_META
from docsearch.store.checkpoint import PendingVectors
from docsearch.store.documents import DocumentBuilder
from docsearch.store.reads import Store
from docsearch.store.schema import FileRecord, FileUpdate
from docsearch.store.writes import Writer

log = logging.getLogger(__name__)

# A commit at least this often when files come slowly (OCR, many small files): a run killed
# every minute still advances.
COMMIT_SECONDS = 15.0
# Vectors embedded for a group are checkpointed at least this often, so a run killed while
# embedding one large file (one commit) resumes where it was, not at the file's first chunk.
CHECKPOINT_SECONDS = 5.0
NEW, CHANGED, RENAMED, TOUCHED, FAILED = "new", "changed", "renamed", "touched", "failed"
# A file larger than this is hashed a block at a time and read by the extraction itself, not
# read whole here and handed over (text files then never exist whole in memory).
WHOLE_READ_BYTES = 8 * 2**20
PREFETCH_FILES = 2  # files extracted ahead of the one being chunked and embedded


class ProgressSink(Protocol):
    def start(self, files: int) -> None: ...
    def file_done(self, path: str) -> None: ...
    def embedded(self, chunks: int, tokens: int) -> None: ...
    def planned_chunks(self, chunks: int) -> None: ...


class NullProgress:
    def start(self, files: int) -> None: ...
    def file_done(self, path: str) -> None: ...
    def embedded(self, chunks: int, tokens: int) -> None: ...
    def planned_chunks(self, chunks: int) -> None: ...


@dataclass
class FileOutcome:
    """One file after the extract stage: its new record, and what the later stages do with it."""

    record: FileRecord
    kind: str  # NEW, CHANGED, RENAMED (these have a `doc` to chunk), TOUCHED or FAILED
    doc: Document | None = None
    keep_old: bool = False  # FAILED: its previously indexed chunks keep serving
    warnings: list[str] = field(default_factory=list)
    old: FileRecord | None = None  # CHANGED: its record before this run (serving until replaced)

    def update(self, rows: list[dict[str, Any]] | None = None) -> FileUpdate:
        """What the write stage commits for this file: its record, and `rows` in place of its
        old chunks (none for a failure; a touched file, or a failure that keeps serving, keeps
        the chunks it has)."""
        keeps = self.kind == TOUCHED or (self.kind == FAILED and self.keep_old)
        return FileUpdate(self.record, None if keeps else rows or [])


@dataclass
class IndexReport:
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    touched: int = 0  # same bytes, new mtime
    renamed: int = 0
    deleted: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    tokens_embedded: int = 0
    truncated: int = 0
    ocr_pages: int = 0  # pages whose text OCR gave
    ocr_read: int = 0  # of those, read by the engine now (the others: from its cache)
    seconds: float = 0.0
    inference: str = ""  # the engine and precision that embedded ("torch int8"), where known

    @property
    def exit_code(self) -> int:
        return 3 if self.failed else 0

    def files_line(self) -> str:
        """What happened to the files, in one line (the CLI and the UI show it)."""
        return (
            f"{self.new} new, {self.changed} changed, {self.renamed} renamed, "
            f"{self.touched} touched, {self.unchanged} unchanged, {self.deleted} deleted, "
            f"{len(self.failed)} failed"
        )

    def uncount(self, outcome: FileOutcome) -> None:
        """Take back the tally of a file counted as extracted that failed in a later step."""
        setattr(self, outcome.kind, getattr(self, outcome.kind) - 1)

    def count(self, outcome: FileOutcome) -> None:
        """Tally one file: its kind (each kind but FAILED is a counter), failure and warnings."""
        path = outcome.record.path
        if outcome.kind == FAILED:
            self.failed.append((path, outcome.record.reason))
        else:
            setattr(self, outcome.kind, getattr(self, outcome.kind) + 1)
        if outcome.doc is not None:
            self.ocr_pages += len(outcome.doc.ocr_pages)
            self.ocr_read += outcome.doc.ocr_read
        self.warnings.extend((path, w) for w in outcome.warnings)

    def merge(self, part: IndexReport) -> None:
        """Add `part`'s counts and lists (a Ray actor's share of the run; seconds excepted)."""
        for name in (f.name for f in fields(IndexReport) if f.name != "seconds"):
            setattr(self, name, getattr(self, name) + getattr(part, name))


@dataclass
class Job:
    """What one run works with: the collection, how to read, chunk and embed, where to report.
    `runtime`: run-time encoder options (device...) for engines that build their own encoders."""

    writer: Writer
    encoder: Encoder | None
    chunker: Chunker
    limits: Limits = field(default_factory=Limits)
    token_budget: int = DEFAULT_TOKEN_BUDGET
    group_chunks: int = GROUP_CHUNKS
    runtime: dict[str, Any] = field(default_factory=dict)
    progress: ProgressSink = field(default_factory=NullProgress)
    report: IndexReport = field(default_factory=IndexReport)

    @property
    def store(self) -> Store:
        """The version the run writes, for reading (file records, stored vectors)."""
        return self.writer.store


class Engine(Protocol):
    """Runs the stages of a planned run: `run` extracts, chunks, embeds and commits the plan's
    files, deletes its deleted ones and brings the indexes up to date. `embeds_here`: the encoder
    the job carries does the embedding (else the engine's workers build their own)."""

    embeds_here: bool

    def run(self, job: Job, work: Plan) -> None: ...


# ---------------------------------------------------------------------------------------------
# Extract: one planned file -> FileOutcome


def extract_file(
    item: WorkItem, limits: Limits, deleted_shas: frozenset[str], spool: bool = False
) -> FileOutcome:
    """Read, fingerprint and classify one file (new, changed, renamed, touched, failed).

    Whatever goes wrong while reading or extracting the file (a parser's exception, a limit
    passed, a timeout) fails this file only; the parsers' complaints become its warnings.
    `spool`: a long document comes spooled (`extract.Document`; the caller discards it)."""
    old, path = item.old, Path(paths.real(item.path))
    record = FileRecord(item.path, "", item.size, item.mtime, "indexed", indexed_at=time.time())
    try:
        record.sha256, data = fingerprint(path, limits)  # refused unread when over a limit
        if old is not None and old.status == "indexed" and old.sha256 == record.sha256:
            # Same bytes: only the mtime moves, the chunks stay as they are.
            return FileOutcome(replace(old, size=item.size, mtime=item.mtime), TOUCHED)
        doc = extract_guarded(path, data, item.path, limits, spool)
    except ExtractionError as exc:
        return _failed(record, old, exc)
    except Exception as exc:  # noqa: BLE001 - whatever breaks on one file fails that file only
        log.debug("%s: extraction raised", item.path, exc_info=True)
        return _failed(record, old, ExtractionError(f"could not be read ({describe_error(exc)})"))
    kind = CHANGED if _serving(old) else RENAMED if record.sha256 in deleted_shas else NEW
    warnings = [paths.one_line(w) for w in doc.warnings]
    record.reason = "; ".join(warnings)
    record.ocr_pages = ranges(doc.ocr_pages)
    record.page_starts = encode_file_starts(doc)
    record.encoding = doc.encoding
    return FileOutcome(record, kind, doc, warnings=warnings, old=old)


def describe_error(exc: BaseException) -> str:
    """An unexpected exception in one line, for a file's failure reason."""
    text = paths.one_line(str(exc)) or "no message"
    return f"{type(exc).__name__}: {text}"


def fingerprint(path: Path, limits: Limits) -> tuple[str, bytes | None]:
    """A file's sha256, and its bytes if it is small enough to hand over whole (else None: the
    extraction reads it again; a file that changes in between is found changed next run)."""
    import stat

    try:
        size = path.stat().st_size if stat.S_ISREG(path.stat().st_mode) else 0
    except OSError:
        size = 0  # read_limited says why
    if size <= WHOLE_READ_BYTES:
        data = read_limited(path, limits)
        return sha256_bytes(data), data
    digest = hashlib.sha256()
    with open_limited(path, limits) as handle:
        while block := handle.read(4 * 2**20):
            digest.update(block)
    return digest.hexdigest(), None


def failed_step(
    outcome: FileOutcome, exc: Exception, step: str, wrote: bool = False
) -> FileOutcome:
    """An extracted file that failed at a later `step`, with the step and the error as its
    reason. Nothing of it written (`wrote` False): its previous version keeps serving."""
    log.debug("%s: %s raised", outcome.record.path, step, exc_info=True)
    error = ExtractionError(f"failed while {step} ({describe_error(exc)})")
    old = None if wrote else outcome.old
    return _failed(replace(outcome.record, n_chunks=0), old, error)  # none of its rows kept


def _failed(record: FileRecord, old: FileRecord | None, exc: ExtractionError) -> FileOutcome:
    """A file that could not be read keeps serving its previous chunks if it had any."""
    warnings = [paths.one_line(w) for w in exc.warnings]
    reason = paths.one_line(str(exc))  # a message may quote the raw name: kept on one line
    if old is not None and _serving(old):
        kept = f"{reason.split('; still serving')[0]}; still serving the previously indexed version"
        return FileOutcome(replace(old, status=FAILED, reason=kept), FAILED, None, True, warnings)
    return FileOutcome(replace(record, status=FAILED, reason=reason), FAILED, None, False, warnings)


def _serving(old: FileRecord | None) -> bool:
    """The file has chunks in the index (indexed, or failed later while keeping its chunks)."""
    return old is not None and (old.status == "indexed" or old.n_chunks > 0)


# ---------------------------------------------------------------------------------------------
# Chunk: an extracted file -> chunk rows


def text_sha(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_id(path: str, ordinal: int, sha: str) -> str:
    key = f"{path}\0{ordinal}\0{sha}".encode("utf-8", "surrogatepass")
    return hashlib.sha1(key).hexdigest()[:24]


def doc_id(path: str) -> str:
    """A document's id from its stored path (any string: a lone surrogate is hashed as is)."""
    return hashlib.sha1(path.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def chunk_file(outcome: FileOutcome, chunker: Chunker, report: IndexReport) -> list[dict[str, Any]]:
    """The chunk rows of an extracted file; its record learns its chunk count and title."""
    return list(file_rows(outcome, chunker, report))


def file_rows(
    outcome: FileOutcome, chunker: Chunker, report: IndexReport
) -> Iterator[dict[str, Any]]:
    """The chunk rows of an extracted file as the chunker makes them (a section at a time),
    the file's own document's first, then its attachments' (each a document of its own); once
    they are all made, its record has its chunk count and title."""
    doc = outcome.doc
    assert doc is not None  # only extracted files are chunked
    outcome.record.n_chunks, outcome.record.title = 0, doc.title
    for one in doc.documents():
        chunks = chunker.chunk_pages(one.iter_pages())
        for row in iter_chunk_rows(one, chunks, outcome.record.sha256):
            report.truncated += row["truncated"]
            outcome.record.n_chunks += 1
            yield row


def chunk_rows(doc: Document, chunks: Sequence[Chunk], file_sha: str) -> list[dict[str, Any]]:
    return list(iter_chunk_rows(doc, chunks, file_sha))


def document_key(doc: Document) -> str:
    """What names a document among a file's: its path, and its chain of attachments if any."""
    return f"{doc.path}\0{doc.part}" if doc.part else doc.path


def iter_chunk_rows(
    doc: Document, chunks: Iterable[Chunk], file_sha: str
) -> Iterator[dict[str, Any]]:
    key, ocr_pages = document_key(doc), set(doc.ocr_pages)
    did = doc_id(key)
    provenance = {"part": doc.part, **dict.fromkeys(MAIL_META, "")} | doc.meta
    for c in chunks:
        sha = text_sha(c.text)
        yield (
            {
                "id": chunk_id(key, c.ordinal, sha),
                "doc_id": did,
                "path": doc.path,
                "title": doc.title,
                "text": c.text,
                "ordinal": c.ordinal,
                "page_start": c.page_start,
                "page_end": c.page_end,
                "char_start": c.char_start,
                "char_end": c.char_end,
                "heading_path": c.heading_path,
                "n_tokens": c.n_tokens,
                "truncated": c.truncated,
                "file_sha256": file_sha,
                "text_sha": sha,
                "ocr": not ocr_pages.isdisjoint(range(c.page_start, c.page_end + 1)),
                "location": doc.label(c.page_start, c.page_end),
                "page_breaks": " ".join(f"{at}:{number}" for at, number in c.page_breaks),
                **provenance,
            }
        )


# ---------------------------------------------------------------------------------------------
# Embed: chunk rows -> chunk rows with vectors


def embed_rows(
    rows: list[dict[str, Any]],
    encoder: Encoder,
    store: Store,
    report: IndexReport,
    budget: int = DEFAULT_TOKEN_BUDGET,
    progress: ProgressSink | None = None,
    checkpoint: VectorCheckpoint | None = None,
) -> None:
    """Give every row its `vector`: the stored one for a text already embedded (by any file, or
    checkpointed by a killed run), a new one for the rest (each distinct text once), encoded in
    batches sorted by length under the padded-token `budget`."""
    known = store.vectors_for(r["text_sha"] for r in rows)
    todo: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["text_sha"] not in known:
            todo.setdefault(row["text_sha"], row)  # each new text once, at its first row
    fresh = list(todo.values())
    lengths = [r["n_tokens"] for r in fresh]
    vectors = np.zeros((len(fresh), encoder.dim), dtype=np.float32)
    if checkpoint:
        checkpoint.begin()
    for batch in token_batches(lengths, budget):
        vectors[batch] = encoder.encode_documents([fresh[i]["text"] for i in batch])
        release_free_memory()  # each batch pads to its own shape: free blocks of every size
        if progress:
            progress.embedded(len(batch), sum(lengths[i] for i in batch))
        if checkpoint:
            checkpoint.add([fresh[i]["text_sha"] for i in batch], vectors[batch])
    known.update({r["text_sha"]: v for r, v in zip(fresh, vectors, strict=True)})
    for row in rows:
        row["vector"] = known[row["text_sha"]].tolist()
    report.chunks_embedded += len(fresh)
    report.chunks_reused += len(rows) - len(fresh)
    report.tokens_embedded += sum(lengths)


class VectorCheckpoint:
    """Saves a group's freshly embedded vectors to the store every `seconds` while it embeds.

    The group's chunks are still committed in one step; this only keeps the vectors of a run
    killed before that commit (`Store.vectors_for` finds them next time). A checkpoint that
    cannot be written (a full disk, another process creating the table at the same moment) is
    given up with a warning: it only saves time, so it never stops the run.
    """

    def __init__(self, pending: PendingVectors, seconds: float) -> None:
        self.pending, self.seconds = pending, seconds
        self.used = pending.exists()  # rows to clear once committed
        self.begin()

    def begin(self) -> None:
        """A group starts embedding: the clock starts, nothing is buffered."""
        self._shas: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._since = time.monotonic()

    def add(self, shas: Sequence[str], vectors: np.ndarray) -> None:
        if self.seconds < 0:  # given up
            return
        self._shas.extend(shas)
        self._vectors.append(vectors.copy())
        if time.monotonic() - self._since >= self.seconds:
            self._save()

    def _save(self) -> None:
        try:
            self.pending.save(self._shas, np.concatenate(self._vectors))
            self.used = True
        except (OSError, RuntimeError, ValueError) as exc:
            log.warning("cannot checkpoint vectors (%s); a killed run will re-embed them", exc)
            self.seconds = -1.0
        self.begin()


# ---------------------------------------------------------------------------------------------
# Write, in this process: groups of files, one commit each


class Indexer:
    """The local engine's write stage: queues a job's files and commits them in groups, embedding
    each group's new texts as one batch (with the job's encoder; None: lexical only). A file with
    more chunks than a group is streamed instead (`StreamedFile`) and committed alone."""

    def __init__(
        self,
        job: Job,
        *,
        commit_seconds: float | None = None,
        checkpoint_seconds: float | None = None,
    ) -> None:
        """A group is committed once it holds the job's `group_chunks` chunks or, when
        `commit_seconds` is set, once that long has passed since the last commit.
        `checkpoint_seconds` (default CHECKPOINT_SECONDS) paces the vector checkpoint."""
        self.job, self.writer, self.report = job, job.writer, job.report
        self.commit_seconds = commit_seconds
        self._pending: list[tuple[FileOutcome, list[dict[str, Any]]]] = []
        self._touched: list[FileUpdate] = []
        self._last_commit = time.monotonic()
        seconds = CHECKPOINT_SECONDS if checkpoint_seconds is None else checkpoint_seconds
        self.checkpoint = (
            VectorCheckpoint(job.writer.pending, seconds) if job.encoder is not None else None
        )

    def write(self, outcome: FileOutcome) -> None:
        """Take one file from the extract stage: queue it (see `__init__`), or record a touch, or
        commit a failure at once (so its reason is recorded even if the run is killed)."""
        self.report.count(outcome)
        if outcome.doc is not None:
            self.add(outcome)
            return
        if outcome.kind == FAILED:
            self.writer.commit([outcome.update()])
        else:
            self._touched.append(outcome.update())
        self.job.progress.file_done(outcome.record.path)

    def add(self, outcome: FileOutcome) -> None:
        """Chunk an extracted file and queue it, or stream it if it outgrows a group; commit
        the group if it is due."""
        assert outcome.doc is not None
        try:
            rows: list[dict[str, Any]] = []
            made = file_rows(outcome, self.job.chunker, self.report)
            for row in made:
                rows.append(row)
                if len(rows) > self.job.group_chunks:
                    self._stream(outcome, rows, made)
                    return
        except Exception as exc:  # noqa: BLE001 - one file's fault fails that file only
            self._fail(outcome, exc, "chunking")
            return
        finally:
            outcome.doc.discard()  # a spooled document's file: read to the end, or given up
        self._pending.append((outcome, rows))
        self.job.progress.planned_chunks(len(rows))
        if self._group_due():
            self.flush()

    def _stream(
        self, outcome: FileOutcome, first: list[dict[str, Any]], rest: Iterator[dict[str, Any]]
    ) -> None:
        """Write a large file a group of chunks at a time and commit it alone: the files queued
        before it first, so that its commit is its own."""
        self.flush()
        streamed = StreamedFile(self.job, self.checkpoint)
        group: list[dict[str, Any]] = []
        try:
            for row in itertools.chain(first, rest):
                if len(group) >= self.job.group_chunks:
                    streamed.write(group)
                    group = []
                group.append(row)
            streamed.write(group)
        except Exception as exc:  # noqa: BLE001 - its fragments are never committed: no trace
            self._fail(outcome, exc, "chunking and embedding")
            return
        try:
            streamed.commit(outcome)
        except Exception as exc:  # noqa: BLE001
            self._fail(outcome, exc, "writing", wrote=True)
        self._last_commit = time.monotonic()

    def _group_due(self) -> bool:
        if sum(len(rows) for _, rows in self._pending) >= self.job.group_chunks:
            return True
        waited = time.monotonic() - self._last_commit
        return self.commit_seconds is not None and waited >= self.commit_seconds

    def flush(self) -> None:
        """Commit what is queued: the touched files' records, then the group with its vectors."""
        if self._touched:
            self.writer.commit(self._touched)
            self._touched = []
        if not self._pending:
            return
        group, self._pending = self._pending, []
        try:
            self._write_group(group)
        except Exception:  # noqa: BLE001 - find the file at fault: each alone, the rest go on
            log.debug(
                "a group of %d files failed; writing them one by one", len(group), exc_info=True
            )
            for one in group:
                self._write_alone(*one)
        self._last_commit = time.monotonic()
        for outcome, _ in group:
            self.job.progress.file_done(outcome.record.path)

    def _write_group(self, group: list[tuple[FileOutcome, list[dict[str, Any]]]]) -> None:
        """Embed the group's new texts and commit its files in one step."""
        rows = [row for _, file_rows in group for row in file_rows]
        job = self.job
        if job.encoder is not None:
            budget, progress = job.token_budget, job.progress
            embed_rows(rows, job.encoder, job.store, job.report, budget, progress, self.checkpoint)
        self.writer.commit([outcome.update(file_rows) for outcome, file_rows in group])
        release_free_memory()  # the group's rows, batches and write buffers are free now
        self.report.chunks_written += len(rows)
        if self.checkpoint and self.checkpoint.used:  # committed vectors need no checkpoint
            self.writer.pending.clear(r["text_sha"] for r in rows)

    def _write_alone(self, outcome: FileOutcome, rows: list[dict[str, Any]]) -> None:
        """One file of a group that failed, embedded and committed alone; failed if it fails."""
        job = self.job
        try:
            if job.encoder is not None:
                budget = job.token_budget
                embed_rows(rows, job.encoder, job.store, job.report, budget, None, self.checkpoint)
        except Exception as exc:  # noqa: BLE001
            self._fail(outcome, exc, "embedding")
            return
        try:
            self.writer.commit([outcome.update(rows)])
            self.report.chunks_written += len(rows)
        except Exception as exc:  # noqa: BLE001
            self._fail(outcome, exc, "writing", wrote=True)

    def _fail(self, outcome: FileOutcome, exc: Exception, step: str, wrote: bool = False) -> None:
        """Record a file that failed after its extraction. Nothing of it written (`wrote`
        False): its previous version, if any, keeps serving. A write that failed midway may
        have replaced some of its rows: they are dropped with it (the next run retries it).
        A store that cannot even record the failure stops the run."""
        failed = failed_step(outcome, exc, step, wrote)
        self.report.uncount(outcome)
        self.report.count(failed)
        self.writer.commit([failed.update()])


class StreamedFile:
    """One large file on its way into the store: each group of its chunk rows is embedded and
    written as uncommitted fragments (`Writer.write_fragments`) and folded into its document
    row; `commit` writes that row and commits the file alone, replacing its old rows. Killed
    before then, the file is as it was (the fragments are never referenced) and the next run
    does it again, reusing the vectors checkpointed meanwhile."""

    def __init__(self, job: Job, checkpoint: VectorCheckpoint | None) -> None:
        self.job, self.checkpoint = job, checkpoint
        self.documents: dict[str, DocumentBuilder] = {}  # doc_id -> its row (a file holds several)
        self.fragments: list[tuple[str, Any]] = []
        self.groups = 0
        job.writer.add_ocr_columns()  # before fragments take the table's schema

    def write(self, rows: list[dict[str, Any]]) -> None:
        job = self.job
        if not rows:
            return
        job.progress.planned_chunks(len(rows))
        if job.encoder is not None:
            budget, progress = job.token_budget, job.progress
            embed_rows(rows, job.encoder, job.store, job.report, budget, progress, self.checkpoint)
        self.fragments += job.writer.write_fragments(rows, documents=[])
        for did, group in itertools.groupby(rows, key=lambda row: row["doc_id"]):
            self.documents.setdefault(did, DocumentBuilder()).add(list(group))
        release_free_memory()
        job.report.chunks_written += len(rows)
        self.groups += 1

    def commit(self, outcome: FileOutcome) -> None:
        writer = self.job.writer
        documents = [builder.row() for builder in self.documents.values()]
        self.fragments += writer.write_fragments([], documents=documents)
        writer.commit([outcome.update([])], fragments=self.fragments)
        release_free_memory()
        if self.checkpoint and self.checkpoint.used:
            # Its vectors are committed; the checkpoint held nothing else this run still needs
            # (the files before it are committed, the ones after it not yet embedded).
            writer.pending.drop()
            self.checkpoint.used = False
        log.debug("%s: %d groups in one commit", outcome.record.path, self.groups)
        self.job.progress.file_done(outcome.record.path)


class LocalEngine:
    """Runs the stages in this process, file after file, committing group by group; the
    extraction of the next files runs ahead in a thread."""

    embeds_here = True

    def run(self, job: Job, work: Plan) -> None:
        def extracted(item: WorkItem) -> FileOutcome:
            return extract_file(item, job.limits, work.deleted_shas, spool=True)

        with prefetched(extracted, work.items, PREFETCH_FILES) as outcomes:
            write_locally(job, outcomes, work.deleted)


def write_locally(job: Job, outcomes: Iterable[FileOutcome], deleted: Sequence[str] = ()) -> None:
    """The local write stage over a run's files, as they come: groups committed, then the
    deleted files dropped (their vectors could serve a rename until now), then the indexes."""
    indexer = Indexer(job, commit_seconds=COMMIT_SECONDS)
    for outcome in outcomes:
        indexer.write(outcome)
    indexer.flush()
    if deleted:
        job.writer.commit([], deleted=deleted)
    job.writer.refresh_indexes()
