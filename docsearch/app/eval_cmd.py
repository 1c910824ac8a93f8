"""`docsearch eval`: measure retrieval quality on a labelled dataset.

A thin command over `docsearch.evaluation`; the heavy imports happen inside it. It indexes with
the same settings as `docsearch index` (DOCSEARCH_ENCODER, DOCSEARCH_MODEL, the chunk cap...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from docsearch.app.common import (
    EncoderOptionsOption,
    JsonOption,
    MaxTokensOption,
    ModelOption,
    encoder_options,
    handle_errors,
)


@handle_errors
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
    model: ModelOption = None,
    option: EncoderOptionsOption = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="hybrid, vector, lexical, or all: every mode from one index (default: hybrid; "
            "lexical loads no model)."
        ),
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
    max_tokens: MaxTokensOption = None,
    similar: Annotated[
        bool,
        typer.Option(
            "--similar", help="Read each query as a document: search as `docsearch similar`."
        ),
    ] = False,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Keep the index in this folder, named by the corpus, encoder and chunking, and "
            "search it there next time instead of indexing again.",
            file_okay=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Score search on a labelled dataset: nDCG@10, Recall@10, Recall@100, MRR@10.

    Indexes the corpus into a temporary collection (or one kept in --cache) with the real
    pipeline, runs the queries and scores documents as search ranks them. With spans.jsonl
    (CUAD) it also reports how often a top-k passage overlaps the answer. `--similar` reads each
    query as a whole document (irled2017-precedent: a case, to find the prior cases it cites).
    `--mode lexical` without --encoder needs no model (SciFact: about a minute on 2 cores).
    """
    from docsearch.app.progress import ConsoleProgress
    from docsearch.config import Settings
    from docsearch.evaluation import evaluate_dataset, load_dataset

    settings = Settings.resolve(max_tokens=max_tokens)
    options = encoder_options(option, model=model)
    rset = load_dataset(dataset, split, task).subsample(max_docs, seed)
    with ConsoleProgress(f"indexing {rset.name}") as progress:
        results = evaluate_dataset(
            rset,
            encoder=encoder,
            options=options,
            mode=mode,
            settings=settings,
            progress=progress,
            similar=similar,
            cache=cache,
        )
    if as_json:  # one mode: its result, as before; several: a list, one per mode
        data = [r.as_dict() for r in results]
        typer.echo(json.dumps(data if len(data) > 1 else data[0], indent=2))
    else:
        typer.echo("\n\n".join(r.summary() for r in results))
