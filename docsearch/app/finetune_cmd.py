"""`docsearch finetune`: adapt an encoder to your own documents.

A thin command over `docsearch.training.finetune`; the heavy imports happen inside it. Progress
(loss, learning rate, ETA) goes to stderr; the before/after table (or JSON) to stdout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from docsearch.app.common import (
    DbOption,
    EncoderOptionsOption,
    JsonOption,
    ModelOption,
    encoder_options,
    handle_errors,
)
from docsearch.training.card import index_command


class ConsoleReporter:
    """Status lines, and a progress line per step at most every `interval` seconds, on stderr."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval, self._last = interval, 0.0

    def status(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def step(self, report: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.interval and report.step < report.total:
            return
        self._last = now
        print(
            f"step {report.step}/{report.total}  loss {report.loss:.4f}  "
            f"(mean {report.mean_loss:.4f})  lr {report.lr:.1e}  "
            f"{report.seconds / max(1, report.step):.1f} s/step  ETA {_duration(report.eta)}",
            file=sys.stderr,
            flush=True,
        )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def summary(record: dict[str, Any]) -> str:
    """Before/after metrics and how to use the result, for the terminal."""
    lines = [f"wrote {record['load_options']['adapter']}"]
    evaluation = record.get("evaluation") or {}
    before, after = evaluation.get("before") or {}, evaluation.get("after") or {}
    if after:
        lines.append(f"evaluated on {evaluation.get('set')}")
    for mode in after:
        for metric in ("ndcg@10", "recall@10", "mrr@10"):
            b, a = (before.get(mode) or {}).get(metric), after[mode][metric]
            was = f"{b:.4f} -> " if b is not None else ""
            lines.append(f"{mode:<7} {metric:<10} {was}{a:.4f}")
    if record.get("stopped"):
        lines.append(f"note: {record['stopped']} after {record['steps']} steps")
    lines.append(f"use it: {index_command(record, 'PATH')}")
    return "\n".join(lines)


@handle_errors
def finetune_command(
    train: Annotated[
        Path,
        typer.Option(
            "--train",
            help="A JSONL file of {query, positive, negatives?}, a BEIR folder (its train "
            "split), or a folder of documents without labels (pseudo-queries are made from it).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option("--output", help="New folder for the fine-tuned encoder.", show_default=False),
    ],
    encoder: Annotated[
        str,
        typer.Option(
            "--encoder", "-e", help="sentence-transformers (all weights) or llm2vec (LoRA)."
        ),
    ] = "sentence-transformers",
    model: ModelOption = None,
    adapter: Annotated[
        str | None,
        typer.Option(help="Start from this adapter (llm2vec: an MNTP adapter)."),
    ] = None,
    option: EncoderOptionsOption = None,
    loss: Annotated[str, typer.Option(help="opl, mnrl, simcse or mntp (llm2vec).")] = "opl",
    eval_data: Annotated[
        Path | None,
        typer.Option(
            "--eval",
            help="BEIR/LoCoV1 folder or JSONL pairs to score before and after (default: "
            "pairs held out from --train).",
        ),
    ] = None,
    eval_split: Annotated[str, typer.Option(help="Split of the --eval folder.")] = "test",
    eval_max_docs: Annotated[
        int | None, typer.Option(help="Evaluate on the judged documents plus a sample, N in all.")
    ] = None,
    no_eval: Annotated[bool, typer.Option("--no-eval", help="Skip evaluation.")] = False,
    split: Annotated[str, typer.Option(help="Split of a BEIR --train folder.")] = "train",
    max_pairs: Annotated[
        int | None, typer.Option(help="Train on a random sample of N queries or pairs.")
    ] = None,
    negatives: Annotated[int, typer.Option(help="Negatives per pair.")] = 4,
    mined: Annotated[
        int | None,
        typer.Option(help="How many of them are mined hard negatives (default: 0 opl, half mnrl)."),
    ] = None,
    in_batch: Annotated[
        bool,
        typer.Option(
            "--in-batch",
            help="opl: every document of a micro-batch is also a negative for the other "
            "queries (about batch-size x (1 + negatives) negatives per query at no extra cost).",
        ),
    ] = False,
    steps: Annotated[
        int | None, typer.Option(help="Optimiser steps (default: --epochs over the pairs).")
    ] = None,
    epochs: Annotated[float, typer.Option(help="Passes over the training pairs.")] = 1.0,
    lr: Annotated[
        float | None, typer.Option(help="Learning rate (default 2e-5 full, 1e-4 LoRA).")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Pairs per micro-batch.")] = 4,
    grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimiser step.")] = 8,
    max_minutes: Annotated[
        float | None, typer.Option(help="Stop training after M minutes (the model is saved).")
    ] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N steps.")] = 25,
    bf16: Annotated[
        bool | None, typer.Option("--bf16/--no-bf16", help="bf16 autocast (default: if fast).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling, negatives and order.")] = 0,
    collection: Annotated[
        str | None,
        typer.Option(help="Collection indexed from --train: reuse its chunks and vectors."),
    ] = None,
    db: DbOption = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue the interrupted run in --output from its checkpoint."
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Fine-tune an encoder on labelled pairs or on your own documents, and check it helped.

    Writes a folder that `docsearch index --encoder ENCODER --adapter FOLDER` accepts, with a
    model card (README.md) and training.json. Without labels, pseudo-queries come from the
    documents' headings, titles and sentences. Scores nDCG@10 before and after on --eval (or on
    held-out pairs). Ctrl-C saves a checkpoint; rerun the same command with --resume.
    """
    from docsearch.config import Settings
    from docsearch.training.finetune import FinetuneJob, finetune
    from docsearch.training.trainer import TrainSettings

    db = Settings.resolve(db=db).db
    try:
        options = encoder_options(option, model=model, adapter=adapter)
        settings = TrainSettings(
            loss=loss, steps=steps, epochs=epochs, lr=lr, batch_size=batch_size,
            grad_accum=grad_accum, negatives=negatives, mined=mined, max_minutes=max_minutes,
            checkpoint_every=checkpoint_every, seed=seed, bf16=bf16, in_batch=in_batch,
        )  # fmt: skip
        job = FinetuneJob(
            encoder, options, train, output, settings, eval=eval_data, eval_split=eval_split,
            eval_max_docs=eval_max_docs, evaluate=not no_eval, split=split,
            max_pairs=max_pairs, collection=collection, db=db, resume=resume,
        )  # fmt: skip
        record = finetune(job, ConsoleReporter())
    except KeyboardInterrupt:  # here, not in handle_errors: the message says how to resume
        typer.echo(
            f"interrupted; the last checkpoint is in {output}/checkpoints: rerun the same "
            "command with --resume to continue",
            err=True,
        )
        raise typer.Exit(130) from None
    typer.echo(json.dumps(record, indent=2, default=str) if as_json else summary(record))
