"""Does MiniLM fine-tuned on a collection's own documents, without labels, help the query-style suite?

    nice -n 10 python -m benchmarks.styles_adapted train [--only a,b] [--minutes 5] [--loss mnrl]
    nice -n 10 python -m benchmarks.styles_adapted build
    nice -n 10 python -m benchmarks.styles_adapted collect
    python -m benchmarks.styles_adapted score

Issue 37's optional item: adapt the dense leg to the collection from pairs the corpus yields
itself, and measure it on the same suite. `train` writes each styles sample's documents as .txt
files (the unlabelled folder a user has) and runs `docsearch finetune --train FOLDER` on them:
pseudo-queries from headings, titles and sentences (docsearch.training.pseudo), no qrels, no
queries. `build` and `collect` are styles.py's own, with `--adapters`: each sample indexed by its
fine-tuned MiniLM and its legs collected through the real store. `score` ranks both sets of legs
with the product's fusion (fusion.document_rule) and writes results/styles_adapted.{json,md}:
nDCG@10 per set x style for the vector mode and hybrid, before (styles.py's base MiniLM legs,
which `python -m benchmarks.styles build/collect --only ...` makes) and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import styles as S  # noqa: E402
from benchmarks.eval_sets import RESULTS, cache_dir, machine, machine_lines, write_results  # noqa: E402

DOCS = cache_dir("styles") / "documents"
MODES = ("BM25", "lexical", "vector", "hybrid")


def chosen(only: str) -> list[S.Sample]:
    names = only.split(",") if only else [s.name for s in S.SAMPLES]
    unknown = set(names) - {s.name for s in S.SAMPLES}
    if unknown:
        raise SystemExit(f"unknown sample(s): {', '.join(sorted(unknown))}")
    return [s for s in S.SAMPLES if s.name in names]


class Work:
    """One loss's folders: the fine-tuned encoders, their indexes and their legs."""

    def __init__(self, loss: str) -> None:
        root = cache_dir("styles") / f"adapted-{loss}"
        self.adapters, self.indexes, self.legs = root / "adapters", root / "indexes", root / "legs"


def write_documents(sample: S.Sample) -> Path:
    """The sample's documents as `<n>.txt` files (title first, as the corpus has it)."""
    folder = DOCS / sample.name
    folder.mkdir(parents=True, exist_ok=True)
    for n, doc in enumerate(sample.corpus().values()):
        (folder / f"{n:05d}.txt").write_text(doc.text, encoding="utf-8")
    return folder


def finetune_command(args: argparse.Namespace, docs: Path, output: Path) -> list[str]:
    return [
        "docsearch", "finetune", "--train", str(docs), "--output", str(output),
        "--loss", args.loss, "--max-pairs", str(args.pairs), "--negatives", "4",
        "--batch-size", "4", "--grad-accum", "2", "--epochs", "1",
        "--max-minutes", str(args.minutes), "--seed", "0", "--no-eval",
    ]  # fmt: skip


def train(args: argparse.Namespace) -> None:
    """`docsearch finetune` on each sample's own documents (skipped where already trained)."""
    for sample in chosen(args.only):
        output = Work(args.loss).adapters / sample.name
        if (output / "training.json").is_file():
            print(f"{sample.name}: trained already ({output})", file=sys.stderr)
            continue
        command = finetune_command(args, write_documents(sample), output)
        print(" ".join(command), file=sys.stderr, flush=True)
        subprocess.run(command, check=True)


def legs_args(args: argparse.Namespace) -> argparse.Namespace:
    work = Work(args.loss)
    return argparse.Namespace(indexes=work.indexes, cache=work.legs, only=args.only,
                              adapters=work.adapters)  # fmt: skip


def training_record(work: Work, name: str) -> dict[str, Any]:
    """What the fine-tune did: pairs by origin, steps, seconds, first and last losses."""
    record = json.loads((work.adapters / name / "training.json").read_text())
    return {k: record.get(k) for k in ("data", "steps", "seconds", "stopped", "losses", "settings")}


def cells(rows: list[S.Row], role: str) -> dict[str, dict[str, Any]]:
    """'dataset / style' -> n, each mode's mean nDCG@10 and the per-query hybrid scores."""
    acc: dict[str, list[S.Row]] = {}
    for row in rows:
        if row.role == role:
            acc.setdefault(f"{row.dataset} / {row.style}", []).append(row)
    return {
        cell: {"n": len(got), "keys": [(r.text, r.dataset) for r in got]}
        | {m: float(np.mean([r.modes[m] for r in got])) for m in MODES}
        | {"per_query": [r.modes["hybrid"] for r in got]}
        for cell, got in sorted(acc.items())
    }


