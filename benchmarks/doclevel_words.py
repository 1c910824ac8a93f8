"""What counting each query word once would cost the lexical document rule: `results/doclevel_words.{json,md}`.

    nice -n 10 python benchmarks/doclevel_words.py [--cache /work/cache/doclevel]

Lance's BM25 adds a word's score once for every time the query repeats it, and it walks that
word's postings as often: a 200-word query of synthetic text searched 100k chunks in about 50 ms
as written and 30 ms with its repeats removed (results/speed.md notes). Removing them also
changes the ranking (a query word's weight no longer grows with its count). This collects the
chunk and whole-document BM25 legs again with each query's words deduplicated (lower case,
first occurrence kept; a sibling cache folder that reuses the indexes) and scores the lexical
rule with either leg, or both, deduplicated, tuning and test queries apart.
Not here: product code (the store searches the query as written).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import doclevel as D
import numpy as np
from eval_sets import DOCLEVEL_SAMPLES, RESULTS, machine, machine_lines, write_results

WORD = re.compile(r"[^\W_]+")  # Lance's simple tokenizer splits at anything not alphanumeric
LONG_WORDS = 24  # fusion.document_rule's threshold for the lexical rule in hybrid
VARIANTS = ("as written", "chunk leg once", "document leg once", "both once")


def once(text: str) -> str:
    """`text`'s words, each once, in order of first appearance."""
    return " ".join(dict.fromkeys(w.lower() for w in WORD.findall(text)))


def groups(cache: Path, deduplicated: bool) -> list[D.GroupData]:
    if not deduplicated:
        return [D.build_group(g, cache) for g in DOCLEVEL_SAMPLES]
    written, references = D.group_queries, D.whole_doc_references
    D.group_queries = lambda group, corpus: [
        dataclasses.replace(q, text=once(q.text)) for q in written(group, corpus)
    ]
    D.whole_doc_references = lambda *args, **kwargs: {}  # not a leg of the lexical rule
    try:
        return [D.build_group(g, cache) for g in DOCLEVEL_SAMPLES]
    finally:
        D.group_queries, D.whole_doc_references = written, references


def with_legs(doc_from: D.GroupData, chunk_from: D.GroupData) -> D.GroupData:
    """`doc_from` with its lexical rule fused from `doc_from`'s document leg and `chunk_from`'s
    chunk leg."""
    (doc_leg, doc_weight), (chunk_leg, chunk_weight) = D.LEXICAL_MODE_LEGS
    fused = D.fuse(
        [(doc_from.legs[doc_leg], doc_weight), (chunk_from.legs[chunk_leg], chunk_weight)],
        "minmax",
    )
    return dataclasses.replace(doc_from, legs={**doc_from.legs, D.LEXICAL_MODE: fused})


def score(variant: list[D.GroupData], words: np.ndarray) -> dict[str, Any]:
    """{"dataset role all|long": [mean nDCG@10, queries]} of the lexical rule."""
    scorer = D.Scorer(variant)
    values = scorer.score(D.single(D.LEXICAL_MODE))
    out: dict[str, Any] = {}
    for dataset in D.DATASETS:
        for role in ("tune", "test"):
            for which, length in (("all", words >= 0), ("long", words >= LONG_WORDS)):
                mask = (scorer.dataset == dataset) & (scorer.role == role) & length
                if mask.any():
                    key = f"{dataset} {role} {which}"
                    out[key] = [float(values[mask].mean()), int(mask.sum())]
    return out


def markdown(report: dict[str, Any]) -> str:
    scores = report["scores"]
    lines = [
        "# The lexical document rule with each query word counted once",
        "",
        *machine_lines(report["machine"], report["command"]),
        f"- nDCG@10 of `{D.LEXICAL_MODE}` (minmax(0.7 whole-document BM25 + 0.3 chunk BM25 "
        f"sum@5), MiniLM index); long: queries of {LONG_WORDS} words or more; (n) = queries",
        "",
        "| queries (n) | " + " | ".join(VARIANTS) + " |",
        "|---|" + "---|" * len(VARIANTS),
    ]
    for key, (_, n) in scores[VARIANTS[0]].items():
        cells = " | ".join(f"{scores[v][key][0]:.4f}" for v in VARIANTS)
        lines.append(f"| {key} ({n}) | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=D.DEFAULT_DIR)
    args = parser.parse_args()
    written = groups(args.cache, deduplicated=False)
    sibling = args.cache.with_name(args.cache.name + "-words-once")
    sibling.mkdir(exist_ok=True)
    if not (sibling / "eval").exists():  # the same indexes: only the searches are new
        (sibling / "eval").symlink_to((args.cache / "eval").resolve())
    deduplicated = groups(sibling, deduplicated=True)
    words = np.concatenate([[len(q.text.split()) for q in g.queries] for g in written])
    variants = {
        VARIANTS[0]: written,
        VARIANTS[1]: [with_legs(a, b) for a, b in zip(written, deduplicated, strict=True)],
        VARIANTS[2]: [with_legs(b, a) for a, b in zip(written, deduplicated, strict=True)],
        VARIANTS[3]: deduplicated,
    }
    report = {
        "machine": machine(),
        "command": " ".join(["python", "benchmarks/doclevel_words.py", *sys.argv[1:]]),
        "scores": {name: score(variant, words) for name, variant in variants.items()},
    }
    write_results(RESULTS, "doclevel_words", report, markdown(report))


if __name__ == "__main__":
    main()
