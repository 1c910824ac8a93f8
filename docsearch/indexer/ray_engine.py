"""Indexing on a Ray cluster: the local engine's semantics, with the work spread over machines.

One run, `index_folder_ray(...)`:
1. Driver: walk the folder and diff it against the `files` table (`pipeline.walk`, `pipeline.plan`:
   the same fingerprints as the local engine).
2. Ray Data tasks read, hash and extract each file to do; `pipeline.index_one` classifies it
   (new, changed, renamed, touched, failed), so the outcome is the local engine's by construction.
3. Ray Data actors, one per GPU (else CPU workers), chunk with the encoder's own tokenizer, reuse
   stored vectors by text hash and embed the rest (`pipeline.Indexer`), then write the rows as Lance
   fragments into the chunks table's folder (`lance_ray.LanceFragmentWriter`) without committing.
4. Driver: one Lance commit adds every new fragment and deletes the old rows of replaced and
   deleted files (a file is never half old, half new), then the `files` table is updated. The
   first run compacts the fragments with lance-ray, builds the full-text and scalar indexes
   (on the driver by default, see `build_indexes`) and, once the table is large, a vector index
   with lance-ray's distributed builder; later runs update them incrementally (`optimize`).
The database may be a local folder or an object-store URI LanceDB understands (credentials from
the environment, forwarded to the workers). The folder being indexed must be readable at the same
path on every node (a shared mount), as Ray tasks read the files where they run.

Differences from the local engine: the run commits once, so a crash before the commit leaves the
index as it was (the next run starts over, where the local engine resumes group by group); a text
that occurs in two files handled by different actors in one run is embedded twice (same vector).
Not here: the command line, the embedding itself (`encoders/`), the store's schema (`store.py`).
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from docsearch.encoders.base import Encoder, encoder_from_spec
from docsearch.errors import DocsearchError, UsageError
from docsearch.indexer.chunk import ChunkerSettings
from docsearch.indexer.collection import make_chunker
from docsearch.indexer.extract import Document
from docsearch.indexer.pipeline import (
    DEFAULT_TOKEN_BUDGET,
    Indexer,
    IndexReport,
    NullProgress,
    Plan,
    ProgressSink,
    index_one,
    plan,
    walk,
)
from docsearch.indexer.store import (
    VECTOR_INDEX_MIN_ROWS,
    FileRecord,
    FileUpdate,
    Store,
    sql_in,
    table_uri,
    vector_index_params,
)

log = logging.getLogger(__name__)

EXTRACT_CPUS = 0.25  # per read+extract task: mostly I/O and pure-Python parsing
MAX_FILES_PER_BATCH = 64  # files per actor call (one Lance fragment each)
FORWARDED_ENV = ("DOCSEARCH_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "AWS_", "AZURE_", "GOOGLE_")
FTS_INDEX, PATH_INDEX, SHA_INDEX, VECTOR_INDEX = (
    "text_idx",
    "path_idx",
    "text_sha_idx",
    "vector_idx",
)


# ---------------------------------------------------------------------------------------------
# What crosses the wire (pickled): one file after extraction, one actor batch after embedding


@dataclass
class FileOutcome:
    """A file after read, fingerprint and extraction, as `pipeline.index_one` decided."""

    record: FileRecord
    report: IndexReport  # this file's counts: new/changed/renamed/touched, failure, warnings
    doc: Document | None = None  # to chunk and embed
    replace: bool = False  # drop the file's old chunks (it failed and had nothing to keep)


@dataclass
class BatchResult:
    """What an actor hands back for a batch of files: records, counts and uncommitted fragments."""

    updates: list[tuple[FileRecord, bool]]  # (record, its old chunks are replaced)
    report: IndexReport
    fragments: list[bytes] = field(default_factory=list)  # pickled lance FragmentMetadata
    worker: str = ""  # node:pid of the actor, for the log


def merge_reports(into: IndexReport, part: IndexReport) -> None:
    """Add `part`'s counts and lists to `into` (seconds excepted)."""
    for f in fields(IndexReport):
        if f.name == "seconds":
            continue
        value = getattr(part, f.name)
        if isinstance(value, list):
            getattr(into, f.name).extend(value)
        else:
            setattr(into, f.name, getattr(into, f.name) + value)


# ---------------------------------------------------------------------------------------------
# Stage 2: read and extract (a Ray task per file)


