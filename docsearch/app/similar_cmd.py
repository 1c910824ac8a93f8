"""`docsearch similar`: the documents of a collection most like a given one, and why.

Not here: the search (`Retriever.similar`, `docsearch.similar`); rendering of a hit's title
line is shared with `docsearch search`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from docsearch.app.common import CollectionOption, DbOption, JsonOption, handle_errors
from docsearch.app.search_cmd import echo_hits, leg_scores, short_path


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

    Each result names the key terms both documents share and the passage pairs that match best,
    with their pages: by chunk vectors when the collection has them, else the passage of each
    holding the most shared terms. `--mode lexical` loads no model.
    """
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    retriever = Retriever(collection, settings=Settings.resolve(db=db))
    hits = retriever.similar(source, k=k, mode=mode)
    echo_hits(hits, as_json, _format_similar, "no similar documents")


def _format_similar(rank: int, hit: Any) -> str:
    """Title, path and score, the shared key terms, then each passage pair with their pages."""
    legs = leg_scores(hit)
    lines = [
        f"{rank}. {hit.title or short_path(hit.path)}",
        f"   {short_path(hit.path)}  score {hit.score:.4f} ({legs})",
    ]
    if hit.terms:
        lines.append(f"   shared terms: {', '.join(hit.terms)}")
    for number, pair in enumerate(hit.pairs, start=1):
        how = f"cosine {pair.score:.3f}" if pair.by == "vectors" else "shared terms"
        lines += [
            f"   pair {number} ({how}):",
            f"     this document p. {pair.query.pages}: {pair.query.snippet.marked()}",
            f"     match p. {pair.match.pages}: {pair.match.snippet.marked()}",
        ]
    if not hit.pairs:
        lines.append(f"   match p. {hit.pages}: {hit.snippet.marked()}")
    return "\n".join(lines)
