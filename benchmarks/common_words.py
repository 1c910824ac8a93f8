"""What leaving the common words out of long queries costs in quality and saves in time:
`results/common_words.{json,md}` (`docsearch/common_words.py` says what a common word is).

    nice -n 10 python benchmarks/common_words.py [--cache DIR] [--shares 0.9 0.7 0.5 0.4 0.3]
    python benchmarks/common_words.py --speed-only --work DIR   # the timing half alone

Quality: every corpus of the quality table (eval_sets.TABLE, full size) is indexed through the
real pipeline without an encoder, in chunks of CHUNK_WORDS words (about one MiniLM window of
English), and kept in `--cache`. Every query of fusion.LONG_QUERY_WORDS words or more (the only
ones the share changes, and those hybrid ranks by the lexical rule) is searched in lexical mode
at each share and without it (`none`: every word kept), and scored by nDCG@10, tuning and test
queries apart (train/val splits, or query_roles.py's seeded document split for a set without).
The share is picked on tuning queries only: the most words left out (smallest share) whose
tuning nDCG@10 stays within GATE of `none` on every dataset, and again with each dataset held
out (picked on the others' tuning queries, scored on its own test queries).
Speed: speed.py's synthetic and real-text collections (kept in `--work`), 200-word queries,
hybrid as served (such a query takes the lexical rule and is not encoded), each share and
`none` in interleaved rounds, p50/p95 ms; and what counting the common words once per version
of the chunks table costs the first search.
Not here: product code (`docsearch.common_words.COMMON_SHARE` is set per run and put back).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np  # noqa: E402

from benchmarks import (
    query_roles,  # noqa: E402
    speed,  # noqa: E402
)
from benchmarks.eval_sets import (  # noqa: E402
    RESULTS,
    TABLE,
    cache_dir,  # noqa: E402
    load_group,
    machine,
    machine_lines,
    write_results,
)
from docsearch import common_words  # noqa: E402
from docsearch.config import Settings  # noqa: E402
from docsearch.evaluation import EvalIndex, ndcg_at_k  # noqa: E402
from docsearch.fusion import LONG_QUERY_WORDS  # noqa: E402

CHUNK_WORDS = 192  # MiniLM's 256-token window holds about this many English words
GATE = 0.005  # nDCG@10 a share may cost on any dataset's tuning queries (issue 21's gate)
SHARES = (0.9, 0.7, 0.5, 0.4, 0.3)
NONE = "none"
PRODUCT_SHARE = common_words.COMMON_SHARE  # the shipped share (the word lists are at it)


def long_queries(group: Any, corpus: set[str]) -> list[query_roles.Query]:
    return [
        q
        for q in query_roles.group_queries(group, corpus)
        if len(q.text.split()) >= LONG_QUERY_WORDS
    ]


def quality(cache: Path, shares: list[float]) -> dict[str, Any]:
    """{dataset: {role: {share: [nDCG@10 per query]}}} and each index's size."""
    scores: dict[str, Any] = {}
    sizes: dict[str, Any] = {}
    settings = Settings().model_copy(update={"max_tokens": CHUNK_WORDS})
    for group in TABLE:
        index_set, _ = load_group(group)
        queries = long_queries(group, set(index_set.corpus))
        with EvalIndex(index_set, encoder="none", settings=settings, cache=cache) as index:
            retriever = index.retriever()
            common_words.COMMON_SHARE = PRODUCT_SHARE
            held = sorted(common_words.common_words(retriever.store))
            sizes[group.corpus] = {
                "documents": len(index_set.corpus),
                "chunks": index.chunks,
                "long_queries": len(queries),
                "common_words": held,
            }
            for share in [None, *shares]:
                common_words.COMMON_SHARE = share
                label = NONE if share is None else str(share)
                for q in queries:
                    hits = retriever.search(q.text, k=10, mode="lexical")
                    gain = ndcg_at_k([h.path for h in hits], q.qrels, 10)
                    by_role = scores.setdefault(q.dataset, {}).setdefault(q.role, {})
                    by_role.setdefault(label, []).append(gain)
            print(f"{group.corpus}: {sizes[group.corpus]}", file=sys.stderr)
    return {"scores": scores, "sizes": sizes}


def mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def pick(scores: dict[str, Any], shares: list[str], datasets: list[str]) -> str:
    """The smallest share whose tuning nDCG@10 stays within GATE of `none` on each of
    `datasets` (those with tuning queries); `none` if no share does."""
    tuned = [d for d in datasets if scores[d].get("tune")]
    for share in sorted(shares, key=float):
        tune = [scores[d]["tune"] for d in tuned]
        if all(mean(t[share]) >= mean(t[NONE]) - GATE for t in tune):
            return share
    return NONE


def choices(scores: dict[str, Any], shares: list[str]) -> dict[str, Any]:
    datasets = sorted(scores)
    held_out = {}
    for dataset in datasets:
        chosen = pick(scores, shares, [d for d in datasets if d != dataset])
        test = scores[dataset].get("test", {})
        held_out[dataset] = {
            "share": chosen,
            "test_none": mean(test.get(NONE, [])),
            "test_chosen": mean(test.get(chosen, [])),
            "queries": len(test.get(NONE, [])),
        }
    return {"in_domain": pick(scores, shares, datasets), "held_out": held_out}