class _Recorder(Indexer):
    """Stands in for `Indexer` while `pipeline.index_one` classifies one file in a Ray task:
    it keeps what the local engine would have queued or committed, and commits nothing."""

    def __init__(self) -> None:  # no store, encoder or chunker: nothing is written here
        self.report = IndexReport()
        self.progress = NullProgress()
        self.outcome: FileOutcome | None = None

    def add(self, doc: Document, record: FileRecord) -> None:
        self.outcome = FileOutcome(record, self.report, doc=doc)

    def fail(self, record: FileRecord, reason: str, keep_old: bool) -> None:
        record.status, record.reason = "failed", reason  # as Indexer.fail
        self.report.failed.append((record.path, reason))
        self.outcome = FileOutcome(record, self.report, replace=not keep_old)

    def touch(self, record: FileRecord) -> None:
        self.outcome = FileOutcome(record, self.report)


def task_rows(work: Plan, records: dict[str, FileRecord]) -> list[dict[str, Any]]:
    """One row per file to read: absolute path, planned size/mtime, its old record (pickled)."""
    rows = []
    for path, st in work.todo:
        old = records.get(str(path.absolute()))
        rows.append(_task_row(path, st.st_size, st.st_mtime, old))
    for path, st, old in work.touched:
        rows.append(_task_row(path, st.st_size, st.st_mtime, old))
    return rows


def _task_row(path: Path, size: int, mtime: float, old: FileRecord | None) -> dict[str, Any]:
    return {
        "path": str(path.absolute()),
        "size": size,
        "mtime": mtime,
        "old": pickle.dumps(old) if old is not None else b"",
    }


def extract_file(row: dict[str, Any], deleted_shas: frozenset[str]) -> dict[str, Any]:
    """Ray Data `map` function: a task row -> `{"payload": pickled FileOutcome}`."""
    size, mtime = int(row["size"]), float(row["mtime"])
    st = os.stat_result((0, 0, 0, 0, 0, 0, size, mtime, mtime, mtime))  # only size/mtime are read
    old = pickle.loads(row["old"]) if row["old"] else None
    recorder = _Recorder()
    index_one(recorder, Path(row["path"]), st, old, set(deleted_shas))
    assert recorder.outcome is not None  # index_one always adds, fails or touches
    return {"payload": pickle.dumps(recorder.outcome)}


# ---------------------------------------------------------------------------------------------
# Stage 3: chunk, embed, write fragments (a Ray actor per GPU or CPU worker)


class EmbedWorker:
    """Chunks and embeds extracted files, and writes their rows as uncommitted Lance fragments.

    Built once per actor: the encoder (on the actor's GPU when it has one), the chunker and a
    read-only view of the store for vector reuse. `process` is plain Python (tests call it
    directly); `__call__` is the Ray Data batch interface around it.
    """

    def __init__(
        self,
        db_uri: str,
        name: str,
        encoder_spec: dict[str, Any] | None,
        chunker_settings: dict[str, int],
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        runtime: dict[str, Any] | None = None,
    ) -> None:
        import lance
        from lance_ray import LanceFragmentWriter

        self.store = Store(None, name, uri=db_uri)  # reads only: vectors to reuse
        self.encoder: Encoder | None = (
            encoder_from_spec(encoder_spec, **(runtime or {})) if encoder_spec else None
        )
        self.chunker = make_chunker(self.encoder, ChunkerSettings(**chunker_settings))
        self.token_budget = token_budget
        dataset = lance.dataset(table_uri(db_uri, f"{name}__chunks"))
        self.schema = dataset.schema
        self.writer = LanceFragmentWriter(
            dataset.uri, schema=self.schema, data_storage_version=dataset.data_storage_version
        )

    def process(self, outcomes: Sequence[FileOutcome]) -> BatchResult:
        indexer = Indexer(
            self.store,
            self.encoder,
            self.chunker,
            token_budget=self.token_budget,
            group_chunks=sys.maxsize,  # never flush: this actor writes fragments, not commits
        )
        updates: list[tuple[FileRecord, bool]] = []
        for outcome in outcomes:
            merge_reports(indexer.report, outcome.report)
            if outcome.doc is not None:
                indexer.add(outcome.doc, outcome.record)  # sets n_chunks and title
                updates.append((outcome.record, True))
            else:
                updates.append((outcome.record, outcome.replace))
        rows = [row for update in indexer.take_updates() for row in update.rows or []]
        worker = f"{_node_id()}:{os.getpid()}"
        return BatchResult(updates, indexer.report, self._write(rows), worker)

    def _write(self, rows: list[dict[str, Any]]) -> list[bytes]:
        if not rows:
            return []
        import pyarrow as pa

        written = self.writer(pa.Table.from_pylist(rows, schema=self.schema))
        return list(written.column("fragment").to_pylist())

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        outcomes = [pickle.loads(b) for b in batch.column("payload").to_pylist()]
        result = pickle.dumps(self.process(outcomes))
        return pa.table({"payload": pa.array([result], type=pa.binary())})


