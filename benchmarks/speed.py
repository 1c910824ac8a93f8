"""Speed of the foundation: CLI start-up, cold lexical search, indexing throughput, search latency.

    python benchmarks/speed.py [--cuad-docs 40] [--sizes 10000 100000] [--queries 200]

Writes benchmarks/results/speed.json and speed.md. Measures
- `docsearch --help` wall time and a cold `docsearch search --mode lexical` (fresh processes);
- indexing throughput (chunks/s, tokens/s) of `docsearch index` with the default encoder on the
  first N contracts of ../shared/data/cuad written out as text files;
- search latency p50/p95 per mode on synthetic collections of 10k and 100k chunks (query
  encoding excluded: the dense leg gets a precomputed query vector).
Targets (issue 2): --help < 0.5 s, cold lexical < 2 s, lexical and vector p50 < 30 ms at 100k.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
DIM = 384


def wall(cmd: list[str], env: dict[str, str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "docsearch.app.cli", *args]


def startup(db: str, env: dict[str, str], repeats: int) -> dict[str, Any]:
    samples = str(REPO / "docsearch" / "corpora" / "samples")
    subprocess.run(
        cli("index", samples, "--encoder", "none", "--db", db),
        env=env,
        check=True,
        capture_output=True,
    )
    helps = wall([str(Path(sys.executable).parent / "docsearch"), "--help"], env, repeats)
    lexical = wall(
        [
            str(Path(sys.executable).parent / "docsearch"),
            "search",
            "termination for cause",
            "--mode",
            "lexical",
            "--db",
            db,
        ],
        env,
        repeats,
    )
    return {
        "help_s": helps,
        "help_median_s": statistics.median(helps),
        "cold_lexical_s": lexical,
        "cold_lexical_median_s": statistics.median(lexical),
    }


def indexing(n_docs: int, db: str, env: dict[str, str]) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="cuad-"))
    with (DATA / "cuad" / "corpus.jsonl").open() as handle:
        for i, line in zip(range(n_docs), handle, strict=False):
            doc = json.loads(line)
            (folder / f"{i:03d}.txt").write_text(doc.get("title", "") + "\n\n" + doc["text"])
    start = time.perf_counter()
    out = subprocess.run(
        cli("index", str(folder), "--collection", "cuad", "--db", db),
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    summary = [line for line in out.stderr.splitlines() if line.startswith("chunks:")]
    from docsearch.indexer.store import Store

    store = Store.open(db, "cuad")
    rows = store.rows("ordinal >= 0", ["n_tokens"])
    tokens = sum(r["n_tokens"] for r in rows)
    return {
        "docs": n_docs,
        "chunks": len(rows),
        "tokens": tokens,
        "wall_s": seconds,
        "chunks_per_s": len(rows) / seconds,
        "tokens_per_s": tokens / seconds,
        "cli_summary": summary,
        "encoder": store.meta.encoder,
    }


def clustered(n: int, rng: np.random.Generator, centroids: np.ndarray) -> np.ndarray:
    """Unit vectors near random topic centroids: embeddings cluster; i.i.d. Gaussians do not."""
    picks = centroids[rng.integers(0, len(centroids), size=n)]
    vectors = picks + 0.6 * rng.standard_normal((n, DIM)) / np.sqrt(DIM)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


CENTROIDS = clustered(500, np.random.default_rng(42), np.zeros((1, DIM)) + 0.0)


def synthetic_rows(
    n: int, rng: np.random.Generator, vocab: list[str], start: int = 0
) -> list[dict[str, Any]]:
    """`n` chunks numbered from `start`, ten to a document."""
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    vectors = clustered(n, rng, CENTROIDS)
    rows = []
    for i in range(start, start + n):
        words = rng.choice(len(vocab), size=120, p=weights)
        vec = vectors[i - start]
        rows.append(
            {
                "id": f"s{i}",
                "doc_id": f"d{i // 10}",
                "path": f"/synthetic/doc{i // 10}.txt",
                "title": f"doc {i // 10}",
                "text": " ".join(vocab[w] for w in words),
                "ordinal": i % 10,
                "page_start": 1,
                "page_end": 1,
                "char_start": 0,
                "char_end": 1,
                "heading_path": "",
                "n_tokens": 120,
                "truncated": False,
                "file_sha256": "",
                "text_sha": f"t{i}",
                "vector": (vec / np.linalg.norm(vec)).tolist(),
            }
        )
    return rows


class PrecomputedQueries:
    """Stands in for the query encoder so the timing covers search only."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors, self.i = vectors, 0
        self.dim, self.max_tokens, self.name = DIM, 256, "precomputed"

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        self.i = (self.i + 1) % len(self.vectors)
        return self.vectors[self.i : self.i + 1]


