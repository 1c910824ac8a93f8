"""`docsearch index`: bring a collection in line with a folder, and report what changed.

Resolves the settings once (options over environment, files and defaults), picks the engine and
hands both to the indexing service (`docsearch.indexer.service`); the report goes to stderr.
Not here: the indexing itself (`docsearch.indexer`), progress display (`progress.py`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from docsearch.app.common import (
    CollectionOption,
    DbOption,
    EncoderOptionsOption,
    MaxTokensOption,
    ModelOption,
    NewEncoderOption,
    encoder_options,
    handle_errors,
)
from docsearch.errors import UsageError

if TYPE_CHECKING:
    from docsearch.indexer.pipeline import Engine, IndexReport
    from docsearch.store.versions import Versions


@handle_errors
def index(
    path: Annotated[Path, typer.Argument(help="Folder (or file) to index.", show_default=False)],
    collection: CollectionOption = None,
    encoder: NewEncoderOption = None,
    model: ModelOption = None,
    adapter: Annotated[
        str | None, typer.Option("--adapter", help="Fine-tuned adapter folder.")
    ] = None,
    option: EncoderOptionsOption = None,
    include: Annotated[
        list[str] | None, typer.Option(help="Only files matching this glob.")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(help="Skip files matching this glob.")
    ] = None,
    max_tokens: MaxTokensOption = None,
    overlap: Annotated[
        int | None, typer.Option(help="Tokens shared by neighbouring chunks.")
    ] = None,
    engine: Annotated[
        str, typer.Option(help="local (this process) or ray (a Ray cluster, see docs/scale.md).")
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(help="Ray cluster for --engine ray (default: RAY_ADDRESS, else a local Ray)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Embedding workers for --engine ray (default: one per GPU, else CPUs/2)."
        ),
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="cpu, cuda or cuda:N (default: cuda when there is one).")
    ] = None,
    ocr_lang: Annotated[
        str | None,
        typer.Option(help="Language(s) of scanned pages and images, e.g. eng or deu+eng."),
    ] = None,
    switch: Annotated[
        bool,
        typer.Option(
            "--switch",
            help="Rebuild an existing collection with --encoder (default: its own) and the "
            "chunking options beside the current version, which answers searches until the "
            "new one is complete and takes over. An interrupted switch resumes on the next run.",
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """Index a folder into a collection (incremental: only new or changed files are embedded).

    The collection is named after the folder unless --collection says otherwise. Supported:
    PDF, .txt, .md, .html, .docx, e-mail (.eml, .msg, attachments included), .pptx, .xlsx,
    .odt/.ods/.odp, .rtf, .epub, .doc (with antiword or LibreOffice), and images (.png, .jpg,
    .tif) and scanned PDF pages by OCR. Files that cannot be read are reported and skipped
    (exit 3).
    """
    from docsearch.app.progress import ConsoleProgress
    from docsearch.config import Settings
    from docsearch.indexer import heap, service
    from docsearch.store.database import Database
    from docsearch.store.schema import validate_name

    heap.limit_arenas()  # before torch, Lance and the extraction start their threads

    chosen = _engine(engine, address, workers)
    if device and chosen.embeds_here:  # Ray actors check the device on their own nodes
        from docsearch.encoders.device import require

        require(device)  # one line, before any model loads
    settings = Settings.resolve(db=db, max_tokens=max_tokens, overlap=overlap, ocr_lang=ocr_lang)
    name = collection or service.collection_for(path)
    before = Database(settings.db).versions(validate_name(name))
    with ConsoleProgress(f"indexing {name}") as progress:
        report = service.index(
            path,
            settings=settings,
            collection=name,
            encoder=encoder,
            options=encoder_options(option, model=model, adapter=adapter),
            include=include or (),
            exclude=exclude or (),
            engine=chosen,
            runtime={"device": device} if device else None,
            progress=progress,
            switch=switch,
        )
    _print_report(name, report)
    _print_switch(settings.db, name, before)
    raise typer.Exit(report.exit_code)


def _engine(name: str, address: str | None, workers: int | None) -> Engine:
    """The engine `--engine` names (the Ray one imports Ray only when it runs)."""
    if name == "local":
        from docsearch.indexer.pipeline import LocalEngine

        return LocalEngine()
    if name == "ray":
        from docsearch.indexer.ray_engine import RayEngine

        return RayEngine(address=address, workers=workers)
    raise UsageError(f"unknown engine {name!r}; use local or ray")


def _print_switch(db: str, name: str, before: Versions) -> None:
    """Whether the run swapped the collection to a new version, or left a switch unfinished."""
    from docsearch.store.database import Database
    from docsearch.store.reads import Store, building

    database = Database(db)
    after = database.versions(name)
    if after.active != before.active:
        serving = Store.open(database, name).meta.identity()
        typer.echo(f"{name}: switched; searches now use {serving}", err=True)
    elif (pending := building(database, name)) is not None:
        typer.echo(
            f"{name}: the switch to {pending.meta.identity()} is not finished; searches use "
            f"{Store.open(database, name).meta.identity()} until a run finishes it",
            err=True,
        )


def _print_report(name: str, report: IndexReport) -> None:
    err = functools.partial(typer.echo, err=True)
    err(f"{name}: {report.files_line()}")
    rate = report.tokens_embedded / report.seconds if report.seconds else 0.0
    err(
        f"chunks: {report.chunks_written} written, {report.chunks_embedded} embedded, "
        f"{report.chunks_reused} reused; {report.tokens_embedded:,} tokens in "
        f"{report.seconds:.1f} s ({rate:,.0f} tokens/s)"
        + (f"; inference: {report.inference}" if report.inference else "")
    )
    if report.ocr_pages:
        err(f"OCR: {report.ocr_pages} pages, {report.ocr_pages - report.ocr_read} from the cache")
    if report.truncated:
        err(f"warning: {report.truncated} chunks exceed the encoder's window and were truncated")
    for path, warning in report.warnings:
        err(f"warning: {path}: {warning}")
    for path, reason in report.failed:
        err(f"failed: {path}: {reason}")
