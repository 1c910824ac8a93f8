"""Decoder encoders compared on the same small samples: KV-Embedding against its baselines, and
the rungs of the LLM2Vec recipe.

    python benchmarks/decoder_quality.py --suite kv --model smollm2-135m
    python benchmarks/decoder_quality.py --suite kv --model gemma3-270m
    python benchmarks/decoder_quality.py --suite llm2vec --adapters ~/.cache/docsearch/llm2vec-recipe

Each run writes benchmarks/results/decoder_quality_<suite>_<model>.{json,md}.
- `kv`: KV-Embedding (calibrated layers), KV-Embedding with no re-routed layer (its prompt and
  pooling only), and the paper's training-free baselines: last-token, mean, PromptEOL, Echo.
- `llm2vec`: Uni (causal attention, mean pooling), Bi (bidirectional, untrained), Bi + MNTP,
  Bi + MNTP + SimCSE (the adapters written by benchmarks/llm2vec_recipe.py).
- `ablation`: KV-Embedding with one choice changed at a time (layer set, bias, prompt, pooling).

Every variant indexes the same seeded samples through the real pipeline (chunks of at most
`--cap` tokens; a document scores as its best chunk) and is scored in vector mode (the encoder
alone) and hybrid mode (the default search). Samples are small enough for a 135M-270M decoder
on one CPU thread, so differences under ~0.05 nDCG@10 are within noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import (  # noqa: E402
    DEFAULT_CACHE,
    RESULTS,
    SMALL,
    SMALL_CAP,
    load_group,
    machine,
    machine_lines,
    write_results,
)
from docsearch.evaluation import EvalIndex  # noqa: E402

SAMPLES = SMALL
MODES = ("vector", "hybrid")
Variant = tuple[str, str, dict[str, Any]]  # (label, encoder, options)


def kv_suite(model: str) -> list[Variant]:
    return [
        ("KV-Embedding", "kv-embedding", {"model": model}),
        (
            "KV-Embedding, no re-routing (prompt only)",
            "kv-embedding",
            {"model": model, "layers": []},
        ),
        ("last-token", "last-token", {"model": model}),
        ("mean", "mean", {"model": model}),
        ("PromptEOL", "prompteol", {"model": model}),
        ("Echo", "echo", {"model": model}),
    ]


MIDDLE_LAYERS = {"smollm2-135m": [14, 15, 16], "gemma3-270m": [8, 9, 10]}  # of 30 and 18 layers


def ablation_suite(model: str) -> list[Variant]:
    base = {"model": model}
    middle = MIDDLE_LAYERS.get(model, [8, 9, 10])
    return [
        ("KV-Embedding (defaults)", "kv-embedding", base),
        ("bias 0", "kv-embedding", base | {"bias": 0.0}),
        ("bias 3", "kv-embedding", base | {"bias": 3.0}),
        ("early layers 1-3", "kv-embedding", base | {"layers": [1, 2, 3]}),
        ("middle layers", "kv-embedding", base | {"layers": middle}),
        ("pooling mean", "kv-embedding", base | {"pooling": "mean"}),
        ("pooling last", "kv-embedding", base | {"pooling": "last"}),
        (
            "middle layers + pooling last",
            "kv-embedding",
            base | {"layers": middle, "pooling": "last"},
        ),
        (
            "no prompt",
            "kv-embedding",
            base | {"document_template": "{text}", "query_template": "{text}"},
        ),
    ]


def llm2vec_suite(model: str, adapters: Path) -> list[Variant]:
    base = {"model": model, "dtype": "bfloat16"}
    return [
        ("Uni (causal, mean)", "llm2vec", base | {"bidirectional": False}),
        ("Bi (untrained)", "llm2vec", base),
        ("Bi + MNTP", "llm2vec", base | {"adapter": str(adapters / "mntp")}),
        ("Bi + MNTP + SimCSE", "llm2vec", base | {"adapter": str(adapters / "simcse")}),
    ]


def run_variant(variant: Variant, args: argparse.Namespace) -> dict[str, Any]:
    label, encoder, options = variant
    cells: dict[str, dict[str, Any]] = {m: {} for m in MODES}
    index_seconds = 0.0
    for group in SAMPLES:
        index_set, sets = load_group(group, seed=args.seed)
        with EvalIndex(
            index_set, encoder=encoder, options=options, cap=args.cap, cache=args.cache
        ) as index:
            index_seconds += index.index_seconds
            print(f"[{label}] {group.corpus}: {index.chunks} chunks, "
                  f"{index.index_seconds:.0f} s{' (cached)' if index.cached else ''}",
                  file=sys.stderr, flush=True)  # fmt: skip
            for key, rset in sets.items():
                for mode in MODES:
                    result = index.evaluate(mode, queries=rset)
                    cells[mode][key.split(":")[0]] = {
                        **{k: round(v, 4) for k, v in result.metrics.items()},
                        "queries": result.queries,
                        "documents": result.documents,
                        "chunks": result.chunks,
                    }
                    print(f"  {key} {mode}: nDCG@10 {result.metrics['ndcg@10']:.4f}",
                          file=sys.stderr, flush=True)  # fmt: skip
    return {
        "label": label,
        "encoder": encoder,
        "options": options,
        "index_seconds": round(index_seconds, 1),
        "cells": cells,
    }


def markdown(payload: dict[str, Any]) -> str:
    rows, datasets = payload["rows"], payload["datasets"]
    lines = [f"# Decoder encoders: suite `{payload['suite']}`, model `{payload['model']}`", ""]
    lines += machine_lines(payload["machine"], payload["command"])
    lines += [
        f"- chunks of at most {payload['cap']} tokens; document level (best chunk); "
        "seeded samples (sizes below); differences under ~0.05 are within noise",
        "",
    ]
    for mode in MODES:
        lines += [f"## nDCG@10, {mode}", ""]
        lines += ["| variant | " + " | ".join(datasets) + " | mean | index s |"]
        lines += ["|---" * (len(datasets) + 3) + "|"]
        for row in rows:
            values = [row["cells"][mode].get(d, {}).get("ndcg@10") for d in datasets]
            known = [v for v in values if v is not None]
            mean = sum(known) / len(known) if known else float("nan")
            shown = " | ".join("-" if v is None else f"{v:.4f}" for v in values)
            lines.append(f"| {row['label']} | {shown} | {mean:.4f} | {row['index_seconds']} |")
        lines.append("")
    lines += ["## Samples", ""]
    first = rows[0]["cells"][MODES[0]] if rows else {}
    for dataset in datasets:
        cell = first.get(dataset)
        if cell:
            lines.append(
                f"- {dataset}: {cell['queries']} queries over {cell['documents']} documents "
                f"({cell['chunks']} chunks)"
            )
    lines += ["", "## Variants", ""]
    lines += [f"- {r['label']}: `{r['encoder']}` {json.dumps(r['options'])}" for r in rows]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=("kv", "llm2vec", "ablation"), default="kv")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--adapters", type=Path, default=Path.home() / ".cache" / "docsearch" / "llm2vec-recipe"
    )
    parser.add_argument(
        "--only",
        help="semicolon-separated variant labels to run (labels contain commas; default: all)",
    )
    parser.add_argument("--cap", type=int, default=SMALL_CAP, help="chunk size cap in tokens")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def main() -> None:
    import torch

    args = parse_args()
    torch.set_num_threads(args.threads)
    suites = {
        "kv": lambda: kv_suite(args.model),
        "ablation": lambda: ablation_suite(args.model),
        "llm2vec": lambda: llm2vec_suite(args.model, args.adapters),
    }
    variants = suites[args.suite]()
    if args.only:
        wanted = {label.strip() for label in args.only.split(";")}
        unknown = wanted - {v[0] for v in variants}
        if unknown:
            sys.exit(
                f"error: unknown variant(s) {sorted(unknown)}; known: {[v[0] for v in variants]}"
            )
        variants = [v for v in variants if v[0] in wanted]
    started, info = time.perf_counter(), machine()
    rows = []
    stem = f"decoder_quality_{args.suite}_{args.model}"
    for variant in variants:
        rows.append(run_variant(variant, args))
        payload = {
            "suite": args.suite,
            "model": args.model,
            "cap": args.cap,
            "machine": info,
            "command": "python " + " ".join(sys.argv),
            "datasets": [name for g in SAMPLES for name, _ in g.datasets],
            "rows": rows,
            "seconds": round(time.perf_counter() - started, 1),
        }
        write_results(args.out, stem, payload, markdown(payload))  # after each variant
    print((args.out / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
