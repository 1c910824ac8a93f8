"""`docsearch eval`: measure retrieval quality on a labelled dataset (registered by cli.py).

A thin command over `docsearch.evaluation`; the heavy imports happen inside it. It imports
nothing from cli.py at module level so that cli.py can import it without a cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from docsearch.errors import DocsearchError


def eval_command(
    dataset: Annotated[
        Path,
        typer.Argument(
            help="BEIR folder (corpus.jsonl, queries.jsonl, qrels.tsv) or LoCoV1 folder.",
            show_default=False,
        ),
    ],
    encoder: Annotated[
        str | None,
        typer.Option("--encoder", "-e", help="Encoder to index with ('none': BM25 only)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id or folder.")] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="Encoder option KEY=VALUE.")
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(help="hybrid, vector or lexical (default: hybrid; lexical loads no model)."),
    ] = None,
    split: Annotated[
        str, typer.Option(help="Queries of this split ('all': every query).")
    ] = "test",
    task: Annotated[str | None, typer.Option(help="LoCoV1 task (LoCoV1 folders only).")] = None,
    max_docs: Annotated[
        int | None,
        typer.Option(help="Keep every judged document plus a random sample, N in all."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the --max-docs sample.")] = 0,
    max_tokens: Annotated[
        int | None, typer.Option(help="Cap on chunk size in tokens (default: the encoder's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Score search on a labelled dataset: nDCG@10, Recall@10, Recall@100, MRR@10.

    Indexes the corpus into a temporary collection with the real pipeline, runs the queries and
    scores documents (a document counts as its best chunk). With spans.jsonl (CUAD) it also
    reports how often a top-k passage overlaps the answer. `--mode lexical` without --encoder
    needs no model (SciFact: about a minute on 2 cores).
    """
    from docsearch.app.cli import parse_options
    from docsearch.app.progress import ConsoleProgress
    from docsearch.evaluation import evaluate_dataset, load_dataset

    try:
        options = parse_options(option)
        if model:
            options["model"] = model
        rset = load_dataset(dataset, split, task).subsample(max_docs, seed)
        with ConsoleProgress(f"indexing {rset.name}") as progress:
            result = evaluate_dataset(
                rset, encoder=encoder, options=options, mode=mode, cap=max_tokens, progress=progress
            )
    except DocsearchError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    typer.echo(json.dumps(result.as_dict(), indent=2) if as_json else result.summary())
