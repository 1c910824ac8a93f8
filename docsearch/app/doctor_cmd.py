"""`docsearch doctor`: index health per collection; exit 3 when one is not ok or has failed files.

A collection is "ok", or "repair pending": an interrupted run left files half written (hidden
from search) or rows not yet in the full-text index, and the next `docsearch index` run repairs
both. Failed files are listed with their reasons (each run retries them); they leave the
collection ok. Not here: the checks themselves (`store.indexes.index_health`, `Store.pending_paths`),
listing collections (`collections_cmd.py`).
"""

from __future__ import annotations

import json
from typing import Any

import typer

from docsearch.app.common import CollectionOption, DbOption, JsonOption, handle_errors

OK, REPAIR_PENDING = "ok", "repair pending"


# What a collection's health lists for the next run to repair: its key, the line label, the words.
_REPAIRS = (
    ("pending_files", "pending", "half written by an interrupted run are hidden from search"),
    (
        "unrecorded_files",
        "unrecorded",
        "have documents but no file record (a run of an earlier docsearch was interrupted)",
    ),
)


@handle_errors
def doctor(
    collection: CollectionOption = None, as_json: JsonOption = False, db: DbOption = None
) -> None:
    """Check index health: full-text coverage, failed files, versions, encoder identity."""
    from docsearch import __version__
    from docsearch.config import Settings
    from docsearch.store.database import Database
    from docsearch.store.indexes import index_health
    from docsearch.store.reads import Store

    db = Settings.resolve(db=db).db
    names = [collection] if collection else Database(db).list_collections()
    report: dict[str, Any] = {"docsearch": __version__, "db": db, "collections": {}}
    from docsearch.encoders.precision import describe_choices

    report["inference"] = describe_choices()  # what precision=auto runs on this machine
    problems = 0
    for name in names:
        store = Store.open(db, name)
        health = index_health(store)
        failed = store.file_stats().failed
        health["failed_files"] = failed
        records = store.file_records().values()
        health["ocr_pages"] = {r.path: r.ocr_pages for r in records if r.ocr_pages}
        health["encodings"] = {r.path: r.encoding for r in records if r.encoding}
        health["encoder"] = store.meta.encoder
        health["pending_files"] = store.pending_paths()
        health["unrecorded_files"] = store.unrecorded_paths()
        health["state"] = state(health)
        report["collections"][name] = health
        problems += bool(failed) + (health["state"] != OK)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_doctor(report)
    raise typer.Exit(3 if problems else 0)


def state(health: dict[str, Any]) -> str:
    """OK, or REPAIR_PENDING where an interrupted run left work the next run finishes."""
    repairs = ("pending_files", "unrecorded_files", "fts_unindexed_rows")
    return REPAIR_PENDING if any(health[what] for what in repairs) else OK


def _print_doctor(report: dict[str, Any]) -> None:
    from docsearch.encoders.precision import NOT_CHOSEN

    typer.echo(f"docsearch {report['docsearch']}  db: {report['db']}")
    for line in report["inference"]:
        typer.echo(f"inference on this machine: {line}")
    if not report["inference"]:
        typer.echo(f"inference on this machine: {NOT_CHOSEN}")
    for name, h in report["collections"].items():
        typer.echo(
            f"{name}: {h['state']}; {h['files']} files, {h['chunks']} chunks, "
            f"{h['fts_unindexed_rows']} rows missing from the full-text index, "
            f"{h['versions']} table versions"
        )
        for key, label, what in _REPAIRS:
            if h[key]:
                typer.echo(
                    f"  {len(h[key])} files {what}; the next `docsearch index` run redoes them"
                )
                for path in h[key]:
                    typer.echo(f"  {label}: {path}")
        if h["fts_unindexed_rows"]:
            typer.echo(
                f"  {h['fts_unindexed_rows']} rows are searched without the full-text index "
                "(more slowly) until the next `docsearch index` run indexes them"
            )
        if h["ocr_pages"]:
            typer.echo(f"  {len(h['ocr_pages'])} files have pages read by OCR (see --json)")
        other = {path: codec for path, codec in h["encodings"].items() if codec != "utf-8"}
        if other:
            typer.echo(f"  {len(other)} text files read in encodings other than UTF-8 (see --json)")
        for path, reason in h["failed_files"].items():
            typer.echo(f"  failed: {path}: {reason}")
