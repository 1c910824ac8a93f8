"""Folder -> collection: walk, diff against the store, extract, chunk, embed, write.

Incremental by construction. A file whose size and mtime match its record costs nothing; one
whose bytes hash the same as before (touched, or renamed: same sha256 at a new path) is
re-chunked but not re-embedded, because every chunk's vector is looked up by the hash of its text
before anything is encoded. Files are written in groups, each group in one commit, so a crash
leaves every file fully old or fully new and the next run finishes the job. A group closes at
GROUP_CHUNKS chunks or COMMIT_SECONDS after the last commit; while it embeds, its vectors are
checkpointed every CHECKPOINT_SECONDS, so a run killed inside one large file resumes from the
vectors already made. Deleted files are removed last (after their vectors had the chance to be
reused by a rename).
Not here: the command line, progress rendering (a `ProgressSink` receives events), distribution.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from docsearch.defaults import DEFAULT_TOKEN_BUDGET, GROUP_CHUNKS
from docsearch.encoders.base import Encoder
from docsearch.encoders.batching import token_batches
from docsearch.errors import ExtractionError, UsageError
from docsearch.indexer.chunk import Chunk, Chunker
from docsearch.indexer.extract import Document, Limits, read_limited, supported
from docsearch.indexer.extract_process import extract_guarded
from docsearch.indexer.store import FileRecord, FileUpdate, Store

log = logging.getLogger(__name__)

DEFAULT_EXCLUDES = (".*", "*/.*", "__pycache__", "*/__pycache__", "node_modules", "*/node_modules")
# A commit at least this often when files come slowly (OCR, many small files): a run killed
# every minute still advances. index_folder sets it; the Ray actors' Indexers never commit.
COMMIT_SECONDS = 15.0
# Vectors embedded for a group are checkpointed at least this often, so a run killed while
# embedding one large file (one commit) resumes where it was, not at the file's first chunk.
CHECKPOINT_SECONDS = 5.0


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
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 3 if self.failed else 0


# ---------------------------------------------------------------------------------------------
# Walking and fingerprints


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def walk(
    root: Path,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    skipped: list[tuple[str, str]] | None = None,
) -> list[Path]:
    """Supported regular files under `root` (or `root` itself), filtered by include/exclude globs.

    Whatever would have been indexed but cannot be is added to `skipped` with the reason: a
    symlink leading out of `root` (indexing a folder must not pull in text from elsewhere on the
    machine), a broken symlink or a symlink loop, a FIFO, socket or device (never opened: a FIFO
    would block the run), a symlinked folder (not followed), a folder that cannot be listed.
    """
    skips: list[tuple[str, str]] = skipped if skipped is not None else []
    if not root.is_dir():
        why = _not_indexable(root, root.resolve().parent)
        if why:
            skips.append((str(root.absolute()), why))
        return [root] if supported(root) and not why else []
    excludes = [*DEFAULT_EXCLUDES, *exclude]
    real_root = root.resolve()

    def unlistable(exc: OSError) -> None:
        skips.append((str(Path(exc.filename or root).absolute()), _unlistable(exc)))

    found = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not _matches(rel_dir + d, excludes))
        for name in [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            skips.append(
                (str((Path(dirpath) / name).absolute()), "symlink to a folder (not followed)")
            )
        for name in sorted(filenames):
            rel = rel_dir + name
            if _matches(rel, excludes) or (include and not _matches(rel, include)):
                continue
            path = Path(dirpath) / name
            if not supported(path):
                continue
            why = _not_indexable(path, real_root)
            if why:
                skips.append((str(path.absolute()), why))
            else:
                found.append(path)
    return found


def _unlistable(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "folder not readable (permission denied)"
    return f"folder not readable ({exc.strerror or exc})"


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def _not_indexable(path: Path, real_root: Path) -> str:
    """Why `path` cannot be indexed, or '' when it is a regular file (or a symlink to one inside
    `real_root`). Only stat calls: nothing is opened."""
    try:
        link = path.lstat()
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISLNK(link.st_mode):
        try:
            target = path.stat()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "symlink loop"
            if exc.errno == errno.ENOENT:
                return f"broken symlink (its target {os.readlink(path)} does not exist)"
            return f"symlink that cannot be followed ({exc.strerror or exc})"
        if not path.resolve().is_relative_to(real_root):
            return "symlink to a file outside the folder"
        if not stat.S_ISREG(target.st_mode):
            return f"symlink to {_kind(target.st_mode)}, not a regular file (not read)"
        return ""
    if not stat.S_ISREG(link.st_mode):
        return f"{_kind(link.st_mode)}, not a regular file (not read)"
    return ""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_sha(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_id(path: str, ordinal: int, sha: str) -> str:
    return hashlib.sha1(f"{path}\0{ordinal}\0{sha}".encode()).hexdigest()[:24]


def doc_id(path: str) -> str:
    return hashlib.sha1(path.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Embedding under a token budget


def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    lengths: Sequence[int],
    budget: int = DEFAULT_TOKEN_BUDGET,
    progress: ProgressSink | None = None,
    on_batch: Callable[[list[int], np.ndarray], None] | None = None,
) -> np.ndarray:
    """(len(texts), dim) vectors; `on_batch(indices, vectors)` sees each batch as it is done."""
    out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
    for batch in token_batches(lengths, budget):
        out[batch] = encoder.encode_documents([texts[i] for i in batch])
        if progress:
            progress.embedded(len(batch), sum(lengths[i] for i in batch))
        if on_batch:
            on_batch(batch, out[batch])
    return out


class VectorCheckpoint:
    """Saves a group's freshly embedded vectors to the store every `seconds` while it embeds.

    The group's chunks are still committed in one step; this only keeps the vectors of a run
    killed before that commit (`Store.vectors_for` finds them next time). A checkpoint that
    cannot be written (a full disk, another process creating the table at the same moment) is
    given up with a warning: it only saves time, so it never stops the run.
    """

    def __init__(self, store: Store, seconds: float | None) -> None:
        self.store, self.seconds = store, seconds
        self.used = seconds is not None and store.has_pending_vectors()  # rows to clear
        self._shas: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._since = time.monotonic()

    def begin(self) -> None:
        """A group starts embedding: the clock starts, nothing is buffered."""
        self._shas, self._vectors, self._since = [], [], time.monotonic()

    def add(self, shas: Sequence[str], vectors: np.ndarray) -> None:
        if self.seconds is None:
            return
        self._shas.extend(shas)
        self._vectors.append(vectors.copy())
        if time.monotonic() - self._since >= self.seconds:
            self._save()

    def _save(self) -> None:
        try:
            self.store.save_pending_vectors(self._shas, np.concatenate(self._vectors))
            self.used = True
        except (OSError, RuntimeError, ValueError) as exc:
            log.warning("cannot checkpoint vectors (%s); a killed run will re-embed them", exc)
            self.seconds = None
        self.begin()


# ---------------------------------------------------------------------------------------------
# Turning one document into chunk rows


def chunk_rows(doc: Document, chunks: Sequence[Chunk], file_sha: str) -> list[dict[str, Any]]:
    did = doc_id(doc.path)
    rows = []
    for c in chunks:
        sha = text_sha(c.text)
        rows.append(
            {
                "id": chunk_id(doc.path, c.ordinal, sha),
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
            }
        )
    return rows


@dataclass
class Pending:
    """A file extracted and chunked, waiting for its vectors."""

    record: FileRecord
    rows: list[dict[str, Any]]


class Indexer:
    """Writes documents into one store with one encoder (None: lexical only)."""

    def __init__(
        self,
        store: Store,
        encoder: Encoder | None,
        chunker: Chunker,
        *,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        group_chunks: int = GROUP_CHUNKS,
        commit_seconds: float | None = None,
        checkpoint_seconds: float | None = None,
        progress: ProgressSink | None = None,
    ) -> None:
        """A group is committed once it holds `group_chunks` chunks or, when `commit_seconds`
        is set, once that long has passed since the last commit. `checkpoint_seconds` (default
        CHECKPOINT_SECONDS) paces the vector checkpoint while a group embeds."""
        self.store, self.encoder, self.chunker = store, encoder, chunker
        self.token_budget, self.group_chunks = token_budget, group_chunks
        self.commit_seconds = commit_seconds
        self.progress: ProgressSink = progress or NullProgress()
        self.report = IndexReport()
        self._pending: list[Pending] = []
        self._touched: list[FileUpdate] = []
        self._last_commit = time.monotonic()
        self.checkpoint = VectorCheckpoint(
            store,
            (CHECKPOINT_SECONDS if checkpoint_seconds is None else checkpoint_seconds)
            if encoder is not None
            else None,
        )

    def add(self, doc: Document, record: FileRecord) -> None:
        """Chunk `doc` and queue it; commits happen in groups (see `__init__`)."""
        chunks = self.chunker.chunk(doc)
        self.report.truncated += sum(c.truncated for c in chunks)
        record.n_chunks, record.title = len(chunks), doc.title
        self._pending.append(Pending(record, chunk_rows(doc, chunks, record.sha256)))
        self.progress.planned_chunks(len(chunks))
        if self._group_due():
            self.flush()

    def _group_due(self) -> bool:
        if sum(len(p.rows) for p in self._pending) >= self.group_chunks:
            return True
        waited = time.monotonic() - self._last_commit
        return self.commit_seconds is not None and waited >= self.commit_seconds

    def fail(self, record: FileRecord, reason: str, keep_old: bool) -> None:
        """Record a file that could not be read; keep its previous chunks if it had any."""
        record.status, record.reason = "failed", reason
        self.report.failed.append((record.path, reason))
        self.store.commit([FileUpdate(record, None if keep_old else [])])

    def touch(self, record: FileRecord) -> None:
        """Same bytes under a new mtime: update the record, keep the chunks."""
        self._touched.append(FileUpdate(record, None))
        self.progress.file_done(record.path)

    def flush(self) -> None:
        if self._touched:
            self.store.commit(self._touched)
            self._touched = []
        updates = self.take_updates()
        if not updates:
            return
        self.store.commit(updates)
        self._last_commit = time.monotonic()
        if self.checkpoint.used:  # committed vectors need no checkpoint any more
            self.store.clear_pending_vectors(r["text_sha"] for u in updates for r in u.rows or [])
        for update in updates:
            self.progress.file_done(update.record.path)

    def take_updates(self) -> list[FileUpdate]:
        """The queued files with their vectors (reused by text hash, or embedded), ready for one
        commit; the queue empties. `flush` commits them; the Ray engine writes Lance fragments."""
        if not self._pending:
            return []
        rows = [r for p in self._pending for r in p.rows]
        if self.encoder is not None:
            self._attach_vectors(rows)
        self.report.chunks_written += len(rows)
        updates = [FileUpdate(p.record, p.rows) for p in self._pending]
        self._pending = []
        return updates

    def _attach_vectors(self, rows: list[dict[str, Any]]) -> None:
        assert self.encoder is not None
        known = self.store.vectors_for(r["text_sha"] for r in rows)
        todo: dict[str, dict[str, Any]] = {}
        for row in rows:
            if row["text_sha"] not in known:
                todo.setdefault(row["text_sha"], row)
        fresh = list(todo.values())
        self.checkpoint.begin()
        vectors = embed_texts(
            self.encoder,
            [r["text"] for r in fresh],
            [r["n_tokens"] for r in fresh],
            self.token_budget,
            self.progress,
            on_batch=lambda batch, done: self.checkpoint.add(
                [fresh[i]["text_sha"] for i in batch], done
            ),
        )
        known.update({r["text_sha"]: v for r, v in zip(fresh, vectors, strict=True)})
        for row in rows:
            row["vector"] = known[row["text_sha"]].tolist()
        self.report.chunks_embedded += len(fresh)
        self.report.chunks_reused += len(rows) - len(fresh)
        self.report.tokens_embedded += sum(r["n_tokens"] for r in fresh)


# ---------------------------------------------------------------------------------------------
# Folders


@dataclass
class Plan:
    """What a run must do, from comparing the folder with the files table."""

    todo: list[tuple[Path, os.stat_result]]  # new, changed, or previously failed
    touched: list[tuple[Path, os.stat_result, FileRecord]]  # size/mtime moved, maybe same bytes
    unchanged: int
    deleted: list[str]


def plan(files: Iterable[Path], records: dict[str, FileRecord], root: Path) -> Plan:
    todo, touched, unchanged, seen = [], [], 0, set()
    for path in files:
        try:
            st = path.stat()
        except OSError:  # vanished since the walk: treated as deleted
            continue
        key = str(path.absolute())
        seen.add(key)
        rec = records.get(key)
        if rec is None or rec.status != "indexed":
            todo.append((path, st))
        elif rec.size == st.st_size and rec.mtime == st.st_mtime:
            unchanged += 1
        else:
            touched.append((path, st, rec))
    prefix = str(root.absolute())
    under_root = [p for p in records if p == prefix or p.startswith(prefix.rstrip(os.sep) + os.sep)]
    deleted = [p for p in under_root if p not in seen]
    return Plan(todo, touched, unchanged, deleted)


def default_limits() -> Limits:
    """Per-file limits from the settings (DOCSEARCH_MAX_FILE_MB, _MAX_TEXT_MB, _EXTRACT_SECONDS)."""
    from docsearch.config import Settings

    settings = Settings()
    return Limits(settings.max_file_mb, settings.max_text_mb, settings.extract_seconds)


def index_folder(
    root: Path,
    store: Store,
    encoder: Encoder | None,
    chunker: Chunker,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    group_chunks: int = GROUP_CHUNKS,
    progress: ProgressSink | None = None,
    limits: Limits | None = None,
) -> IndexReport:
    """Bring `store` in line with the files under `root`; see the module docstring.

    `limits`: what one file may cost (size, text, time); default: the settings'.
    """
    if not os.path.lexists(root):
        raise UsageError(f"no such file or folder: {root}")
    limits = limits or default_limits()
    started = time.perf_counter()
    records = store.file_records()
    store.ensure_search_indexes()  # a first build is searchable before its first commit
    skipped: list[tuple[str, str]] = []
    work = plan(walk(root, include, exclude, skipped), records, root)
    indexer = Indexer(
        store,
        encoder,
        chunker,
        token_budget=token_budget,
        group_chunks=group_chunks,
        commit_seconds=COMMIT_SECONDS,
        progress=progress,
    )
    report = indexer.report
    report.unchanged = work.unchanged
    report.warnings.extend((path, f"skipped: {why}") for path, why in skipped)
    indexer.progress.start(len(work.todo) + len(work.touched))
    deleted_shas = {records[p].sha256 for p in work.deleted}
    for path, st in work.todo:
        index_one(indexer, path, st, records.get(str(path.absolute())), deleted_shas, limits)
    for path, st, old in work.touched:
        index_one(indexer, path, st, old, deleted_shas, limits)
    indexer.flush()
    if work.deleted:
        store.commit([], deleted=work.deleted)
    report.deleted = len(work.deleted) - report.renamed
    store.refresh_indexes()
    report.seconds = time.perf_counter() - started
    return report


def _serving(old: FileRecord | None) -> bool:
    """The file has chunks in the index (indexed, or failed later while keeping its chunks)."""
    return old is not None and (old.status == "indexed" or old.n_chunks > 0)


def index_one(
    indexer: Indexer,
    path: Path,
    st: os.stat_result,
    old: FileRecord | None,
    deleted_shas: set[str],
    limits: Limits | None = None,
) -> None:
    """Read, fingerprint and classify one file (new, changed, renamed, touched, failed) and hand
    it to `indexer` (add, touch or fail). The Ray engine runs this in its extraction tasks.

    Whatever goes wrong while reading or extracting the file (a parser's exception, a limit
    passed, a timeout) fails this file only; the parsers' complaints become its warnings."""
    limits = limits or default_limits()
    key = str(path.absolute())
    record = FileRecord(key, "", st.st_size, st.st_mtime, "indexed", indexed_at=time.time())
    report = indexer.report
    try:
        data = read_limited(path, limits)  # refused unread when over a size limit
        record.sha256 = sha256_bytes(data)
        if old is not None and old.status == "indexed" and old.sha256 == record.sha256:
            report.touched += 1  # same bytes: only the mtime moves, chunks stay as they are
            indexer.touch(FileRecord(**{**old.__dict__, "size": st.st_size, "mtime": st.st_mtime}))
            return
        doc = extract_guarded(path, data, key, limits)
    except ExtractionError as exc:
        report.warnings.extend((key, w) for w in exc.warnings)
        if _serving(old):
            kept = FileRecord(**{**old.__dict__, "reason": ""})
            reason = str(exc).split("; still serving")[0]
            indexer.fail(kept, f"{reason}; still serving the previously indexed version", True)
        else:
            indexer.fail(record, str(exc), keep_old=False)
        indexer.progress.file_done(key)
        return
    if _serving(old):
        report.changed += 1
    elif record.sha256 in deleted_shas:
        report.renamed += 1
    else:
        report.new += 1
    if doc.warnings:
        record.reason = "; ".join(doc.warnings)
        report.warnings.extend((key, w) for w in doc.warnings)
    indexer.add(doc, record)
