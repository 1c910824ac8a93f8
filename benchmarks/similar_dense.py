"""Query by document, dense and hybrid, on a subsample of irled2017-precedent.

    python benchmarks/similar_dense.py [--queries 20] [--docs 150] [--seed 0]
        [--build-only | --skip-latency | --latency-only]

A MiniLM index of all 2,000 prior cases (15M words, about 80k chunks) takes hours on 2 CPU
cores, so this measures a stated subsample: `--queries` seeded queries, every document any of
them cites, and seeded random other cases up to `--docs` in all (RetrievalSet.sample_queries,
then .subsample). Lexical, vector and hybrid run on that one index, and the whole-document BM25
baseline (k1 0.9, b 0.4, the whole case as the query, as the data README computes it) is scored
on the same documents and queries, so each comparison is like for like.

The query documents' chunk vectors are computed once and kept in `--cache` (keyed by text), so a
rerun (other rules, the latency pass) embeds nothing twice; the latency pass embeds every query
afresh (no cache). Writes results/similar_dense.json; results/similar.md gets its table from
benchmarks/similar.py --report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA  # noqa: E402
from benchmarks.similar import score_halves, seeded_halves  # noqa: E402
from docsearch.corpora.beir import RetrievalSet  # noqa: E402
from docsearch.evaluation import EvalIndex, load_dataset, score_run  # noqa: E402
from docsearch.fusion import SIMILAR_RULES, Fusion  # noqa: E402
from docsearch.indexer.extract import build_document  # noqa: E402

HERE = Path(__file__).resolve().parent
ENCODER = "sentence-transformers"  # all-MiniLM-L6-v2, the default encoder


class RememberingEncoder:
    """The collection's encoder, remembering the document vectors it made (by text) in a file,
    so the query documents are embedded once over all runs of this script."""

    def __init__(self, encoder: Any, path: Path) -> None:
        self.inner, self.path = encoder, path
        self.known: dict[str, np.ndarray] = {}
        if path.is_file():
            with np.load(path) as saved:
                self.known = {key: saved[key] for key in saved.files}
        self.fresh = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = [t for t, k in zip(texts, keys, strict=True) if k not in self.known]
        if missing:
            made = self.inner.encode_documents(missing)
            for text, vector in zip(missing, made, strict=True):
                self.known[hashlib.sha1(text.encode()).hexdigest()] = vector
            self.fresh += len(missing)
        return np.stack([self.known[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        np.savez(self.path, **self.known)


def sample(data: str, queries: int, docs: int, seed: int) -> RetrievalSet:
    return load_dataset(data, "all").sample_queries(queries, seed).subsample(docs, seed)


def bm25_baseline(rset: RetrievalSet, k1: float = 0.9, b: float = 0.4) -> dict[str, list[str]]:
    """Whole-document Okapi BM25 with the whole case as the query, over `rset`'s corpus."""
    token = re.compile(r"\w+")
    docs = {d: Counter(token.findall(doc.body.lower())) for d, doc in rset.corpus.items()}
    lengths = {d: sum(c.values()) for d, c in docs.items()}
    mean = sum(lengths.values()) / len(lengths)
    df: Counter[str] = Counter()
    for counts in docs.values():
        df.update(counts.keys())
    n = len(docs)
    run = {}
    for qid, text in rset.queries.items():
        terms = Counter(token.findall(text.lower()))
        scores = {}
        for d, counts in docs.items():
            norm = k1 * (1 - b + b * lengths[d] / mean)
            score = 0.0
            for term, qtf in terms.items():
                tf = counts.get(term)
                if tf:
                    idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    score += qtf * idf * tf * (k1 + 1) / (tf + norm)
            scores[d] = score
        run[qid] = sorted(scores, key=lambda d: -scores[d])[:100]
    return run