def recall_vs_exact(store: Any, vectors: np.ndarray) -> float | None:
    """recall@10 of the indexed vector search against exact search (None: no index, exact)."""
    if "vector_idx" not in {c.name for c in store.chunks.list_indices()}:
        return None
    dataset, hits = store._read("chunks"), []
    for q in vectors:
        found = [c.chunk_id for c in store.search_vector(q, 10, None)]
        exact = (
            dataset.to_table(
                nearest={
                    "column": "vector",
                    "q": q,
                    "k": 10,
                    "metric": "cosine",
                    "use_index": False,
                },
                columns=["id"],
            )
            .column("id")
            .to_pylist()
        )
        hits.append(len(set(found) & set(exact)) / 10)
    return float(np.mean(hits))


def leg_latency(store: Any, queries: list[str], vectors: np.ndarray) -> dict[str, Any]:
    """p50/p95 of each search leg alone, at the pool depth document search asks for."""
    from docsearch.retriever import CHUNK_POOL, DOC_POOL

    legs = {
        "chunk BM25": lambda q, v: store.search_text(q, CHUNK_POOL, None),
        "chunk vector": lambda q, v: store.search_vector(v, CHUNK_POOL, None),
        "document BM25": lambda q, v: store.search_documents_text(q, DOC_POOL, None),
        "document vector": lambda q, v: store.search_documents_vector(v, DOC_POOL, None),
    }
    out = {}
    for leg, run in legs.items():
        run(queries[0], vectors[0])  # warm caches
        times = []
        for q, v in zip(queries, vectors, strict=True):
            t0 = time.perf_counter()
            run(q, v)
            times.append((time.perf_counter() - t0) * 1000)
        out[leg] = {
            "p50_ms": float(np.percentile(times, 50)),
            "p95_ms": float(np.percentile(times, 95)),
        }
    return out


def latency(sizes: list[int], n_queries: int, db: str) -> dict[str, Any]:
    from docsearch.indexer.store import CollectionMeta, Store, _drop_tables
    from docsearch.retriever import Retriever

    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(20000)]
    spec = {"encoder": "precomputed", "options": {}, "dim": DIM, "max_tokens": 256}
    out: dict[str, Any] = {}
    for size in sizes:
        name = f"synthetic{size}"
        store = Store.open_or_create(db, name, CollectionMeta(encoder=spec, chunker={}))
        start = time.perf_counter()
        for lo in range(0, size, 10000):
            store.chunks.add(synthetic_rows(min(10000, size - lo), rng, vocab, lo))
        store.refresh_indexes()
        build = time.perf_counter() - start
        # The rows went in beside Store.commit, so the documents come from the backfill path
        # (what `docsearch index` does for a collection built before the docs table).
        start = time.perf_counter()
        _drop_tables(store.db, store.uri, name, ["docs"])
        store.ensure_documents()
        docs_build = time.perf_counter() - start
        store = Store.open(db, name)  # a fresh handle on the rebuilt docs table
        assert store.has_documents
        queries = [" ".join(rng.choice(vocab[:2000], size=3)) for _ in range(n_queries)]
        vectors = clustered(n_queries, rng, CENTROIDS)
        retriever = Retriever(name, db=db, encoder=PrecomputedQueries(vectors))  # type: ignore[arg-type]
        out[str(size)] = {
            "build_s": build,
            "docs_build_s": docs_build,
            "documents": store.count_documents(),
            "recall_at_10": recall_vs_exact(store, vectors[:50]),
            "legs": leg_latency(store, queries, vectors),
        }
        print(f"recall@10 at {size}: {out[str(size)]['recall_at_10']}", file=sys.stderr)
        for mode in ("lexical", "vector", "hybrid"):
            retriever.search(queries[0], k=10, mode=mode)  # warm caches
            times = []
            for q in queries:
                t0 = time.perf_counter()
                retriever.search(q, k=10, mode=mode)
                times.append((time.perf_counter() - t0) * 1000)
            out[str(size)][mode] = {
                "p50_ms": float(np.percentile(times, 50)),
                "p95_ms": float(np.percentile(times, 95)),
            }
        print(f"latency at {size}: {out[str(size)]}", file=sys.stderr)
    return out