def timing(work: str, shares: list[float], n_queries: int, rounds: int) -> dict[str, Any]:
    """p50/p95 ms of 200-word hybrid searches at 100k chunks per share, interleaved; and the
    first search's cost of counting the common words."""
    from docsearch.retriever import Retriever

    size = 100_000
    vocab = [f"w{i}" for i in range(20000)]
    out: dict[str, Any] = {}
    for text in ("synthetic", "real"):
        rng = np.random.default_rng(7)
        texts = speed.real_chunks(size) if text == "real" else None
        if texts is None:
            queries = [speed.long_query(rng, vocab) for _ in range(n_queries)]
        else:
            queries = speed.real_queries(rng, texts, n_queries)["200 words"]
        name = f"synthetic{size}" if texts is None else f"realtext{size}"
        speed.synthetic_collection(work, name, size, np.random.default_rng(0), vocab, texts)
        vectors = speed.PrecomputedQueries(speed.clustered(n_queries, rng, speed.CENTROIDS))
        retriever = Retriever(name, db=work, encoder=vectors)  # type: ignore[arg-type]
        common_words.COMMON_SHARE = PRODUCT_SHARE
        started = time.perf_counter()
        held = common_words.common_words(retriever.store)
        first = (time.perf_counter() - started) * 1000
        times: dict[str, list[float]] = {}
        loads = [os.getloadavg()[0]]
        for _ in range(rounds):
            for share in [None, *shares]:
                common_words.COMMON_SHARE = share
                search = partial(retriever.search, k=10, mode="hybrid")
                label = NONE if share is None else str(share)
                times.setdefault(label, []).extend(speed.timed_ms(search, queries))
            loads.append(os.getloadavg()[0])
        out[text] = {
            "count_ms": first,
            "common_words": sorted(held),
            "load": loads,
            "cells": {label: speed.percentiles(t) for label, t in times.items()},
        }
        print(f"{text}: {out[text]}", file=sys.stderr)
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Long queries without the collection's common words", ""]
    lines += machine_lines(report["machine"], report["command"])
    shares = [NONE, *[str(s) for s in report["shares"]]]
    quality = report.get("quality")
    if quality:
        lines += [
            f"- lexical-only indexes of the full corpora in {CHUNK_WORDS}-word chunks; queries of "
            f"{LONG_QUERY_WORDS} words or more, lexical mode (the rule hybrid gives them); "
            "nDCG@10; share: a word is left out of the query when more than that share of the "
            "chunks hold its stem (none: every word kept); (n) = queries",
            "",
            "| dataset | role (n) | " + " | ".join(shares) + " |",
            "|---|---|" + "---|" * len(shares),
        ]
        scores = quality["scores"]
        for dataset in sorted(scores):
            for role in ("tune", "test"):
                cell = scores[dataset].get(role)
                if not cell:
                    continue
                values = " | ".join(f"{mean(cell[s]):.4f}" for s in shares)
                lines.append(f"| {dataset} | {role} ({len(cell[NONE])}) | {values} |")
        lines += [
            "",
            f"| corpus | documents | chunks | long queries | common stems at {PRODUCT_SHARE} |",
        ]
        lines.append("|---|---|---|---|---|")
        for corpus, size in quality["sizes"].items():
            held = ", ".join(size["common_words"])
            lines.append(
                f"| {corpus} | {size['documents']:,} | {size['chunks']:,} | "
                f"{size['long_queries']} | {held} |"
            )
        picked = report["choices"]
        lines += [
            "",
            f"Chosen on every dataset's tuning queries (smallest share within {GATE} of none on "
            f"each): **{picked['in_domain']}**. Each dataset held out (chosen on the others' "
            "tuning queries, scored on its test queries):",
            "",
            "| held out | share chosen | test none | test chosen | change | (n) |",
            "|---|---|---|---|---|---|",
        ]
        for dataset, row in picked["held_out"].items():
            change = row["test_chosen"] - row["test_none"]
            lines.append(
                f"| {dataset} | {row['share']} | {row['test_none']:.4f} | "
                f"{row['test_chosen']:.4f} | {change:+.4f} | {row['queries']} |"
            )
    speed_part = report.get("speed")
    if speed_part:
        lines += [
            "",
            "Hybrid search as served, 200-word queries, 100,000 chunks (speed.py's collections; "
            "such a query is ranked by the lexical rule and not encoded), interleaved rounds:",
            "",
            "| text | share | p50 ms | p95 ms | load (1 min) |",
            "|---|---|---|---|---|",
        ]
        for text, cell in speed_part.items():
            load = f"{min(cell['load']):.1f}-{max(cell['load']):.1f}"
            for share in shares:
                p = cell["cells"][share]
                lines.append(
                    f"| {text} | {share} | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {load} |"
                )
        lines.append("")
        lines += [
            f"- {text}: counting the common words (once per version of the chunks table, on the "
            f"first long query) took {cell['count_ms']:.0f} ms; "
            f"{len(cell['common_words'])} stems are common at {PRODUCT_SHARE}"
            for text, cell in speed_part.items()
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=cache_dir("common-words"))
    parser.add_argument("--work", default=str(cache_dir("common-words") / "speed"))
    parser.add_argument("--shares", type=float, nargs="+", default=list(SHARES))
    parser.add_argument("--queries", type=int, default=20, help="timed queries per share")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--quality-only", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": machine(),
        "command": "python benchmarks/common_words.py " + " ".join(sys.argv[1:]),
        "shares": args.shares,
    }
    kept = common_words.COMMON_SHARE
    try:
        if not args.speed_only:
            report["quality"] = quality(args.cache, args.shares)
            labels = [str(s) for s in args.shares]
            report["choices"] = choices(report["quality"]["scores"], labels)
        if not args.quality_only:
            report["speed"] = timing(args.work, args.shares, args.queries, args.rounds)
    finally:
        common_words.COMMON_SHARE = kept
    from benchmarks.peers import NOTES, kept_notes

    notes = kept_notes(RESULTS / "common_words.md")
    text = markdown(report)
    write_results(RESULTS, "common_words", report, text + "\n" + NOTES + "\n" + notes)
    print(text)


if __name__ == "__main__":
    main()
