"""Quality of MiniLM's faster inference precisions against fp32: the gate for making one the default.

    python benchmarks/precision.py [--precisions fp32,bf16,int8] [--scifact-docs 800]
        [--qmsum-queries 242] [--qmsum-docs 38] [--cache DIR]

For scifact and qmsum (test queries; seeded samples that keep every judged document, the same
documents for every precision) the corpus is indexed once per precision through the real
pipeline (`EvalIndex`, `--option precision=...`), then searched in hybrid (the default) and
vector mode. Reports nDCG@10 per precision, its difference to fp32, and the mean and minimum
cosine of each chunk's vector to its fp32 vector. The gate (issue 21): mean cosine >= 0.999 and
hybrid nDCG@10 within 0.005 of fp32 on both sets. Writes benchmarks/results/precision.{json,md};
benchmarks/speed.py puts the table into speed.md beside the speed of each precision.
Index times are printed but not compared: the machine is shared (speed.py times precisions
in interleaved rounds instead). qmsum's default is its whole test split (242 queries, the 38
meetings they judge): on a 40-query sample one query whose answer moves from rank 1 to 2 moves
nDCG@10 by 0.009, more than the gate allows. Notes under the NOTES marker in precision.md
survive a re-run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import (  # noqa: E402
    RESULTS,
    Group,
    cache_dir,  # noqa: E402
    load_group,
    machine,
    machine_lines,
    write_results,
)
from docsearch.evaluation import EvalIndex  # noqa: E402

GATE_COSINE = 0.999
GATE_NDCG = 0.005
MODES = ("hybrid", "vector")


def groups(args: argparse.Namespace) -> list[Group]:
    return [
        Group("scifact", (("scifact", "test"),), max_docs=args.scifact_docs),
        Group(
            "qmsum",
            (("qmsum", "test"),),
            max_docs=args.qmsum_docs,
            max_queries=args.qmsum_queries,
        ),
    ]


def chunk_vectors(index: EvalIndex) -> dict[str, np.ndarray]:
    store = index.retriever().store
    rows = store.rows("ordinal >= 0", ["id", "vector"])
    return {r["id"]: np.asarray(r["vector"], dtype=np.float32) for r in rows}


def cosines(reference: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> dict[str, float]:
    shared = sorted(set(reference) & set(other))
    a = np.stack([reference[k] for k in shared])
    b = np.stack([other[k] for k in shared])
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"mean": float(cos.mean()), "min": float(cos.min()), "chunks": len(shared)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in groups(args):
        index_set, sets = load_group(group, seed=args.seed)
        [(key, queries)] = sets.items()
        name = key.split(":")[0]
        cells: dict[str, Any] = {}
        reference: dict[str, np.ndarray] = {}
        for how in args.precisions:
            options = {"precision": how}
            with EvalIndex(
                index_set, encoder="sentence-transformers", options=options, cache=args.cache
            ) as index:
                vectors = chunk_vectors(index)
                reference = reference or vectors  # fp32 comes first
                cell = {
                    "chunks": index.chunks,
                    "documents": len(index_set.corpus),
                    "queries": len(queries.queries),
                    "index_seconds": round(index.index_seconds, 1),
                    "cosine": cosines(reference, vectors),
                }
                for mode in MODES:
                    result = index.evaluate(mode, queries=queries)
                    cell[mode] = round(result.metrics["ndcg@10"], 4)
                cells[how] = cell
                print(f"{name} {how}: {cell}", file=sys.stderr)
        out[name] = {"notes": queries.notes, "cells": cells}
    return out


def markdown(result: dict[str, Any], info: dict[str, Any], command: str) -> str:
    lines = [
        "# Inference precision against fp32 (all-MiniLM-L6-v2)",
        "",
        *machine_lines(info, command),
        "",
        *table(result),
    ]
    return "\n".join(lines) + "\n"


def table(result: dict[str, Any]) -> list[str]:
    """The quality table (also pasted into speed.md by benchmarks/speed.py)."""
    lines = [
        "| set | precision | chunks | mean cosine to fp32 | min cosine | hybrid nDCG@10 | "
        "vs fp32 | vector nDCG@10 | vs fp32 | gate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, data in result["sets"].items():
        cells = data["cells"]
        base = cells.get("fp32", {})
        for how, cell in cells.items():
            dh = cell["hybrid"] - base.get("hybrid", cell["hybrid"])
            dv = cell["vector"] - base.get("vector", cell["vector"])
            ok = cell["cosine"]["mean"] >= GATE_COSINE and abs(dh) <= GATE_NDCG
            lines.append(
                f"| {name} | {how} | {cell['chunks']:,} | {cell['cosine']['mean']:.5f} | "
                f"{cell['cosine']['min']:.4f} | {cell['hybrid']:.4f} | {dh:+.4f} | "
                f"{cell['vector']:.4f} | {dv:+.4f} | {'pass' if ok else '**fail**'} |"
            )
    notes = {n for data in result["sets"].values() for n in data["notes"]}
    lines += [
        "",
        f"Gate: mean cosine >= {GATE_COSINE} and hybrid nDCG@10 within {GATE_NDCG} of fp32. "
        "Samples: " + "; ".join(sorted(notes)) + ".",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precisions", default="fp32,bf16,int8")
    parser.add_argument("--scifact-docs", type=int, default=800)
    parser.add_argument("--qmsum-docs", type=int, default=38)
    parser.add_argument("--qmsum-queries", type=int, default=242)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=cache_dir("precision"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.precisions = args.precisions.split(",")
    if args.precisions[0] != "fp32":
        parser.error("--precisions must start with fp32 (the reference)")
    from docsearch.encoders.precision import int8_available

    if "int8" in args.precisions and not int8_available():
        print("int8 left out: this CPU has no int8 dot-product instructions", file=sys.stderr)
        args.precisions.remove("int8")
    info = machine()
    command = "python benchmarks/precision.py " + " ".join(sys.argv[1:])
    result = {"machine": info, "command": command, "load": os.getloadavg(), "sets": run(args)}
    from benchmarks.peers import NOTES, kept_notes

    notes = kept_notes(args.out / "precision.md")
    text = markdown(result, info, command)
    write_results(args.out, "precision", result, text + "\n" + NOTES + "\n" + notes)
    from benchmarks.precision_classes import into_precision_md

    into_precision_md(args.out)  # the per-class table (precision_classes.py), kept
    print(text)


if __name__ == "__main__":
    main()
