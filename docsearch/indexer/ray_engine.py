"""The Ray engine: the local engine's stages, with the work spread over a Ray cluster.

`RayEngine.run` takes the plan the driver made (`service.index`: the same walk and diff) and:
1. Ray Data tasks read, hash, classify and extract each planned file with the local engine's own
   `pipeline.extract_file`, so each file's outcome is the local engine's by construction.
2. Ray Data actors, one per GPU (else CPU workers), chunk with the encoder's own tokenizer
   (`pipeline.chunk_file`), reuse stored vectors by text hash and embed the rest
   (`pipeline.embed_rows`), then write the rows as uncommitted fragments (`Writer.write_fragments`).
3. Driver: one `Writer.commit` adds every fragment and deletes the old rows of replaced and
   deleted files, one Lance version per table (a file is never half old, half new): chunks,
   documents, then the files table.
4. `Writer.refresh_indexes` with the cluster's workers: a first run's fragments are compacted and
   the full-text index built (the local engine's); once the table is large the workers build the
   vector index; later runs update the indexes incrementally.
The database may be a local folder or an object-store URI LanceDB understands (credentials from
the environment, forwarded to the workers). The folder being indexed must be readable at the same
path on every node (a shared mount), as Ray tasks read the files where they run.

Differences from the local engine: the run commits once, so a crash before the commit leaves the
index as it was (the next run starts over, where the local engine resumes group by group); a text
that occurs in two files handled by different actors in one run is embedded twice (same vector).
Not here: planning and locking (`service.py`), the stages (`pipeline.py`), Lance (`docsearch.store`),
which cluster and how many actors (`ray_cluster.py`).
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from docsearch.defaults import DEFAULT_TOKEN_BUDGET
from docsearch.encoders.base import Encoder, encoder_from_spec
from docsearch.errors import DocsearchError
from docsearch.indexer.chunk import ChunkerSettings
from docsearch.indexer.collection import make_chunker
from docsearch.indexer.extract import Limits
from docsearch.indexer.pipeline import (
    FileOutcome,
    IndexReport,
    Job,
    chunk_file,
    embed_rows,
    extract_file,
    failed_step,
)
from docsearch.indexer.plan import Plan
from docsearch.indexer.ray_cluster import EXTRACT_CPUS, Placement, placement, ray_session
from docsearch.store.database import Database
from docsearch.store.indexes import IndexBuild
from docsearch.store.reads import Store
from docsearch.store.tables import VECTOR_INDEX_MIN_ROWS
from docsearch.store.writes import Writer

log = logging.getLogger(__name__)

MAX_FILES_PER_BATCH = 64  # files per actor call (one Lance fragment each)
FORWARDED_ENV = ("DOCSEARCH_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "AWS_", "AZURE_", "GOOGLE_")


@dataclass
class RayEngine:
    """Runs a planned index run on Ray (see the module docstring).

    `address`: the cluster (default: RAY_ADDRESS, else a local Ray started for the run);
    `workers`: embedding actors (default: one per GPU, else half the CPUs); `vector_index`:
    options for the vector index lance-ray builds once the table has `vector_index_min_rows`.
    """

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float | None = None
    vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS
    vector_index: dict[str, Any] | None = None
    embeds_here = False  # the actors build their own encoders (a class attribute, not a field)

    def run(self, job: Job, work: Plan) -> None:
        started = time.perf_counter()
        with ray_session(self.address):
            import ray

            where = placement(ray.cluster_resources(), self.workers, self.cpus_per_worker)
            commit_results(job, work, _results(job, work, where) if work.items else ())
            log.info("ray: %d files committed at %.1f s", len(work.items), _since(started))
            build = IndexBuild(
                self.vector_index_min_rows, self.vector_index, where.workers, EXTRACT_CPUS
            )
            job.writer.refresh_indexes(build)
            log.info("ray: indexes up to date at %.1f s", _since(started))


def _since(start: float) -> float:
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------------
# Stage tasks: what crosses the wire (pickled)


def task_rows(work: Plan) -> list[dict[str, bytes]]:
    """One Ray Data row per planned file."""
    return [{"item": pickle.dumps(item)} for item in work.items]


def extract_task(
    row: dict[str, Any], limits: Limits, deleted_shas: frozenset[str]
) -> dict[str, bytes]:
    """Ray Data `map` function: a planned file -> `{"payload": its pickled FileOutcome}`."""
    outcome = extract_file(pickle.loads(row["item"]), limits, deleted_shas)
    return {"payload": pickle.dumps(outcome)}


@dataclass
class BatchResult:
    """What an actor hands back for a batch of files: their outcomes (without their text), its
    share of the counts, and the fragments it wrote (uncommitted)."""

    outcomes: list[FileOutcome]
    report: IndexReport
    fragments: list[Any] = field(default_factory=list)
    worker: str = ""  # node:pid of the actor, for the log


class EmbedWorker:
    """Chunks and embeds extracted files, and writes their rows as uncommitted fragments.

    Built once per actor: the encoder (on the actor's GPU when it has one), the chunker and a
    view of the store (stored vectors to reuse, fragments to write). `process` is plain Python
    (tests call it directly); `__call__` is the Ray Data batch interface around it.
    """

    def __init__(
        self,
        db_uri: str,
        name: str,
        encoder_spec: dict[str, Any] | None,
        chunker_settings: dict[str, int],
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        runtime: dict[str, Any] | None = None,
        version: int | None = None,
    ) -> None:
        # The version the driver writes: during a switch, the one being built, not the serving one.
        database = Database(db_uri)
        version = database.versions(name).active if version is None else version
        self.writer = Writer(Store(database, name, version))
        self.store = self.writer.store
        self.encoder: Encoder | None = (
            encoder_from_spec(encoder_spec, **(runtime or {})) if encoder_spec else None
        )
        self.chunker = make_chunker(self.encoder, ChunkerSettings(**chunker_settings))
        self.token_budget = token_budget

    @staticmethod
    def arguments(job: Job) -> dict[str, Any]:
        """The constructor's arguments for `job`'s collection (what each actor is built with)."""
        return {
            "db_uri": job.store.uri,
            "name": job.store.name,
            "version": job.store.version,
            "encoder_spec": job.store.meta.encoder,
            "chunker_settings": job.chunker.settings.as_dict(),
            "token_budget": job.token_budget,
            "runtime": _with_precision(job),
        }

    def process(self, outcomes: Iterable[FileOutcome]) -> BatchResult:
        """Chunk, embed and write a batch; if that fails, each file alone, so that a fault in
        one file fails that file only (its fragments are never committed)."""
        batch = list(outcomes)
        try:
            return self._process(batch)
        except Exception:  # noqa: BLE001 - find the file at fault
            log.debug("a batch of %d files failed; one by one", len(batch), exc_info=True)
        whole = BatchResult([], IndexReport(), [], f"{_node_id()}:{os.getpid()}")
        for outcome in batch:
            try:
                one = self._process([outcome])
            except Exception as exc:  # noqa: BLE001
                one = BatchResult(
                    [failed_step(outcome, exc, "chunking and embedding")], IndexReport()
                )
            whole.outcomes += one.outcomes
            whole.report.merge(one.report)
            whole.fragments += one.fragments
        return whole

    def _process(self, batch: list[FileOutcome]) -> BatchResult:
        part = IndexReport()
        rows = [r for o in batch if o.doc is not None for r in chunk_file(o, self.chunker, part)]
        if self.encoder is not None:
            embed_rows(rows, self.encoder, self.store, part, self.token_budget)
        part.chunks_written = len(rows)
        fragments = self.writer.write_fragments(rows)
        sent = [replace(o, doc=None) for o in batch]  # the driver needs the records, not the text
        return BatchResult(sent, part, fragments, f"{_node_id()}:{os.getpid()}")

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        outcomes = [pickle.loads(b) for b in batch.column("payload").to_pylist()]
        result = pickle.dumps(self.process(outcomes))
        return pa.table({"payload": pa.array([result], type=pa.binary())})


def _with_precision(job: Job) -> dict[str, Any]:
    """The job's run-time options, with the precision the driver's encoder settled on (an
    "auto" choice is timed per process and thread count, so actors left to choose could embed
    one collection in both bf16 and fp32; the spec leaves that choice out)."""
    precision = getattr(job.encoder, "precision", None)
    if precision is None or "precision" in job.runtime:
        return job.runtime
    return {**job.runtime, "precision": precision}


def _node_id() -> str:
    """The Ray node this runs on ("local" outside Ray: tests call `process` directly)."""
    import ray

    if not ray.is_initialized():  # asking the runtime context would start or join a cluster
        return "local"
    return str(ray.get_runtime_context().get_node_id())[:8]


def commit_results(job: Job, work: Plan, results: Iterable[BatchResult]) -> None:
    """Count the actors' results as they arrive, then commit the whole run in one step."""
    updates, fragments = [], []
    for result in results:
        log.debug("batch of %d files from %s", len(result.outcomes), result.worker)
        job.report.merge(result.report)
        fragments += result.fragments
        job.progress.planned_chunks(result.report.chunks_written)
        job.progress.embedded(result.report.chunks_embedded, result.report.tokens_embedded)
        for outcome in result.outcomes:
            job.report.count(outcome)
            updates.append(outcome.update())
            job.progress.file_done(outcome.record.path)
    job.writer.commit(updates, work.deleted, fragments)


# ---------------------------------------------------------------------------------------------
# The Ray side: the dataset pipeline (the session and placement: ray_cluster.py)


def worker_env() -> dict[str, str]:
    """Environment the workers need to resolve models and storage as the driver does."""
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


def run_pipeline(job: Job, work: Plan, where: Placement) -> Iterator[BatchResult]:
    """The extract tasks and embedding actors on Ray Data, streaming: results arrive as actors
    finish batches."""
    import pyarrow as pa
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the caller's ProgressSink reports progress
    forwarded = worker_env()
    env = {"env_vars": forwarded} if forwarded else None
    rows = task_rows(work)
    per_batch = max(1, min(MAX_FILES_PER_BATCH, -(-len(rows) // (where.workers * 4))))
    files = ray.data.from_items(rows, override_num_blocks=min(len(rows), 256))
    extracted = files.map(
        functools.partial(extract_task, limits=job.limits, deleted_shas=work.deleted_shas),
        num_cpus=EXTRACT_CPUS,
        runtime_env=env,
    )
    results = extracted.map_batches(
        EmbedWorker,
        fn_constructor_kwargs=EmbedWorker.arguments(job),
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


def _results(job: Job, work: Plan, where: Placement) -> Iterator[BatchResult]:
    try:
        yield from run_pipeline(job, work, where)
    except Exception as exc:
        domain = _domain_error(exc)
        if domain is not None:
            raise domain from None  # one line at the CLI, not a Ray traceback
        raise


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