def similar_runs(
    index: EvalIndex,
    encoder: Any,
    rules: dict[str, tuple[str, Fusion]],
    halves: dict[str, list[str]] | None = None,
) -> dict:  # type: ignore[type-arg]
    """rule name -> (mode, fusion) -> scored over the sample's queries (and over each of
    `halves`, under "halves")."""
    from docsearch.retriever import Retriever

    retriever = Retriever(index.name, db=index.db, encoder=encoder)
    docs = {q: build_document(q, "", [t]) for q, t in index.rset.queries.items()}
    out = {}
    for name, (mode, rule) in rules.items():
        began = time.perf_counter()
        run = {
            q: [h.path for h in retriever.similar(d, k=100, mode=mode, explain=False, rule=rule)]
            for q, d in docs.items()
        }
        means, _ = score_run(run, index.rset.qrels)
        if halves:
            means["halves"] = score_halves(run, index.rset.qrels, halves)
        out[name] = means
        print(name, round(time.perf_counter() - began), "s", json.dumps(means), flush=True)
    return out


def full_rules() -> dict[str, tuple[str, Fusion]]:
    """What the full set measures (each rule costs minutes there): the legs, the defaults and
    two neighbours of the hybrid default."""
    everything = rules()
    names = [
        "lexical",
        "vector: doc-mean",
        "vector: chunk matches",
        "vector: doc-mean + chunks",
        "hybrid: lexical 0.5 + doc-mean 0.5",
        "hybrid: lexical 0.5 + doc-mean 0.25 + chunks 0.25",
        "hybrid: lexical 0.7 + doc-mean 0.15 + chunks 0.15",
    ]
    return {name: everything[name] for name in names}


def cap_sweep(
    index: EvalIndex, encoder: Any, caps: Sequence[int], halves: dict[str, list[str]]
) -> dict[str, Any]:
    """The shipped vector and hybrid rules with the query document embedded through at most
    `cap` of its chunks (similar.MAX_QUERY_CHUNKS; 0: all of them)."""
    from docsearch import similar

    shipped = {mode: (mode, SIMILAR_RULES[mode]) for mode in ("vector", "hybrid")}
    kept, out = similar.MAX_QUERY_CHUNKS, {}
    try:
        for cap in caps:
            similar.MAX_QUERY_CHUNKS = cap or 1_000_000
            scored = similar_runs(index, encoder, shipped, halves)
            out[str(cap)] = scored
    finally:
        similar.MAX_QUERY_CHUNKS = kept
    return out


class TimedEncoder:
    """The collection's encoder, adding up the seconds spent embedding (the query document)."""

    def __init__(self, encoder: Any) -> None:
        self.inner, self.seconds = encoder, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        began = time.perf_counter()
        try:
            return np.asarray(self.inner.encode_documents(texts))
        finally:
            self.seconds += time.perf_counter() - began


def latency(index: EvalIndex, mode: str, qids: Sequence[str]) -> dict[str, Any]:
    """Seconds per query document (k=10, with explanations), each embedded afresh; the share
    spent embedding it is reported on its own."""
    from docsearch.retriever import Retriever

    timed = TimedEncoder(index.encoder)
    retriever = Retriever(index.name, db=index.db, encoder=timed)  # type: ignore[arg-type]
    retriever.similar(build_document("warm", "", [index.rset.queries[qids[0]]]), k=10, mode=mode)
    total, embed = [], []
    for qid in qids:
        timed.seconds = 0.0
        began = time.perf_counter()
        retriever.similar(build_document(qid, "", [index.rset.queries[qid]]), k=10, mode=mode)
        total.append(time.perf_counter() - began)
        embed.append(timed.seconds)
    return {
        "queries": len(qids),
        "p50_s": round(statistics.median(total), 3),
        "p50_embedding_s": round(statistics.median(embed), 3),
        "p50_rest_s": round(statistics.median(t - e for t, e in zip(total, embed, strict=True)), 3),
    }


