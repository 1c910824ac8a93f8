"""What shallower search depths would cost the lexical document rule: `results/doclevel_depth.{json,md}`.

    nice -n 10 python benchmarks/doclevel_depth.py [--cache /work/cache/doclevel]

The lexical rule (`--mode lexical`, and the default hybrid for a query of 24 words or more)
fuses whole-document BM25 over the top DOC_POOL documents with chunk BM25 summed over each
document's best five of the top CHUNK_POOL chunks, min-max per leg. Both depths are 500. At
100k chunks a 200-word query spends most of its time in those two searches
(results/speed.md), and a shallower search is faster, but it also changes the ranking: the
min-max lists get shorter and fewer documents get chunk evidence. This scores the rule at other
depths from doclevel.py's cache (nothing is indexed), on the long queries (24 words or more)
of every set, tuning and test queries apart.
Not here: product code (docsearch.retriever's CHUNK_POOL and DOC_POOL stay 500).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import doclevel as D
import numpy as np
from eval_sets import DOCLEVEL_SAMPLES, RESULTS, machine, machine_lines, write_results

DEPTHS = ((500, 500), (200, 500), (500, 100), (300, 300), (200, 200), (100, 100))
LONG_WORDS = 24  # fusion.document_rule's threshold for the lexical rule in hybrid


def scores_at(chunk_pool: int, doc_pool: int, cache: Path) -> dict[str, dict[str, Any]]:
    """{dataset: {role: (mean nDCG@10, queries)}} of the lexical rule on long queries."""
    D.CHUNK_POOL, D.DOC_POOL = chunk_pool, doc_pool
    groups = [D.build_group(g, cache) for g in DOCLEVEL_SAMPLES]
    scorer = D.Scorer(groups)
    words = np.concatenate([[len(q.text.split()) for q in g.queries] for g in groups])
    values = scorer.score(D.single(D.LEXICAL_MODE))
    out: dict[str, dict[str, Any]] = {}
    for dataset in D.DATASETS:
        for role in ("tune", "test"):
            mask = (scorer.dataset == dataset) & (scorer.role == role) & (words >= LONG_WORDS)
            if mask.any():
                out.setdefault(dataset, {})[role] = [float(values[mask].mean()), int(mask.sum())]
    return out


def markdown(report: dict[str, Any]) -> str:
    rows = report["depths"]
    first = rows[0]["scores"]
    cells = [(d, r) for d in first for r in ("tune", "test") if r in first[d]]
    head = " | ".join(f"{d} {r} ({first[d][r][1]})" for d, r in cells)
    lines = [
        "# The lexical document rule at shallower search depths",
        "",
        *machine_lines(report["machine"], report["command"]),
        f"- nDCG@10 of `{D.LEXICAL_MODE}` (minmax(0.7 whole-document BM25 + 0.3 chunk BM25 "
        f"sum@5), MiniLM index) on the queries of {LONG_WORDS} words or more; (n) = queries; "
        "the product searches 500 chunks and 500 documents",
        "",
        f"| chunks searched | documents searched | {head} |",
        "|---|---|" + "---|" * len(cells),
    ]
    for row in rows:
        vals = " | ".join(f"{row['scores'][d][r][0]:.4f}" for d, r in cells)
        lines.append(f"| {row['chunk_pool']} | {row['doc_pool']} | {vals} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=D.DEFAULT_DIR)
    args = parser.parse_args()
    depths = []
    for chunk_pool, doc_pool in DEPTHS:
        scores = scores_at(chunk_pool, doc_pool, args.cache)
        depths.append({"chunk_pool": chunk_pool, "doc_pool": doc_pool, "scores": scores})
        print(f"depths {chunk_pool}/{doc_pool}: {scores}", file=sys.stderr)
    report = {
        "machine": machine(),
        "command": " ".join(["python", "benchmarks/doclevel_depth.py", *sys.argv[1:]]),
        "depths": depths,
    }
    write_results(RESULTS, "doclevel_depth", report, markdown(report))


if __name__ == "__main__":
    main()
