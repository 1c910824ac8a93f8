"""Shared by the quality, fusion and needle benchmarks: the datasets, their sampling, the machine.

Datasets that share a corpus (qmsum and qmsum/summary2meeting; scisummnet-acl and its
title2paper variant) form one group and are indexed once. `--max-docs` keeps every judged
document of the group plus a seeded sample of the rest; `--max-queries` first samples the
queries of the group's first dataset and keeps the other datasets' queries about the same
documents. Indexes are cached (by documents + encoder) so that re-running a table after a
fusion change does not embed anything again.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docsearch.corpora.beir import RetrievalSet, load_beir

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
# Paths a run can move: the evaluation sets (a checkout next to the shared data by default) and
# the caches of indexes and legs (in the checkout, git-ignored, unless set elsewhere).
DATA = Path(os.environ.get("DOCSEARCH_EVAL_DATA", REPO.parent / "shared" / "data"))
CACHE_ROOT = Path(os.environ.get("DOCSEARCH_BENCH_CACHE", REPO / ".bench-cache"))
DEFAULT_CACHE = Path(os.environ.get("DOCSEARCH_EVAL_CACHE", CACHE_ROOT / "eval"))


def cache_dir(name: str) -> Path:
    """A benchmark's own default cache or work folder, under CACHE_ROOT."""
    return CACHE_ROOT / name


@dataclass(frozen=True)
class Group:
    """Datasets over one corpus: (folder, split) pairs, and how to sample them on CPU."""

    corpus: str
    datasets: tuple[tuple[str, str], ...]
    max_docs: int | None = None
    max_queries: int | None = None


# The quality table: test splits only (queries without a split field are test queries), every
# corpus at full size.
TABLE = (
    Group("qmsum", (("qmsum", "test"), ("qmsum/summary2meeting", "test"))),
    Group("scisummnet-acl", (("scisummnet-acl", "test"), ("scisummnet-acl/title2paper", "test"))),
    Group("cuad", (("cuad", "test"),)),
    Group("scifact", (("scifact", "test"),)),
)
# Decoder encoders (and every encoder, in the quality table's small tier): samples that a
# 135M-270M decoder embeds on one CPU thread in minutes, chunks of at most SMALL_CAP tokens.
SMALL = (
    Group(
        "qmsum",
        (("qmsum", "test"), ("qmsum/summary2meeting", "test")),
        max_docs=12,
        max_queries=12,
    ),
    Group(
        "scisummnet-acl",
        (("scisummnet-acl/title2paper", "test"),),
        max_docs=20,
        max_queries=20,
    ),
    Group("scifact", (("scifact", "test"),), max_docs=120, max_queries=50),
)
SMALL_CAP = 1024
DEFAULT_DECODER = "smollm2-135m"

# Fusion tuning: train and validation queries over the same (cached) corpora as the table.
TUNING = (
    Group(
        "qmsum",
        (
            ("qmsum", "train"),
            ("qmsum", "val"),
            ("qmsum/summary2meeting", "train"),
            ("qmsum/summary2meeting", "val"),
        ),
    ),
    Group("scifact", (("scifact", "train"),)),
)


def dataset_names(groups: tuple[Group, ...]) -> list[str]:
    return [name for g in groups for name, _ in g.datasets]


def load_group(
    group: Group, max_docs: int | None = None, max_queries: int | None = None, seed: int = 0
) -> tuple[RetrievalSet, dict[str, RetrievalSet]]:
    """(the set to index, {"name:split": query set over that index}) for one group."""
    max_docs = max_docs if max_docs is not None else group.max_docs
    max_queries = max_queries if max_queries is not None else group.max_queries
    sets = {f"{name}:{split}": load_beir(DATA / name, split) for name, split in group.datasets}
    first = next(iter(sets))
    if max_queries:
        sampled = sets[first].sample_queries(max_queries, seed)
        docs = sampled.judged()
        sets = {key: (sampled if key == first else s.about(docs)) for key, s in sets.items()}
    base = sets[first]
    union = base._with(
        None,
        queries={f"{k}\0{q}": t for k, s in sets.items() for q, t in s.queries.items()},
        qrels={f"{k}\0{q}": r for k, s in sets.items() for q, r in s.qrels.items()},
    )
    indexed = union.subsample(max_docs, seed)
    note = indexed.notes[-1] if indexed.corpus is not union.corpus else None
    index_set = RetrievalSet(group.corpus, indexed.corpus, {}, {}, notes=[note] if note else [])
    return index_set, {k: s.with_corpus(indexed.corpus, note) for k, s in sets.items()}


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "commit": _commit(),
    }


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        return out.stdout.strip()
    except OSError:
        return ""


def machine_lines(info: dict[str, Any], command: str) -> list[str]:
    gpu = f", GPU {info['gpu']}" if info.get("gpu") else ", no GPU"
    return [
        f"- date: {info['date']} (commit {info['commit']})",
        f"- machine: {info['cpu']}, {info['cpus']} CPUs (torch {info['torch_threads']} threads)"
        f"{gpu}; {info['platform']}; Python {info['python']}, torch {info['torch']}",
        f"- command: `{command}`",
    ]


def write_results(folder: Path, stem: str, payload: dict[str, Any], markdown: str) -> None:
    """`folder/stem.json` (the payload) and `folder/stem.md` (its table)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (folder / f"{stem}.md").write_text(markdown)
