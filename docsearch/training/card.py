"""The model card: a README.md written next to every encoder `docsearch finetune` produces.

It says what the folder is, how to use it (the exact `docsearch index` line and the Python
equivalent), what it was trained on and how, and what it scored before and after on the
held-out evaluation set. It is rendered from the run record that the trainer also saves as
`training.json`, so the card and the machine-readable record never disagree.
Not here: training, evaluation (`docsearch.training.trainer`, `docsearch.evaluation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

METRIC_ORDER = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def index_command(record: Mapping[str, Any]) -> str:
    """The `docsearch index` line that uses this folder."""
    options = record["load_options"]
    parts = ["docsearch index ./my-documents", f"--encoder {record['encoder']}"]
    if options.get("model"):
        parts.append(f"--model {options['model']}")
    parts.append(f"--adapter {options['adapter']}")
    return " ".join(parts)


def python_snippet(record: Mapping[str, Any]) -> str:
    options = ", ".join(f"{k}={v!r}" for k, v in record["load_options"].items())
    return "\n".join(
        [
            "from docsearch.encoders.base import get_encoder",
            "",
            f"encoder = get_encoder({record['encoder']!r}, {options})",
            'vectors = encoder.encode_queries(["termination for convenience"])',
        ]
    )


def metrics_table(evaluation: Mapping[str, Any]) -> list[str]:
    """A Markdown table: one row per (mode, metric), before / after / change."""
    before = evaluation.get("before") or {}
    after = evaluation.get("after") or {}
    lines = ["| mode | metric | before | after | change |", "|---|---|---|---|---|"]
    for mode in sorted(set(before) | set(after)):
        for metric in METRIC_ORDER:
            b = (before.get(mode) or {}).get(metric)
            a = (after.get(mode) or {}).get(metric)
            change = f"{a - b:+.4f}" if a is not None and b is not None else ""
            lines.append(f"| {mode} | {metric} | {_num(b)} | {_num(a)} | {change} |")
    return lines


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def loss_summary(losses: Sequence[float]) -> str:
    if not losses:
        return "no optimiser steps were taken"
    head = losses[: max(1, min(5, len(losses)))]
    tail = losses[-len(head) :]
    return (
        f"mean of the first {len(head)} steps {sum(head) / len(head):.4f}, "
        f"of the last {len(tail)} steps {sum(tail) / len(tail):.4f}"
    )


def _settings_lines(settings: Mapping[str, Any]) -> list[str]:
    return [f"- {key}: {value}" for key, value in settings.items() if value is not None]


def render(record: Mapping[str, Any]) -> str:
    """The card's Markdown for a run record (the contents of `training.json`)."""
    evaluation = record.get("evaluation") or {}
    lines = [
        f"# {record['title']}",
        "",
        f"A `{record['encoder']}` encoder fine-tuned by docsearch with the `{record['loss']}` "
        f"loss ({record['method']}), starting from {record['start_options']}.",
        "",
        "## Use it",
        "",
        "```",
        index_command(record),
        "```",
        "",
        "A collection indexed this way remembers the encoder, so `docsearch search` and",
        "`Retriever(collection)` load this folder again by themselves. In Python:",
        "",
        "```python",
        python_snippet(record),
        "```",
        "",
        "## Training",
        "",
        f"- data: {record['data']['source']}",
        *[f"- {note}" for note in record["data"].get("notes", [])],
        f"- training pairs: {record['data']['pairs']}",
        f"- optimiser steps: {record['steps']} of {record['planned_steps']} planned"
        + (f" ({record['stopped']})" if record.get("stopped") else ""),
        f"- loss: {loss_summary(record.get('losses', []))}",
        f"- wall time: {record['seconds']:.0f} s on {record['hardware']}",
        *_settings_lines(record["settings"]),
        "",
        "## Evaluation",
        "",
    ]
    if evaluation.get("before") or evaluation.get("after"):
        lines += [f"On {evaluation.get('set', 'the evaluation set')}:", ""]
        lines += metrics_table(evaluation)
    else:
        lines.append("Not evaluated (no evaluation set).")
    lines += [
        "",
        "## Limits",
        "",
        "Fine-tuned on a small set for one corpus: check it on your own queries before relying",
        "on it, and keep the original encoder's collection until the new one proves better.",
        "",
        f"Written by docsearch {record.get('docsearch', '')} on {record.get('created', '')}.",
        "",
    ]
    return "\n".join(lines)


def write_card(folder: Path, record: Mapping[str, Any]) -> Path:
    """Write `README.md` into `folder` (replacing any card the model library wrote)."""
    path = folder / "README.md"
    path.write_text(render(record), encoding="utf-8")
    return path