def markdown(result: dict[str, Any]) -> str:
    s, ix = result["startup"], result.get("indexing")
    lines = [
        "# Speed benchmark",
        "",
        f"- date: {result['date']}",
        f"- machine: {result['machine']}",
        f"- command: `{result['command']}`",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| `docsearch --help` wall time (median of {len(s['help_s'])}) | {s['help_median_s']:.2f} s | < 0.5 s |",
        f"| cold `search --mode lexical` (median of {len(s['cold_lexical_s'])}) | {s['cold_lexical_median_s']:.2f} s | < 2 s |",
    ]
    if ix:
        lines.append(
            f"| indexing, {ix['docs']} CUAD contracts ({ix['tokens']:,} tokens, {ix['chunks']} chunks) | "
            f"{ix['chunks_per_s']:.1f} chunks/s, {ix['tokens_per_s']:,.0f} tokens/s | - |"
        )
    lines += [
        "",
        "Search latency per query, k=10, query encoding excluded:",
        "",
        "| chunks | mode | p50 ms | p95 ms |",
        "|---|---|---|---|",
    ]
    for size, modes in result["latency"].items():
        for mode in ("lexical", "vector", "hybrid"):
            lines.append(
                f"| {int(size):,} | {mode} | {modes[mode]['p50_ms']:.1f} | {modes[mode]['p95_ms']:.1f} |"
            )
    lines += [
        "",
        "Each search leg alone, at the depth document search asks for (500 chunks or documents):",
        "",
        "| chunks | documents | leg | p50 ms | p95 ms |",
        "|---|---|---|---|---|",
    ]
    for size, modes in result["latency"].items():
        for leg, t in modes.get("legs", {}).items():
            lines.append(
                f"| {int(size):,} | {modes['documents']:,} | {leg} | {t['p50_ms']:.1f} | {t['p95_ms']:.1f} |"
            )
    lines += [
        "",
        "Document table built from the chunks (the backfill path): "
        + ", ".join(
            f"{modes['docs_build_s']:.1f} s at {int(size):,} chunks"
            for size, modes in result["latency"].items()
            if "docs_build_s" in modes
        )
        + ".",
    ]
    lines += ["", "Vector search: exact below 50,000 chunks, an IVF_HNSW_SQ index above it."]
    for size, modes in result["latency"].items():
        recall = modes.get("recall_at_10")
        if recall is not None:
            lines.append(
                f"Recall@10 of the index against exact search at {int(size):,}: {recall:.3f}."
            )
    if result.get("reused"):
        lines += ["", result["reused"]]
    if result.get("load"):
        lines += ["", f"Load average before the latency runs: {result['load']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cuad-docs", type=int, default=40)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="re-measure the latency table; keep startup and indexing from results/speed.json",
    )
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    work = tempfile.mkdtemp(prefix="docsearch-speed-")
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "command": "python benchmarks/speed.py " + " ".join(sys.argv[1:]),
    }
    if args.latency_only:
        old = json.loads((RESULTS / "speed.json").read_text())
        result |= {k: old[k] for k in ("startup", "indexing") if k in old}
        result["reused"] = f"Startup and indexing rows: the full run of {old['date']}."
    else:
        result["startup"] = startup(f"{work}/startup", env, args.repeats)
        print(f"startup: {result['startup']}", file=sys.stderr)
    if not args.latency_only and args.cuad_docs and (DATA / "cuad").exists():
        result["indexing"] = indexing(args.cuad_docs, f"{work}/cuad", env)
        print(f"indexing: {result['indexing']}", file=sys.stderr)
    result["load"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    result["latency"] = latency(args.sizes, args.queries, f"{work}/latency")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "speed.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "speed.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