def rules() -> dict[str, tuple[str, Fusion]]:
    """What is measured: each leg alone, and the hybrid families (z-scores over the legs)."""
    out = {
        "lexical": ("lexical", SIMILAR_RULES["lexical"]),
        "vector: doc-mean": ("vector", Fusion("maxnorm", {"doc_dense": 1.0})),
        "vector: chunk matches": ("vector", Fusion("maxnorm", {"chunk_dense": 1.0})),
        "vector: doc-mean + chunks": (
            "vector",
            Fusion("zscore", {"doc_dense": 0.5, "chunk_dense": 0.5}),
        ),
    }
    for lexical in (0.5, 0.6, 0.7, 0.8, 0.9):
        dense = round(1 - lexical, 2)
        out[f"hybrid: lexical {lexical} + doc-mean {dense}"] = (
            "hybrid",
            Fusion("zscore", {"doc_lexical": lexical, "doc_dense": dense}),
        )
        out[f"hybrid: lexical {lexical} + chunks {dense}"] = (
            "hybrid",
            Fusion("zscore", {"doc_lexical": lexical, "chunk_dense": dense}),
        )
        out[f"hybrid: lexical {lexical} + doc-mean {dense / 2:g} + chunks {dense / 2:g}"] = (
            "hybrid",
            Fusion(
                "zscore",
                {"doc_lexical": lexical, "doc_dense": dense / 2, "chunk_dense": dense / 2},
            ),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(DATA / "irled2017-precedent"))
    parser.add_argument("--cache", default=str(HERE / ".cache"))
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-queries", type=int, default=5)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--skip-latency", action="store_true", help="Quality only.")
    parser.add_argument("--latency-only", action="store_true", help="Add latency to the json.")
    parser.add_argument(
        "--full",
        action="store_true",
        help="The whole set (every query and document): fewer rules, scored on the seeded "
        "halves too, a sweep of the query-chunk cap; writes results/similar_full.json.",
    )
    parser.add_argument("--caps", type=int, nargs="*", default=[8, 16, 32, 0])
    args = parser.parse_args()
    if args.full:
        args.queries, args.docs = 10**6, 10**6
    rset = sample(args.data, args.queries, args.docs, args.seed)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    with EvalIndex(rset, encoder=ENCODER, cache=cache) as index:
        print(index.name, index.chunks, "chunks", round(index.index_seconds), "s", flush=True)
        remembering = RememberingEncoder(index.encoder, cache / f"{index.name}-queries.npz")
        if args.build_only:
            from docsearch.retriever import Retriever

            retriever = Retriever(index.name, db=index.db, encoder=remembering)  # type: ignore[arg-type]
            for qid, text in rset.queries.items():
                retriever.similar(build_document(qid, "", [text]), k=1, mode="vector")
                remembering.save()
                print(qid, remembering.fresh, flush=True)
            return
        out = HERE / "results" / ("similar_full.json" if args.full else "similar_dense.json")
        result = json.loads(out.read_text()) if args.latency_only else {}
        # the tune / held-out split of benchmarks/similar.py, which chose the key-term cap
        halves = seeded_halves(sorted(rset.queries), 0) if args.full else None
        if not args.latency_only:
            print("query vectors:", len(remembering.known), flush=True)
            scored = similar_runs(
                index, remembering, full_rules() if args.full else rules(), halves
            )
            baseline, _ = score_run(bm25_baseline(rset), rset.qrels)
            print("bm25", json.dumps(baseline), flush=True)
            result = {
                "dataset": rset.name,
                "notes": rset.notes,
                "documents": len(rset.corpus),
                "queries": len(rset.queries),
                "chunks": index.chunks,
                "encoder": index.encoder_label,
                "index_seconds": round(index.index_seconds),
                "baseline_bm25_whole_document": baseline,
                "rules": scored,
            }
            if halves is not None:
                result["caps"] = cap_sweep(index, remembering, args.caps, halves)
                from docsearch.similar import MAX_QUERY_CHUNKS

                result["max_query_chunks"] = MAX_QUERY_CHUNKS
        if not args.skip_latency:
            result |= measure_latency(index, rset, args.latency_queries)
    out.write_text(json.dumps(result, indent=2) + "\n")


def measure_latency(index: EvalIndex, rset: RetrievalSet, count: int) -> dict[str, Any]:
    """Latency of each mode on the `count` queries nearest 10k words, each embedded afresh
    (run it alone on the machine: `flock /tmp/docsearch-heavy.lock`)."""
    words_of = {q: len(t.split()) for q, t in rset.queries.items()}
    near = sorted(words_of, key=lambda q: abs(words_of[q] - 10_000))[:count]
    timed = {}
    for mode in ("lexical", "vector", "hybrid"):
        timed[mode] = latency(index, mode, near)
        print(mode, json.dumps(timed[mode]), flush=True)
    return {"latency": timed, "latency_query_words": sorted(words_of[q] for q in near)}


if __name__ == "__main__":
    main()
