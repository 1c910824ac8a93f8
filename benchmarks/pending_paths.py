"""What hiding half-written files from search costs a short search: `results/pending_paths.md`.

    python benchmarks/pending_paths.py [--work DIR] [--docs 510] [--rounds 7]

Every search leg reads the pending paths (`Store` docs: "crash states") from the table version
it searches, from the manifest already open. This measures, on CUAD's contracts (the real
corpus in /work/shared/data/cuad, written out as .txt files and indexed lexical-only through
`docsearch index`'s service):
- the reading itself: `pending_paths(dataset)` per call, in microseconds;
- short queries (CUAD's own below fusion.LONG_QUERY_WORDS, 19-23 words; its shortest) in lexical mode, documents and passages, p50/p95 ms,
  in interleaved rounds (each variant first in turn): as shipped (nothing pending: no filter added), with the read turned
  off (as before this change), and with one file pending (its rows filtered out: the state a
  killed run leaves until the next run).
Not here: vector legs (they read the pending paths the same way; no encoder runs here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA, cache_dir  # noqa: E402
from docsearch.fusion import LONG_QUERY_WORDS  # noqa: E402

CUAD = DATA / "cuad"
RESULTS = Path(__file__).parent / "results"


def corpus_folder(work: Path, docs: int) -> Path:
    folder = work / f"cuad-{docs}"
    if folder.exists():
        return folder
    folder.mkdir(parents=True)
    with open(CUAD / "corpus.jsonl") as lines:
        for i, line in enumerate(lines):
            if i >= docs:
                break
            doc = json.loads(line)
            (folder / f"doc{i:04d}.txt").write_text(f"{doc.get('title', '')}\n\n{doc['text']}\n")
    return folder


def queries(limit: int = 60) -> list[str]:
    with open(CUAD / "queries.jsonl") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    short = [t for t in texts if len(t.split()) < LONG_QUERY_WORDS]
    return short[:limit]


def timed(search: Any, texts: list[str]) -> list[float]:
    out = []
    for text in texts:
        started = time.perf_counter()
        search(text)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default=str(cache_dir("pending-paths")))
    parser.add_argument("--docs", type=int, default=510)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from docsearch.config import Settings
    from docsearch.indexer.service import index
    from docsearch.retriever import Retriever
    from docsearch.store import reads as store_module

    work = Path(args.work)
    folder = corpus_folder(work, args.docs)
    db = str(work / f"db-{args.docs}")
    started = time.perf_counter()
    index(folder, settings=Settings(db=db), collection="cuad", encoder="none")
    print(f"indexed in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    retriever = Retriever("cuad", db=db)
    store = retriever.store
    dataset = store.dataset("chunks")
    calls = 20_000
    started = time.perf_counter()
    for _ in range(calls):
        store_module.pending_paths(dataset)
    read_us = (time.perf_counter() - started) / calls * 1e6

    real = store_module.pending_paths
    one = next(iter(store.file_records()))

    def variant(name: str) -> None:
        if name == "read off":
            store_module.pending_paths = lambda dataset: frozenset()  # type: ignore[assignment]
        elif name == "one pending":
            store_module.pending_paths = lambda dataset: frozenset([one])  # type: ignore[assignment]
        else:
            store_module.pending_paths = real  # type: ignore[assignment]

    texts = queries()
    names = ["shipped", "read off", "one pending"]
    times: dict[str, dict[str, list[float]]] = {n: {"document": [], "passage": []} for n in names}
    for granularity in ("document", "passage"):

        def search(text: str, granularity: str = granularity) -> Any:
            return retriever.search(text, k=10, mode="lexical", granularity=granularity)

        timed(search, texts)  # warm
        for round_ in range(args.rounds):
            for name in names[round_ % 3 :] + names[: round_ % 3]:  # each variant leads a round
                variant(name)
                times[name][granularity] += timed(search, texts)
    variant("shipped")
    rows = []
    for name in names:
        for granularity, values in times[name].items():
            values.sort()
            p50 = statistics.median(values)
            p95 = values[int(0.95 * (len(values) - 1))]
            rows.append(f"| {name} | {granularity} | {len(values)} | {p50:.1f} | {p95:.1f} |")
    chunks = store.count_chunks()
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    report = "\n".join(
        [
            "# Hiding half-written files: the cost to a short search",
            "",
            f"Command: `python benchmarks/pending_paths.py --docs {args.docs} "
            f"--rounds {args.rounds}` (2 CPU cores shared with other jobs; load average at the "
            f"end {load} over 1/5/15 min).",
            f"CUAD, {args.docs} contracts, {chunks:,} chunks, lexical-only; "
            f"{len(texts)} CUAD queries of 19-23 words (its short ones).",
            "",
            f"Reading the pending paths from an open table version: {read_us:.2f} µs a call.",
            "",
            "| variant | granularity | searches | p50 ms | p95 ms |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pending_paths.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
