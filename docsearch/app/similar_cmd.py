"""`docsearch similar`: the documents of a collection most like a given one, and why.

Not here: the search (`Retriever.similar`, `docsearch.similar`); rendering of a hit's title
line is shared with `docsearch search`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from docsearch.app.common import CollectionOption, DbOption, JsonOption, handle_errors
from docsearch.app.search_cmd import _short_path


@handle_errors
def similar(
    source: Annotated[
        str,
        typer.Argument(
            help="A file (any supported format, in the collection or not), or the path or doc "
            "id of a document of the collection.",
            show_default=False,
        ),
    ],
    k: Annotated[int, typer.Option("-k", help="Number of results.")] = 10,
    mode: Annotated[
        str | None,
        typer.Option(help="hybrid, vector or lexical (default: hybrid if the index has vectors)."),
    ] = None,
    as_json: JsonOption = False,
    collection: CollectionOption = None,
    db: DbOption = None,
) -> None:
    """Find the documents most like SOURCE (the document itself is left out).

    Each result names the key terms both documents share and the passage of each that holds the
    most of them. `--mode lexical` loads no model.
    """
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    retriever = Retriever(collection, settings=Settings.resolve(db=db))
    hits = retriever.similar(source, k=k, mode=mode)
    if as_json:
        typer.echo(json.dumps([h.as_dict() for h in hits], indent=2, default=str))
        return
    if not hits:
        typer.echo("no similar documents", err=True)
    for rank, hit in enumerate(hits, start=1):
        typer.echo(_format_similar(rank, hit))


def _format_similar(rank: int, hit: Any) -> str:
    """Title, path and score, the shared key terms, then the passage pair with their pages."""
    legs = ", ".join(
        f"{leg} #{s['rank']} {s['score']:.3f}"
        for leg, s in sorted(hit.scores.items())
        if leg != "fused"
    )
    lines = [
        f"{rank}. {hit.title or _short_path(hit.path)}",
        f"   {_short_path(hit.path)}  score {hit.score:.4f} ({legs})",
    ]
    if hit.terms:
        lines.append(f"   shared terms: {', '.join(hit.terms)}")
    if hit.query_passage is not None:
        lines.append(
            f"   this document p. {hit.query_passage.pages}: {hit.query_passage.snippet.marked()}"
        )
    lines.append(f"   match p. {hit.pages}: {hit.snippet.marked()}")
    return "\n".join(lines)