def _node_id() -> str:
    """The Ray node this runs on ("local" outside Ray: tests call `process` directly)."""
    import ray

    if not ray.is_initialized():  # asking the runtime context would start or join a cluster
        return "local"
    return str(ray.get_runtime_context().get_node_id())[:8]


# ---------------------------------------------------------------------------------------------
# Stage 4: one commit, then the indexes


def commit_run(
    store: Store,
    updates: Sequence[tuple[FileRecord, bool]],
    fragments: Sequence[bytes],
    deleted: Sequence[str],
) -> None:
    """Commit a run: chunks first (one Lance commit), then the files table (as `Store.commit`).

    A crash between the two leaves records that look stale; the next run redoes those files and
    finds their vectors stored, so the end state equals a clean build (the local engine's rule).
    """
    gone = sorted({record.path for record, replace in updates if replace} | set(deleted))
    if fragments or gone:
        commit_chunks(store, [pickle.loads(f) for f in fragments], gone)
    if updates:
        store.commit([FileUpdate(record, None) for record, _ in updates])
    if deleted:
        store.files_table.delete(sql_in("path", deleted))


def commit_chunks(store: Store, new_fragments: list[Any], gone_paths: Sequence[str]) -> None:
    """Add `new_fragments` and delete every older row whose path is in `gone_paths`, atomically."""
    import lance

    dataset = lance.dataset(table_uri(store.uri, f"{store.name}__chunks"))
    removed, updated = [], []
    if gone_paths:
        where = sql_in("path", gone_paths)
        for fragment_id in _fragments_matching(dataset, where):
            fragment = dataset.get_fragment(fragment_id)
            assert fragment is not None  # the id came from this dataset version
            kept = fragment.delete(where)
            if kept is None:
                removed.append(fragment_id)
            else:
                updated.append(kept)
    operation = lance.LanceOperation.Update(
        removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new_fragments
    )
    lance.LanceDataset.commit(dataset, operation, read_version=dataset.version)
    store.chunks.checkout_latest()


def _fragments_matching(dataset: Any, where: str) -> list[int]:
    """Ids of the fragments holding rows that match `where` (uses the path index when built)."""
    found = dataset.to_table(columns=[], filter=where, with_row_address=True)
    addresses = found.column("_rowaddr").to_pylist()
    return sorted({int(a) >> 32 for a in addresses})  # row address = fragment id << 32 | offset


def fts_options() -> dict[str, Any]:
    """The full-text index settings `Store.refresh_indexes` uses (LanceDB's `FTS` defaults,
    with positions for phrase queries), spelled out for lance's own index builder."""
    from dataclasses import asdict

    from lancedb.index import FTS

    config = asdict(FTS(with_position=True))
    options = {k: v for k, v in config.items() if v is not None and not k.startswith("ngram")}
    for key in ("prefix_only", "num_workers", "memory_limit", "document_granularity"):
        options.pop(key, None)  # not tokenizer settings, or not accepted by the segment builder
    return options


def needs_index_build(store: Store) -> bool:
    """The table has rows but no full-text index yet (a first run, or one that crashed)."""
    names = {cfg.name for cfg in store.chunks.list_indices()}
    return FTS_INDEX not in names and store.count_chunks() > 0


def _distributed_scalar_indexes(dataset: Any, workers: int, remote: dict[str, float]) -> None:
    """The FTS and BTree indexes `Store.refresh_indexes` makes, built by lance-ray workers."""
    import lance_ray

    lance_ray.create_scalar_index(
        dataset,
        column="text",
        index_type="INVERTED",
        name=FTS_INDEX,
        num_workers=workers,
        ray_remote_args=remote,
        **fts_options(),
    )
    for column, name in (("path", PATH_INDEX), ("text_sha", SHA_INDEX)):
        lance_ray.create_scalar_index(
            dataset.uri,
            column=column,
            index_type="BTREE",
            name=name,
            num_workers=workers,
            ray_remote_args=remote,
        )


