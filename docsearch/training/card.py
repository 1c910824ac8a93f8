"""The model card: a README.md written next to every folder a training recipe produces.

It says what the folder is, how to use it (the exact `docsearch index` line and the Python
equivalent), what it was trained on and how, and, for `docsearch finetune`, what it scored
before and after on the held-out evaluation set. It is rendered from the run record
(`run_record`), saved beside it as `training.json`, so the card and the machine-readable record
never disagree. One writer for every recipe: fine-tuning, MNTP, SimCSE, NV-Embed, M2 pretraining.
Not here: training, evaluation (`docsearch.training.loop` and the recipes, `docsearch.evaluation`).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

METRIC_ORDER = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
RECORD_FILE = "training.json"


def hardware(device: str) -> str:
    """The device, in words."""
    import torch

    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(0))
    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads"


def run_record(
    *,
    title: str,
    encoder: str,
    method: str,
    recipe: str,
    start: Any,
    load: Mapping[str, Any],
    losses: Sequence[float],
    planned: int,
    seconds: float,
    device: str,
    settings: Mapping[str, Any],
    stopped: str = "",
    data: Mapping[str, Any] | None = None,
    evaluation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a training run did, as `training.json` holds it and the card shows it."""
    from docsearch import __version__

    return {
        "title": title, "encoder": encoder, "loss": recipe, "method": method,
        "start_options": start, "load_options": dict(load), "data": data,
        "settings": dict(settings), "steps": len(losses), "planned_steps": planned,
        "stopped": stopped, "seconds": round(seconds, 1), "losses": list(losses),
        "hardware": hardware(device), "evaluation": evaluation, "docsearch": __version__,
        "created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }  # fmt: skip


def index_command(record: Mapping[str, Any], path: str = "./my-documents") -> str:
    """The `docsearch index` line that uses this folder."""
    options = record["load_options"]
    parts = [f"docsearch index {path}", f"--encoder {record['encoder']}"]
    parts += [f"--{key} {options[key]}" for key in ("model", "adapter") if options.get(key)]
    return " ".join(parts)


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


def _data_lines(data: Mapping[str, Any]) -> list[str]:
    notes = [f"- {note}" for note in data.get("notes", [])]
    return [f"- data: {data['source']}", *notes, f"- training pairs: {data['pairs']}"]


def _settings_lines(settings: Mapping[str, Any]) -> list[str]:
    shown = {k: repr(v) if "\n" in str(v) else v for k, v in settings.items() if v is not None}
    return [f"- {key}: {value}" for key, value in shown.items()]  # one line per setting


def render(record: Mapping[str, Any]) -> str:
    """The card's Markdown for a run record (the contents of `training.json`)."""
    evaluation = record.get("evaluation") or {}
    data = record.get("data")
    options = ", ".join(f"{k}={v!r}" for k, v in record["load_options"].items())
    lines = [
        f"# {record['title']}",
        "",
        f"A `{record['encoder']}` encoder trained by docsearch with `{record['loss']}` "
        f"({record['method']}), starting from {record['start_options']}.",
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
        "from docsearch.encoders.base import get_encoder",
        "",
        f"encoder = get_encoder({record['encoder']!r}, {options})",
        'vectors = encoder.encode_queries(["termination for convenience"])',
        "```",
        "",
        "## Training",
        "",
        *(_data_lines(data) if data else []),
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
        "Trained on a small set for one corpus: check it on your own queries before relying",
        "on it, and keep the original encoder's collection until the new one proves better.",
        "",
        f"Written by docsearch {record.get('docsearch', '')} on {record.get('created', '')}.",
        "",
    ]
    return "\n".join(lines)


def write_card(folder: str | Path, record: Mapping[str, Any]) -> Path:
    """Write `training.json` and `README.md` into `folder` (replacing any card a library wrote)."""
    folder = Path(folder)
    (folder / RECORD_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")
    path = folder / "README.md"
    path.write_text(render(record), encoding="utf-8")
    return path
