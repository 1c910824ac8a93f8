"""`docsearch search`: ranked results on stdout, as text or JSON.

Not here: the search itself (`docsearch.retriever`), snippets (`docsearch.snippets`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from docsearch.app.common import CollectionOption, DbOption, JsonOption, handle_errors
from docsearch.errors import UsageError


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
    as_json: JsonOption = False,
    collection: CollectionOption = None,
    db: DbOption = None,
) -> None:
    """Search a collection. Without --collection: the only one, else the most recently indexed.

    `--mode lexical` loads no model and answers fastest.
    """
    if not query.strip():
        raise UsageError("empty query: type some words to search for")
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    retriever = Retriever(collection, settings=Settings.resolve(db=db))
    granularity = "passage" if passages else "document"
    hits = retriever.search(query, k=k, mode=mode, where=where, path=path, granularity=granularity)
    echo_hits(hits, as_json, _format_hit, "no results")


def echo_hits(hits: list[Any], as_json: bool, render: Callable[[int, Any], str], none: str) -> None:
    """Hits as a JSON list, or each rendered by `render(rank, hit)`; `none` on stderr if empty."""
    if as_json:
        typer.echo(json.dumps([h.as_dict() for h in hits], indent=2, default=str))
        return
    if not hits:
        typer.echo(none, err=True)
    for rank, hit in enumerate(hits, start=1):
        typer.echo(render(rank, hit))


def leg_scores(hit: Any) -> str:
    """'doc_lexical #1 12.300, lexical #2 8.100': each leg's rank and raw score."""
    return ", ".join(
        f"{leg} #{s['rank']} {s['score']:.3f}"
        for leg, s in sorted(hit.scores.items())
        if leg != "fused"
    )


def _format_hit(rank: int, hit: Any) -> str:
    """The hit's title, where it is and why it ranked, then its best passages (or its snippet)."""
    legs = leg_scores(hit)
    lines = [
        f"{rank}. {hit.title or Path(hit.path).name}",
        f"   {short_path(hit.path)}  p. {hit.cite}{' (OCR)' * hit.ocr}  score {hit.score:.4f} ({legs})",
    ]
    if hit.provenance:
        lines.append(f"   {hit.provenance}")
    if hit.heading_path:
        lines.append(f"   § {hit.heading_path}")
    if hit.granularity == "document":
        lines += [f"   p. {p.cite}: {p.snippet.marked()}" for p in hit.passages]
    else:
        lines.append(f"   {hit.snippet.marked()}")
    return "\n".join(lines)


def short_path(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