def build_indexes(
    store: Store,
    workers: int,
    vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS,
    vector_index: dict[str, Any] | None = None,
    distributed_fts: bool = False,
) -> None:
    """Bring the indexes up to date after a run's commit.

    First run: lance-ray compacts the fragments the actors wrote (in parallel). The full-text
    index is then built by `Store.refresh_indexes` on the driver, because lance-ray's distributed
    INVERTED build (pylance 14, lance-ray 0.5) gives BM25 scores up to ~1% off a single build
    on the sample corpus, which reorders near ties; `distributed_fts=True` takes that trade for
    very large tables. The vector index `Store.refresh_indexes` would build, with lance-ray's
    distributed builder, once the table has `vector_index_min_rows` rows. Later runs: `Store.refresh_indexes` (incremental `optimize`).
    """
    import lance
    import lance_ray

    rows = store.count_chunks()
    if rows == 0:
        return
    names = {cfg.name for cfg in store.chunks.list_indices()}
    remote = {"num_cpus": EXTRACT_CPUS}
    uri = table_uri(store.uri, f"{store.name}__chunks")
    if FTS_INDEX not in names:
        lance_ray.compact_files(uri, num_workers=workers, ray_remote_args=remote)
        if distributed_fts:
            _distributed_scalar_indexes(lance.dataset(uri), workers, remote)
        store.chunks.checkout_latest()
    if store.has_vectors and rows >= vector_index_min_rows and VECTOR_INDEX not in names:
        options = vector_index or vector_index_params(rows)
        lance_ray.create_index(
            uri,
            column="vector",
            name=VECTOR_INDEX,
            num_workers=workers,
            ray_remote_args=remote,
            **options,
        )
        store.chunks.checkout_latest()
    store.refresh_indexes()


# ---------------------------------------------------------------------------------------------
# The Ray side: session, resources, the dataset pipeline


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Connect to `address` (or RAY_ADDRESS, or start a local Ray); shut down only what we started."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            "the Ray engine needs Ray and lance-ray: pip install 'docsearch[ray]'"
        ) from exc
    if ray.is_initialized():
        yield
        return
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
        raise UsageError(
            f"cannot start or reach Ray at {where} ({exc}); start a cluster with "
            "`ray start --head` or leave --address out"
        ) from exc
    try:
        yield
    finally:
        ray.shutdown()


@dataclass
class Placement:
    """How many embedding actors, and the Ray resources of each."""

    workers: int
    num_cpus: float
    num_gpus: float = 0.0