def compare(base: dict[str, Any], adapted: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for cell in sorted(set(base) & set(adapted)):
        b, a = base[cell], adapted[cell]
        assert b["keys"] == a["keys"], f"{cell}: the two runs asked different queries"
        diff = np.array(a["per_query"]) - np.array(b["per_query"])
        bar = max(b["lexical"], b["BM25"])
        out.append(
            {"cell": cell, "n": b["n"], "BM25": b["BM25"], "lexical": b["lexical"],
             "lexical_after": a["lexical"], "vector_before": b["vector"],
             "vector_after": a["vector"], "hybrid_before": b["hybrid"],
             "hybrid_after": a["hybrid"], "better": int((diff > 1e-9).sum()),
             "worse": int((diff < -1e-9).sum()), "change_sum": float(diff.sum()),
             "margin_before": b["hybrid"] - bar,
             "margin_after": a["hybrid"] - max(a["lexical"], b["BM25"])}
        )  # fmt: skip
    return out


def score(args: argparse.Namespace) -> None:
    names = {s.name for s in chosen(args.only)}
    base = [r for r in S.cached_rows(S.CACHE) if r.group in names]
    work = Work(args.loss)
    adapted = [r for r in S.cached_rows(work.legs, work.indexes, work.adapters) if r.group in names]
    payload = {
        "machine": machine(),
        "loss": args.loss,
        "training": {n: training_record(work, n) for n in sorted({r.group for r in adapted})},
        "test": compare(cells(base, "test"), cells(adapted, "test")),
        "tune": compare(cells(base, "tune"), cells(adapted, "tune")),
    }
    write_results(RESULTS, f"styles_adapted_{args.loss}", payload, markdown(payload, args))


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| set / style | n | BM25 | lexical | vector before | vector after | hybrid before "
        "| hybrid after | better/worse | margin before | margin after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {r['n']} | {r['BM25']:.4f} | {r['lexical']:.4f} "
            f"| {r['vector_before']:.4f} | {r['vector_after']:.4f} | {r['hybrid_before']:.4f} "
            f"| {r['hybrid_after']:.4f} | {r['better']}/{r['worse']} "
            f"| {r['margin_before']:+.4f} | {r['margin_after']:+.4f} |"
        )
    return lines


def _summary(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no cells"
    vec = np.mean([r["vector_after"] - r["vector_before"] for r in rows])
    hyb = np.mean([r["hybrid_after"] - r["hybrid_before"] for r in rows])
    worst_b = min(rows, key=lambda r: r["margin_before"])
    worst_a = min(rows, key=lambda r: r["margin_after"])
    fails = sum(r["margin_after"] < -0.005 for r in rows)
    better, worse = sum(r["better"] for r in rows), sum(r["worse"] for r in rows)
    queries = sum(r["n"] for r in rows)
    per_query = sum(r["change_sum"] for r in rows) / queries
    return (
        f"mean change over {len(rows)} cells: vector {vec:+.4f}, hybrid {hyb:+.4f}; over the "
        f"{queries} query-styles, hybrid {per_query:+.4f} (better for {better}, worse for "
        f"{worse}); worst margin "
        f"before {worst_b['cell']} {worst_b['margin_before']:+.4f}, after {worst_a['cell']} "
        f"{worst_a['margin_after']:+.4f}; cells below -0.005 after: {fails}"
    )


def markdown(payload: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# MiniLM fine-tuned on each collection's own documents (no labels): the style suite",
        "",
        *machine_lines(
            payload["machine"],
            f"python -m benchmarks.styles_adapted train --loss {args.loss} --minutes "
            f"{args.minutes} --pairs {args.pairs} && ... build && ... collect && ... score",
        ),
        "- before: `python -m benchmarks.styles build --only NAMES && python -m benchmarks.styles "
        "collect --only NAMES` (the base MiniLM legs)",
        "- encoders: before, base all-MiniLM-L6-v2; after, the same fine-tuned by `docsearch finetune "
        "--train DOCUMENTS` on the sample's own documents (pseudo-queries, no labels); hybrid: "
        "fusion.document_rule both times. margin: hybrid - max(lexical, BM25); better/worse: "
        "queries whose hybrid nDCG@10 rose / fell.",
        "",
        "## Training",
        "",
    ]
    for name, rec in payload["training"].items():
        data, losses = rec.get("data") or {}, rec.get("losses") or [0.0]
        lines.append(
            f"- {name}: {'; '.join(data.get('notes', []))}; {data.get('pairs')} pairs, "
            f"{rec['steps']} steps in {rec['seconds']:.0f} s; loss, mean of the first 5 steps "
            f"{np.mean(losses[:5]):.3f}, of the last 5 {np.mean(losses[-5:]):.3f}"
        )
    for role in ("test", "tune"):
        lines += ["", f"## nDCG@10, {role} split", "", _summary(payload[role]), ""]
        lines += _table(payload[role])
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("train", "build", "collect", "score"))
    parser.add_argument("--only", default="", help="comma-separated sample names")
    parser.add_argument("--loss", default="mnrl", help="docsearch finetune --loss")
    parser.add_argument("--minutes", type=float, default=5.0, help="training minutes a sample")
    # one pass over 240 pairs is 30 steps of 8: the learning-rate schedule ends where the
    # training does (about 5 s a step on 2 cores), not cut off a fifth of the way down
    parser.add_argument("--pairs", type=int, default=240, help="pseudo-pairs sampled a sample")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    work = Work(args.loss)
    for folder in (work.adapters, work.indexes, work.legs):
        folder.mkdir(parents=True, exist_ok=True)
    if args.step == "train":
        train(args)
    elif args.step == "score":
        score(args)
    else:
        {"build": S.build, "collect": S.collect}[args.step](legs_args(args))


if __name__ == "__main__":
    main()
