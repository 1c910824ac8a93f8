"""CPU scaling of the Ray indexing engine on this machine: 1 vs 2 embedding workers.

    flock /tmp/docsearch-heavy.lock timeout 1200 python benchmarks/ray_scaling.py [--docs 400]

Indexes the first --docs SciFact abstracts (from ../shared/data/scifact, one .txt file each) from
scratch with the local engine and with the Ray engine on a local Ray started here (2 CPUs), with
1 and then 2 workers, for two encoders: `hashing` (the test fake: the engine's own overhead,
extraction and writes) and `sentence-transformers` (all-MiniLM-L6-v2 on the CPU: embedding
bound). Each Ray actor runs torch on one thread, so 2 workers use both cores; the local engine
uses torch's default threads (2 here). Writes benchmarks/results/ray_scaling.{json,md}. Every
run builds an identical collection (checked: same chunk ids). The machine is shared with other
work, so the load average is recorded beside the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["DOCSEARCH_PLUGINS"] = "tests.fakes"  # the hashing encoder, in workers too
os.environ["PYTHONPATH"] = str(REPO)

from docsearch.config import Settings  # noqa: E402
from docsearch.indexer.ray_engine import RayEngine  # noqa: E402
from docsearch.indexer.service import index  # noqa: E402
from docsearch.store.reads import Store  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
ENCODERS = {"hashing": {"max_tokens": 256}, "sentence-transformers": {}}


def write_corpus(root: Path, n_docs: int) -> Path:
    """The first `n_docs` SciFact abstracts as text files (title line, then the abstract)."""
    root.mkdir(parents=True)
    with DATA.open() as lines:
        for i, line in enumerate(lines):
            if i >= n_docs:
                break
            doc = json.loads(line)
            (root / f"{doc['_id']}.txt").write_text(f"{doc['title']}\n\n{doc['text']}\n")
    return root


def one_run(root: Path, db: str, encoder: str, workers: int | None) -> dict[str, Any]:
    """Index `root` into a fresh collection; `workers=None` is the local engine."""
    engine = None if workers is None else RayEngine(workers=workers)
    report = index(
        root, settings=Settings(db=db), collection="bench", encoder=encoder,
        options=ENCODERS[encoder], engine=engine,
    )  # fmt: skip
    seconds = report.seconds  # from the plan on: the collection is prepared (model loaded)
    ids = sorted(r["id"] for r in Store.open(db, "bench").rows("ordinal >= 0", ["id"]))
    return {
        "encoder": encoder,
        "engine": "local" if workers is None else f"ray x{workers}",
        "workers": workers,
        "seconds": round(seconds, 2),
        "files": report.new,
        "chunks": report.chunks_written,
        "tokens": report.tokens_embedded,
        "files_per_s": round(report.new / seconds, 2),
        "tokens_per_s": round(report.tokens_embedded / seconds, 1),
        "load_avg": round(os.getloadavg()[0], 2),
        "ids": ids,
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Ray engine: CPU scaling on this machine (1 vs 2 workers)",
        "",
        f"Date: {report['date']}. Command: `{report['command']}`.",
        f"Hardware: {report['hardware']}. Corpus: {report['docs']} SciFact abstracts "
        f"(one .txt file each). Wall time includes starting actors and loading the model in "
        "each; a local Ray (2 CPUs) is started once before the runs.",
        "",
        "| encoder | engine | seconds | files/s | tokens/s | speed-up vs ray x1 | load avg |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["runs"]:
        base = next(
            r["seconds"] for r in report["runs"]
            if r["encoder"] == row["encoder"] and r["workers"] == 1
        )  # fmt: skip
        speedup = f"{base / row['seconds']:.2f}x"
        lines.append(
            f"| {row['encoder']} | {row['engine']} | {row['seconds']} | {row['files_per_s']} | "
            f"{row['tokens_per_s']:,.0f} | {speedup} | {row['load_avg']} |"
        )
    lines += ["", report["note"], ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS))
    args = parser.parse_args()
    import ray

    work = Path(tempfile.mkdtemp(prefix="docsearch-ray-scaling-"))
    runs = []
    try:
        root = write_corpus(work / "docs", args.docs)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        for encoder in args.encoders:
            for workers in (None, 1, 2):
                db = str(work / f"db-{encoder}-{workers}")
                runs.append(one_run(root, db, encoder, workers))
                print(json.dumps({k: v for k, v in runs[-1].items() if k != "ids"}), flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    for encoder in args.encoders:
        same = {tuple(r["ids"]) for r in runs if r["encoder"] == encoder}
        assert len(same) == 1, f"{encoder}: the engines built different collections"
    for run in runs:
        del run["ids"]
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/ray_scaling.py " + " ".join(sys.argv[1:]),
        "hardware": f"{os.cpu_count()} CPUs ({platform.machine()}), shared; no GPU",
        "docs": args.docs,
        "runs": runs,
        "note": "Every run built the same chunk ids. Timings are one run each on a machine "
        "shared with other work: compare ratios, not absolute numbers.",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray_scaling.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "ray_scaling.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