def placement(
    cluster: dict[str, float], workers: int | None, cpus_per_worker: float | None = None
) -> Placement:
    """One actor per GPU when the cluster has GPUs; else CPU workers (default: half the CPUs),
    each leaving room for the read+extract tasks so the two stages run side by side."""
    gpus, cpus = int(cluster.get("GPU", 0)), float(cluster.get("CPU", 1))
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    if gpus:
        n = workers or gpus
        return Placement(n, cpus_per_worker or 1.0, min(1.0, gpus / n))
    n = workers or max(1, int(cpus // 2))
    share = cpus_per_worker or min(1.0, max(0.1, (cpus - EXTRACT_CPUS * n) / n))
    return Placement(n, share)


def worker_env() -> dict[str, str]:
    """Environment the workers need to resolve models and storage as the driver does."""
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


def run_pipeline(
    rows: list[dict[str, Any]],
    deleted_shas: frozenset[str],
    worker_args: dict[str, Any],
    where: Placement,
) -> Iterator[BatchResult]:
    """Stages 2 and 3 on Ray Data, streaming: results arrive as actors finish batches."""
    import pyarrow as pa
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the caller's ProgressSink reports progress
    forwarded = worker_env()
    env = {"env_vars": forwarded} if forwarded else None
    per_batch = max(1, min(MAX_FILES_PER_BATCH, -(-len(rows) // (where.workers * 4))))
    files = ray.data.from_items(rows, override_num_blocks=min(len(rows), 256))
    extracted = files.map(
        functools.partial(extract_file, deleted_shas=deleted_shas),
        num_cpus=EXTRACT_CPUS,
        runtime_env=env,
    )
    results = extracted.map_batches(
        EmbedWorker,
        fn_constructor_kwargs=worker_args,
        batch_size=per_batch,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=where.workers),
        runtime_env=env,
        num_cpus=where.num_cpus,
        num_gpus=where.num_gpus or None,
    )
    for batch in results.iter_batches(batch_size=None, batch_format="pyarrow"):
        assert isinstance(batch, pa.Table)
        for payload in batch.column("payload").to_pylist():
            yield pickle.loads(payload)


def _domain_error(exc: BaseException) -> DocsearchError | None:
    """The DocsearchError a worker raised, if any, from inside Ray's exception wrappers."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, DocsearchError):
            return current
        todo += [current.__cause__, current.__context__, getattr(current, "cause", None)]
    return None


# ---------------------------------------------------------------------------------------------
# The engine


def index_folder_ray(
    root: Path,
    store: Store,
    encoder_spec: dict[str, Any] | None,
    chunker_settings: ChunkerSettings | dict[str, int],
    *,
    address: str | None = None,
    workers: int | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    runtime: dict[str, Any] | None = None,
    cpus_per_worker: float | None = None,
    vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS,
    vector_index: dict[str, Any] | None = None,
    distributed_fts: bool = False,
    progress: ProgressSink | None = None,
) -> IndexReport:
    """Bring `store` in line with the files under `root` on a Ray cluster; see the module doc.

    `encoder_spec` is the collection's (`store.meta.encoder`, None for lexical only) and
    `runtime` adds run-time encoder options (batch size...; the device is each actor's own).
    `workers`: embedding actors (default: one per GPU, else half the CPUs); `vector_index`:
    options for `lance_ray.create_index` once the table has `vector_index_min_rows` rows;
    `distributed_fts`: see `build_indexes`. A run with nothing to do returns without touching Ray.
    """
    if not root.exists():
        raise UsageError(f"no such file or folder: {root}")
    started = time.perf_counter()
    sink = progress or NullProgress()
    settings = (
        chunker_settings if isinstance(chunker_settings, dict) else chunker_settings.as_dict()
    )
    records = store.file_records()
    work = plan(walk(root, include, exclude), records, root)
    rows = task_rows(work, records)
    sink.start(len(rows))
    report = IndexReport(unchanged=work.unchanged)
    if not rows and not work.deleted and not needs_index_build(store):
        report.seconds = time.perf_counter() - started
        return report  # nothing changed: no cluster needed
    updates: list[tuple[FileRecord, bool]] = []
    fragments: list[bytes] = []
    with ray_session(address):
        import ray

        where = placement(ray.cluster_resources(), workers, cpus_per_worker)
        if rows:
            args = {
                "db_uri": store.uri,
                "name": store.name,
                "encoder_spec": encoder_spec,
                "chunker_settings": settings,
                "token_budget": token_budget,
                "runtime": runtime,
            }
            deleted_shas = frozenset(records[p].sha256 for p in work.deleted)
            for result in _results(rows, deleted_shas, args, where):
                _collect(result, report, updates, fragments, sink)
        log.info("ray: %d files extracted and embedded in %.1f s", len(rows), _since(started))
        commit_run(store, updates, fragments, work.deleted)
        report.deleted = len(work.deleted) - report.renamed
        log.info("ray: committed %d fragments at %.1f s", len(fragments), _since(started))
        build_indexes(store, where.workers, vector_index_min_rows, vector_index, distributed_fts)
        log.info("ray: indexes up to date at %.1f s", _since(started))
    report.seconds = time.perf_counter() - started
    return report


def _since(start: float) -> float:
    return time.perf_counter() - start


def _results(
    rows: list[dict[str, Any]], deleted_shas: frozenset[str], args: dict[str, Any], where: Placement
) -> Iterator[BatchResult]:
    try:
        yield from run_pipeline(rows, deleted_shas, args, where)
    except Exception as exc:
        domain = _domain_error(exc)
        if domain is not None:
            raise domain from None  # one line at the CLI, not a Ray traceback
        raise


def _collect(
    result: BatchResult,
    report: IndexReport,
    updates: list[tuple[FileRecord, bool]],
    fragments: list[bytes],
    sink: ProgressSink,
) -> None:
    log.debug("batch of %d files from %s", len(result.updates), result.worker)
    merge_reports(report, result.report)
    updates.extend(result.updates)
    fragments.extend(result.fragments)
    sink.planned_chunks(result.report.chunks_written)
    sink.embedded(result.report.chunks_embedded, result.report.tokens_embedded)
    for record, _ in result.updates:
        sink.file_done(record.path)
