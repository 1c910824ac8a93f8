"""The one way to index: a folder (or in-memory documents) into a collection, and the report.

`index(path, ...)` is what `docsearch index`, the UI's Index tab, benchmarks and tests call. It
takes the collection's writer lock (a second writer is refused with a message, whichever door it
came through), prepares the collection (`collection.prepare`: its encoder and chunker, created or
checked), plans the run (`plan.plan`), hands the plan to an engine (`pipeline.LocalEngine` or
`ray_engine.RayEngine`) and returns the `IndexReport`. A run that switches the collection to
another encoder or chunker (`switch=True`, or an unfinished switch resumed) writes the new version
and swaps it in when it ends without error (`finish_switch`). `writing(...)` is the lock and the
preparation alone, for callers that also need the collection's encoder; `index_documents` writes
documents that are not files (an evaluation corpus) through the local engine's write stage.
Settings are resolved by the caller (the edge) and passed in: nothing here or below reads the environment.
Not here: the stages themselves (`pipeline.py`), the command line and the UI (`docsearch.app`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docsearch.errors import UsageError
from docsearch.indexer.collection import prepare
from docsearch.indexer.extract import Document, Limits
from docsearch.indexer.ocr import OcrOptions
from docsearch.indexer.pipeline import (
    NEW,
    Engine,
    FileOutcome,
    IndexReport,
    Job,
    LocalEngine,
    NullProgress,
    ProgressSink,
    write_locally,
)
from docsearch.indexer.plan import Plan, plan, sha256_bytes
from docsearch.store.database import Database
from docsearch.store.reads import Store
from docsearch.store.schema import FileRecord, collection_name_for
from docsearch.store.versions import Refused, Swap

if TYPE_CHECKING:
    from docsearch.config import Settings

log = logging.getLogger(__name__)


def collection_for(path: Path) -> str:
    """The collection a folder (or file) is indexed into when none is named: its name."""
    root = path.resolve()
    return collection_name_for(root.name if root.is_dir() else root.stem)


def index(
    path: Path | str,
    *,
    settings: Settings,
    collection: str | None = None,
    db: str | None = None,
    encoder: str | None = None,
    options: Mapping[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    engine: Engine | None = None,
    runtime: Mapping[str, Any] | None = None,
    progress: ProgressSink | None = None,
    switch: bool = False,
) -> IndexReport:
    """Bring `collection` (default: named after the folder) in line with the files under `path`.

    `encoder` names the encoder of a new collection (None: the settings' default, LEXICAL_ONLY:
    none); an existing collection keeps its own and refuses another, unless `switch`: the run
    then builds the collection again beside the serving version, with `encoder` (default: its
    own) and the settings' chunking, and swaps it in at the end (see `writing`). `options` are the encoder's
    (the settings' model is added for the default encoder); `runtime` its run-time options
    (device...). `engine`: the local engine unless given. A run with nothing to do only brings
    the indexes up to date (no engine, no cluster).
    """
    root = Path(path)
    if not os.path.lexists(root):
        raise UsageError(f"no such file or folder: {root}")
    root = root.resolve()
    engine = engine or LocalEngine()
    name = collection or collection_for(root)
    with writing(
        name,
        settings=settings,
        db=db,
        encoder=encoder,
        options=options,
        runtime=runtime,
        load_here=engine.embeds_here,
        source=str(root),
        progress=progress,
        switch=switch,
    ) as job:
        started = time.perf_counter()
        job.writer.ensure_search_indexes()  # a first build is searchable before its first commit
        work = planned(job.store, root, include, exclude)
        report = job.report
        report.inference = str(getattr(job.encoder, "engine", "") or "")
        report.unchanged = work.unchanged
        report.warnings.extend((skipped, f"skipped: {why}") for skipped, why in work.skipped)
        job.progress.start(len(work.items))
        if work.items or work.deleted:
            engine.run(job, work)
        else:
            job.writer.refresh_indexes()
        report.deleted = len(work.deleted) - report.renamed
        report.seconds = time.perf_counter() - started
    return report


def planned(store: Store, root: Path, include: Sequence[str], exclude: Sequence[str]) -> Plan:
    """The run's plan, with the repair of what an interrupted run left half written (its paths
    are pending in the store, hidden from search, or, from an earlier docsearch, have documents
    without records): each such file still there is done again as if new, and the rows and
    record of each one that is not are deleted."""
    records = store.file_records()
    pending = set(store.pending_paths()) | set(store.unrecorded_paths())
    work = plan(root, {p: r for p, r in records.items() if p not in pending}, include, exclude)
    if pending:
        redone = {item.path for item in work.items}
        work.deleted.extend(sorted(pending - redone))
        log.info("repairing %d files an interrupted run left half written", len(pending))
    return work


@contextmanager
def writing(
    collection: str,
    *,
    settings: Settings,
    db: str | None = None,
    encoder: str | None = None,
    options: Mapping[str, Any] | None = None,
    runtime: Mapping[str, Any] | None = None,
    load_here: bool = True,
    source: str = "",
    progress: ProgressSink | None = None,
    switch: bool = False,
) -> Iterator[Job]:
    """Hold `collection`'s writer lock and prepare it; the `Job` a run works with.

    `load_here=False` loads the encoder without `runtime` (an engine whose workers embed builds
    its own encoders with it, on their own devices: here it only identifies the collection).
    When the job's store is a version a switch builds (`switch`, or an unfinished switch
    resumed), a run that ends without an error swaps it in (`finish_switch`).
    """
    database = Database(db or settings.db)
    runtime = dict(runtime or {})
    with database.writer_lock(collection):
        prepared = prepare(
            database,
            collection,
            encoder_name=encoder,
            options=options or {},
            settings=settings,
            source=source,
            runtime=runtime if load_here else None,
            switch=switch,
        )
        job = Job(
            prepared.writer,
            prepared.encoder,
            prepared.chunker,
            limits=limits_of(settings),
            token_budget=settings.token_budget,
            group_chunks=settings.commit_chunks,
            runtime=runtime,
            progress=progress or NullProgress(),
        )
        yield job
        if database.versions(collection).building == job.store.version:
            finish_switch(job)


def finish_switch(job: Job) -> bool:
    """Make the version `job` built serve searches, unless a file the serving version has
    indexed failed in it (swapping would lose that file from search; the run reports it and a
    rerun retries it). Whether it swapped."""
    built, name = job.store, job.store.name
    database = built.database
    serving = Store(database, name, database.versions(name).active)
    kept = {p for p, r in serving.file_records().items() if r.status == "indexed"}
    lost = sorted(p for p, r in built.file_records().items() if r.status == "failed" and p in kept)
    if lost:
        why = "indexed by the serving version but failed in the new one: the switch waits for it"
        job.report.warnings.extend((path, why) for path in lost)
        return False
    try:
        before, _ = database.move(name, Swap(built.version))
    except Refused:
        raise UsageError(f"version {built.version} of {name!r} is not being built") from None
    retired = before.pointer.active
    log.info("collection %r: version %d replaced version %d", name, built.version, retired)
    return True


def limits_of(settings: Settings) -> Limits:
    """What one file may cost, and how its scanned pages are read (OCR'd text cached per page)."""
    ocr = OcrOptions(settings.ocr_engine, settings.ocr_lang, settings.ocr_cache)
    return Limits(
        settings.max_file_mb,
        settings.max_text_mb,
        settings.extract_seconds,
        settings.extract_memory_mb,
        ocr,
    )


def index_documents(job: Job, documents: Sequence[Document]) -> IndexReport:
    """Write `documents` (each one's path is its id) into the job's collection and index them.

    For text that is not in files (an evaluation corpus): every document is chunked, embedded
    (stored vectors reused) and written as the local engine writes an extracted file.
    """
    job.progress.start(len(documents))
    write_locally(job, (_as_file(doc) for doc in documents))
    return job.report


def _as_file(doc: Document) -> FileOutcome:
    """A document that is not a file, as the extract stage would have handed it on."""
    text = doc.text
    sha = sha256_bytes(text.encode("utf-8", "surrogatepass"))
    return FileOutcome(FileRecord(doc.path, sha, len(text), 0.0, "indexed"), NEW, doc)
