"""`docsearch doctor`: index health per collection; exit 3 when one needs attention.

Not here: the checks themselves (`Store.index_health`), listing collections (`collections_cmd.py`).
"""

from __future__ import annotations

import json
from typing import Any

import typer

from docsearch.app.common import CollectionOption, DbOption, JsonOption, handle_errors


@handle_errors
def doctor(
    collection: CollectionOption = None, as_json: JsonOption = False, db: DbOption = None
) -> None:
    """Check index health: full-text coverage, failed files, versions, encoder identity."""
    from docsearch import __version__
    from docsearch.config import Settings
    from docsearch.indexer.store import Store, list_collections

    db = Settings.resolve(db=db).db
    names = [collection] if collection else list_collections(db)
    report: dict[str, Any] = {"docsearch": __version__, "db": db, "collections": {}}
    from docsearch.encoders.precision import describe_choices

    report["inference"] = describe_choices()  # what precision=auto runs on this machine
    problems = 0
    for name in names:
        store = Store.open(db, name)
        health = store.index_health()
        failed = store.file_stats().failed
        health["failed_files"] = failed
        records = store.file_records().values()
        health["ocr_pages"] = {r.path: r.ocr_pages for r in records if r.ocr_pages}
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
    for line in report["inference"]:
        typer.echo(f"inference on this machine: {line}")
    for name, h in report["collections"].items():
        ok = "ok" if not h["failed_files"] and not h["fts_unindexed_rows"] else "needs attention"
        typer.echo(
            f"{name}: {ok}; {h['files']} files, {h['chunks']} chunks, "
            f"{h['fts_unindexed_rows']} rows missing from the full-text index, "
            f"{h['versions']} table versions"
        )
        if h["ocr_pages"]:
            typer.echo(f"  {len(h['ocr_pages'])} files have pages read by OCR (see --json)")
        for path, reason in h["failed_files"].items():
            typer.echo(f"  failed: {path}: {reason}")
