"""Speed of the foundation: CLI start-up, cold lexical search, indexing throughput, search latency.

    python benchmarks/speed.py [--cuad-docs 40] [--sizes 10000 100000] [--queries 200]
    python benchmarks/speed.py --encoding-only      # precisions, batch sizes, threads
    python benchmarks/speed.py --queries-only       # search with real query encoding
    python benchmarks/speed.py --queries-only --text real   # the same over the corpora's text

Writes benchmarks/results/speed.json and speed.md. Measures
- `docsearch --help` wall time and a cold `docsearch search --mode lexical` (fresh processes);
- indexing throughput (chunks/s, tokens/s) of `docsearch index` with the default encoder on the
  first N contracts of ../shared/data/cuad written out as text files;
- search latency p50/p95 per mode on synthetic collections of 10k and 100k chunks (query
  encoding excluded: the dense leg gets a precomputed query vector);
- `encoding`: the matmul rate of this CPU per dtype (2048^2 products) and MiniLM's document
  encoding in each precision, batch size and thread count (interleaved rounds over full
  254-token CUAD windows), with the forward's share of the matmul rate;
- `queries`: hybrid search with the real MiniLM query encoder (the default precision), short
  (3 words) and 200-word queries (with identifiers, as long real queries have), p50/p95 as
  served, with the dense legs forced at any length, and the encoding alone, one torch thread
  against two; `--text real` puts the shared corpora's text in the chunks (vectors stay
  synthetic) and asks SciFact's claims and 200-word passages of that text (`queries_real`).
Targets (issue 2): --help < 0.5 s, cold lexical < 2 s, lexical and vector p50 < 30 ms at 100k;
(issue 21): hybrid p50 for 200-word queries, encoding included, <= 50 ms at 10k, <= 100 ms at
100k. Run it under `flock /tmp/docsearch-heavy.lock` on a shared machine; the load average is
recorded beside each table.
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
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DATA = Path(os.environ.get("DOCSEARCH_EVAL_DATA", REPO.parent / "shared" / "data"))
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
    from docsearch.store.reads import Store

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
    n: int,
    rng: np.random.Generator,
    vocab: list[str],
    start: int = 0,
    texts: list[str] | None = None,
) -> list[dict[str, Any]]:
    """`n` chunks numbered from `start`, ten to a document; their text drawn from `vocab`, or
    chunk i's text is `texts[i]`."""
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    vectors = clustered(n, rng, CENTROIDS)
    rows = []
    for i in range(start, start + n):
        if texts is None:
            text = " ".join(vocab[w] for w in rng.choice(len(vocab), size=120, p=weights))
        else:
            text = texts[i]
        vec = vectors[i - start]
        rows.append(
            {
                "id": f"s{i}",
                "doc_id": f"d{i // 10}",
                "path": f"/synthetic/doc{i // 10}.txt",
                "title": f"doc {i // 10}",
                "text": text,
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
    dataset, hits = store.dataset("chunks"), []
    if not any(index["name"] == "vector_idx" for index in dataset.list_indices()):
        return None
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
    from docsearch.search_plan import CHUNK_POOL, DOC_POOL

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


def synthetic_collection(
    db: str,
    name: str,
    size: int,
    rng: np.random.Generator,
    vocab: list[str],
    texts: list[str] | None = None,
) -> tuple[float, float]:
    """Build collection `name` of `size` synthetic chunks (text from `vocab`, or `texts`); (seconds
    for the chunks and their indexes, seconds for the document table). An existing one of that
    size is kept: (0, 0)."""
    from docsearch.store.database import Database
    from docsearch.store.reads import Store
    from docsearch.store.schema import CollectionMeta
    from docsearch.store.writes import Writer

    spec = {"encoder": "precomputed", "options": {}, "dim": DIM, "max_tokens": 256}
    try:
        found = Store.open(db, name).count_chunks()
    except Exception:  # noqa: BLE001 - no such collection yet: build it
        found = 0
    if found == size:
        return 0.0, 0.0
    if found:
        raise SystemExit(f"{db} holds {name} with {found} chunks, not {size}: use another --work")
    database = Database(db)
    database.create_version(name, 0, CollectionMeta(encoder=spec, chunker={}))
    store = Writer(Store(database, name, 0))
    start = time.perf_counter()
    for lo in range(0, size, 10000):
        store.chunks.add(synthetic_rows(min(10000, size - lo), rng, vocab, lo, texts))
    store.refresh_indexes()
    build = time.perf_counter() - start
    # The rows went in beside Writer.commit, so the documents come from the backfill path
    # (what `docsearch index` does for a collection built before the docs table).
    start = time.perf_counter()
    database.drop_tables(name, ["docs"])
    store.ensure_documents()
    return build, time.perf_counter() - start


def search_times(retriever: Any, queries: list[str], mode: str) -> list[float]:
    """Milliseconds per query of `retriever.search(q, k=10, mode=mode)`, after one warm-up."""
    retriever.search(queries[0], k=10, mode=mode)  # warm caches
    times = []
    for q in queries:
        t0 = time.perf_counter()
        retriever.search(q, k=10, mode=mode)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def latency(sizes: list[int], n_queries: int, db: str) -> dict[str, Any]:
    from docsearch.retriever import Retriever
    from docsearch.store.reads import Store

    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(20000)]
    out: dict[str, Any] = {}
    for size in sizes:
        name = f"synthetic{size}"
        build, docs_build = synthetic_collection(db, name, size, rng, vocab)
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
            times = search_times(retriever, queries, mode)
            out[str(size)][mode] = {
                "p50_ms": float(np.percentile(times, 50)),
                "p95_ms": float(np.percentile(times, 95)),
            }
        print(f"latency at {size}: {out[str(size)]}", file=sys.stderr)
    return out


# ---------------------------------------------------------------------------------------------
# Encoding: precisions, batch sizes, threads (issue 21)

# (precision, batch size, torch threads); the first is the encoder as it was before issue 21.
ENCODING_CONFIGS = (
    ("fp32", 32, 2),
    ("bf16", 32, 2),
    ("int8", 32, 2),
    ("int8", 16, 2),
    ("int8", 4, 2),
    ("fp32", 32, 1),
    ("fp32", 16, 2),
    ("fp32", 64, 2),
    ("bf16", 16, 2),
    ("bf16", 64, 2),
)


def matmul_rates(n: int = 2048, repeats: int = 3) -> dict[str, float]:
    """GFLOP/s of an n x n product per dtype (int8: `torch._int_mm`, the int32 product the int8
    precision's layers run, without their quantise/dequantise passes); best of `repeats`."""
    import torch

    a = torch.randn(n, n)
    q = torch.randint(-127, 128, (n, n), dtype=torch.int8)
    runs = {
        "fp32": lambda: a @ a,
        "bf16": (lambda b: lambda: b @ b)(a.to(torch.bfloat16)),
        "int8": lambda: torch._int_mm(q, q),
    }
    rates = {}
    with torch.inference_mode():
        for dtype, run in runs.items():
            run()
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - start)
            rates[dtype] = 2 * n**3 / best / 1e9
    return rates


def cuad_windows(n: int, encoder: Any) -> list[str]:
    """`n` full windows (the encoder's max_tokens) of CUAD contract text, as indexing embeds."""
    windows: list[str] = []
    with (DATA / "cuad" / "corpus.jsonl").open() as handle:
        for line in handle:
            text = json.loads(line)["text"]
            spans = encoder.token_spans(text)
            step = encoder.max_tokens
            for lo in range(0, len(spans) - step, step):
                windows.append(text[spans[lo][0] : spans[lo + step - 1][1]])
                if len(windows) == n:
                    return windows
    return windows


def forward_flops(encoder: Any, padded: float) -> float:
    """FLOPs per token of a BERT forward: 2 per non-embedding weight, plus the attention
    products (QK^T and AV: 4 x hidden x padded length per layer)."""
    model = encoder._inference_model()  # the forward encode_documents runs (not `module`,
    # which hands training the sentence-transformers model and moves encoding onto it)
    config = model.layout.config
    embedding = sum(
        p.numel() for n, p in model.named_parameters() if "embeddings" in n
    )  # lookups, not products
    weights = sum(p.numel() for p in model.parameters()) - embedding
    return 2.0 * weights + 4.0 * config["num_hidden_layers"] * config["hidden_size"] * padded


def encoding(n_windows: int, rounds: int) -> dict[str, Any]:
    """Tokens/s of `encode_documents` per (precision, batch, threads), interleaved rounds."""
    import torch

    from docsearch.encoders import get_encoder
    from docsearch.encoders.precision import int8_available

    before = torch.get_num_threads()
    # int8 runs only on CPUs with int8 dot products (encoders/precision.py); elsewhere no rows.
    here = [how for how in PRECISIONS if how != "int8" or int8_available()]
    runs = [config for config in ENCODING_CONFIGS if config[0] in here]
    encoders = {how: get_encoder("sentence-transformers", precision=how) for how in here}
    auto = get_encoder("sentence-transformers").precision  # type: ignore[attr-defined]
    texts = cuad_windows(n_windows, encoders["fp32"])
    tokens = sum(encoders["fp32"].count_tokens(texts)) + 2 * len(texts)  # with [CLS], [SEP]
    flops = forward_flops(encoders["fp32"], tokens / len(texts))
    reference = encoders["fp32"].encode_documents(texts)
    cosine = {
        how: float(np.mean(np.sum(e.encode_documents(texts) * reference, axis=1)))
        for how, e in encoders.items()
    }
    times: dict[str, list[float]] = {_config_name(c): [] for c in runs}
    rates: list[dict[str, float]] = []
    loads = [os.getloadavg()[0]]
    for _ in range(rounds):
        torch.set_num_threads(before)
        rates.append(matmul_rates())
        for how, batch, threads in runs:
            encoder = encoders[how]
            encoder.batch_size = batch  # type: ignore[attr-defined]
            torch.set_num_threads(threads)
            start = time.perf_counter()
            encoder.encode_documents(texts)
            times[_config_name((how, batch, threads))].append(time.perf_counter() - start)
        loads.append(os.getloadavg()[0])
        print(f"encoding round: {times}", file=sys.stderr)
    torch.set_num_threads(before)
    matmul = {dtype: statistics.median(r[dtype] for r in rates) for dtype in rates[0]}
    configs = {}
    for (how, batch, threads), name in zip(runs, map(_config_name, runs), strict=True):
        tps = tokens / statistics.median(times[name])
        configs[name] = {
            "precision": how,
            "batch": batch,
            "threads": threads,
            "tokens_per_s": tps,
            "rounds_tokens_per_s": [tokens / t for t in times[name]],
            "gflops": tps * flops / 1e9,
            "share_of_matmul": tps * flops / 1e9 / matmul[how],
            "cosine_to_fp32": cosine[how],
        }
    return {
        "windows": len(texts),
        "tokens": tokens,
        "flops_per_token": flops,
        "matmul_gflops": matmul,
        "matmul_rounds": rates,
        "configs": configs,
        "auto_precision": auto,
        "threads_default": before,
        "load": loads,
    }


def _config_name(config: tuple[str, int, int]) -> str:
    how, batch, threads = config
    return f"{how}, batch {batch}, {threads} thread{'s' if threads > 1 else ''}"


PRECISIONS = ("fp32", "bf16", "int8")


# ---------------------------------------------------------------------------------------------
# Search with real query encoding (issue 21)


def long_query(rng: np.random.Generator, vocab: list[str], words: int = 200) -> str:
    """`words` words drawn like the synthetic chunks' text, five of them pairs joined by "."
    (identifiers such as "w12.w7", matched as phrases as "7.2(a)" is)."""
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    picked = [vocab[i] for i in rng.choice(len(vocab), size=words, p=weights / weights.sum())]
    for at in rng.choice(words - 1, size=5, replace=False):
        picked[at] = f"{picked[at]}.{picked[at + 1]}"
    return " ".join(picked)


# The real-text collections: the shared corpora's documents one after another, cut into chunks
# of as many words as the synthetic ones; once they run out, again from half a chunk in.
REAL_CORPORA = ("cuad", "scisummnet-acl", "qmsum", "scifact")
CHUNK_WORDS = 120


def real_chunks(size: int) -> list[str]:
    """`size` chunks of real text, CHUNK_WORDS words each, in the corpora's order."""
    chunks: list[str] = []
    for shift in (0, CHUNK_WORDS // 2, CHUNK_WORDS // 3):
        carry: list[str] = []
        for name in REAL_CORPORA:
            with (DATA / name / "corpus.jsonl").open(encoding="utf-8") as lines:
                for line in lines:
                    words = json.loads(line)["text"].split()[shift:]
                    for at in range(0, len(words), CHUNK_WORDS):
                        piece = carry + words[at : at + CHUNK_WORDS - len(carry)]
                        if len(piece) < CHUNK_WORDS:
                            carry = piece
                            continue
                        carry = []
                        chunks.append(" ".join(piece))
                        if len(chunks) == size:
                            return chunks
    raise SystemExit(f"the shared corpora hold fewer than {size:,} chunks of real text")


def real_queries(rng: np.random.Generator, texts: list[str], n: int) -> dict[str, list[str]]:
    """Real short queries (SciFact's claims) and 200-word passages of the real-text chunks (two
    neighbours' words, so a passage rarely starts where a chunk does)."""
    with (DATA / "scifact" / "queries.jsonl").open(encoding="utf-8") as lines:
        claims = [json.loads(line)["text"] for line in lines][:n]
    starts = rng.integers(0, len(texts) - 1, size=n)
    passages = [
        " ".join(" ".join(texts[i : i + 2]).split()[rng.integers(0, 40) :][:200]) for i in starts
    ]
    return {"short": claims, "200 words": passages}


def timed_ms(run: Any, items: list[Any]) -> list[float]:
    run(items[0])  # warm caches
    times = []
    for item in items:
        start = time.perf_counter()
        run(item)
        times.append((time.perf_counter() - start) * 1000)
    return times


def percentiles(times: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95))}


def query_latency(
    sizes: list[int], n_queries: int, rounds: int, db: str, text: str = "synthetic"
) -> dict[str, Any]:
    """Hybrid search with the real query encoder: encoding alone on 1 and 2 threads, search
    without encoding, and the whole search; short and 200-word queries; interleaved rounds.
    `text`: "synthetic" (words drawn from a made-up vocabulary) or "real" (the shared corpora's
    text in the chunks, real queries)."""
    from docsearch import retriever
    from docsearch.encoders import get_encoder
    from docsearch.encoders import sentence_transformers as st
    from docsearch.fusion import DOCUMENT_RULES, LONG_QUERY_WORDS
    from docsearch.retriever import Retriever
    from docsearch.text import identifiers

    encoder = get_encoder("sentence-transformers")
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(20000)]
    texts = real_chunks(max(sizes)) if text == "real" else None
    if texts is None:
        kinds = {
            "short": [" ".join(rng.choice(vocab[:2000], size=3)) for _ in range(n_queries)],
            "200 words": [long_query(rng, vocab) for _ in range(n_queries)],
        }
    else:
        kinds = real_queries(rng, texts, n_queries)
    out: dict[str, Any] = {
        "text": text,
        "identifiers": {
            kind: float(np.mean([len(identifiers(q)) for q in qs])) for kind, qs in kinds.items()
        },
        "long_query_words": LONG_QUERY_WORDS,
        "precision": encoder.precision,  # type: ignore[attr-defined]
        "tokens": {
            kind: float(np.mean([min(t, 256) for t in encoder.count_tokens(qs)]))
            for kind, qs in kinds.items()
        },
        "sizes": {},
    }
    default_threads = st.SINGLE_TEXT_THREADS
    for size in sizes:
        name = f"synthetic{size}" if texts is None else f"realtext{size}"
        chunk_texts = None if texts is None else texts[:size]
        synthetic_collection(db, name, size, np.random.default_rng(0), vocab, chunk_texts)
        vectors = clustered(n_queries, rng, CENTROIDS)
        real = Retriever(name, db=db, encoder=encoder)
        fixed = Retriever(name, db=db, encoder=PrecomputedQueries(vectors))  # type: ignore[arg-type]
        # The default rule ranks a query of LONG_QUERY_WORDS or more by the lexical rule and
        # does not encode it; this one weighs the dense legs at any length.
        forced = Retriever(name, db=db, encoder=encoder, fusion=DOCUMENT_RULES["hybrid"])
        cells: dict[str, dict[str, list[float]]] = {}
        loads = [os.getloadavg()[0]]
        for _ in range(rounds):
            for kind, queries in kinds.items():
                cell = cells.setdefault(kind, {})
                for threads in (1, 2):
                    st.SINGLE_TEXT_THREADS = threads
                    times = timed_ms(lambda q: encoder.encode_queries([q]), queries)
                    cell.setdefault(f"encode, {threads} thread(s)", []).extend(times)
                st.SINGLE_TEXT_THREADS = default_threads
                times = timed_ms(partial(fixed.search, k=10, mode="hybrid"), queries)
                cell.setdefault("default hybrid, encoding excluded", []).extend(times)
                times = timed_ms(partial(real.search, k=10, mode="hybrid"), queries)
                cell.setdefault("default hybrid, as served (encoding included)", []).extend(times)
                for overlap in (False, True):
                    retriever.OVERLAP_ENCODING = overlap
                    times = timed_ms(partial(forced.search, k=10, mode="hybrid"), queries)
                    how = "beside the chunk BM25" if overlap else "all on one thread"
                    cell.setdefault(f"dense legs forced, encoding included ({how})", []).extend(
                        times
                    )
            loads.append(os.getloadavg()[0])
        out["sizes"][str(size)] = {
            "load": loads,
            "cells": {
                kind: {what: percentiles(t) for what, t in cell.items()}
                for kind, cell in cells.items()
            },
        }
        print(f"queries at {size}: {out['sizes'][str(size)]}", file=sys.stderr)
    return out


def encoding_markdown(result: dict[str, Any]) -> list[str]:
    enc = result["encoding"]
    rates = enc["matmul_gflops"]
    lines = [
        "",
        "## Encoding: precisions, batch sizes, threads (issue 21)",
        "",
        f"- date: {enc.get('date', result['date'])}; command: `{enc.get('command', '')}`",
        f"- {enc['windows']} full CUAD windows ({enc['tokens']:,} tokens), `encode_documents` "
        f"of the default MiniLM, median of {len(next(iter(enc['configs'].values()))['rounds_tokens_per_s'])} "
        "interleaved rounds; load average (1 min) during the rounds: "
        + ", ".join(f"{x:.1f}" for x in enc["load"]),
        f"- matmul rate of this CPU (2048^2 products, median of the rounds): fp32 "
        f"{rates['fp32']:.0f} GFLOP/s, bf16 {rates['bf16']:.0f} GFLOP/s, int8 (`_int_mm`) "
        f"{rates['int8']:.0f} GOP/s",
        f"- the forward's work: {enc['flops_per_token'] / 1e6:.1f} MFLOP per token (2 per "
        "non-embedding weight, plus the attention products at this padded length)",
        f"- `precision=auto` chose **{enc['auto_precision']}** on this machine",
        "",
        "| precision | batch | threads | tokens/s | vs fp32 batch 32 | GFLOP/s | share of the "
        "dtype's matmul rate | mean cosine to fp32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = next(iter(enc["configs"].values()))["tokens_per_s"]
    for cell in enc["configs"].values():
        lines.append(
            f"| {cell['precision']} | {cell['batch']} | {cell['threads']} | "
            f"{cell['tokens_per_s']:,.0f} | {cell['tokens_per_s'] / base:.2f}x | "
            f"{cell['gflops']:.1f} | {cell['share_of_matmul']:.0%} | "
            f"{cell['cosine_to_fp32']:.5f} |"
        )
    quality = RESULTS / "precision.json"
    if quality.is_file():
        from benchmarks.precision import table

        lines += ["", "Quality of each precision against fp32 (benchmarks/precision.py):", ""]
        lines += table(json.loads(quality.read_text()))
    return lines


TEXT_LINES = {
    "synthetic": "synthetic collections as above (words drawn from a made-up vocabulary of "
    "20,000, Zipf-distributed: its 33 most frequent words are 39% of the text, and the index "
    "keeps them, where it drops English stop words); queries: short 3 words, long 200 words "
    "drawn the same way, with five identifiers each",
    "real": "real-text collections (`--text real`): the chunks hold the shared corpora's text "
    f"({', '.join(REAL_CORPORA)}, {CHUNK_WORDS} words a chunk, ten chunks a document; vectors "
    "synthetic as above); queries: short are SciFact's claims, long are 200-word passages of "
    "the chunks' text",
}


def queries_markdown(result: dict[str, Any], key: str = "queries") -> list[str]:
    q = result[key]
    text = q.get("text", "synthetic")
    lines = [
        "",
        "## Search with real query encoding (issue 21)"
        + ("" if text == "synthetic" else ", real text"),
        "",
        f"- date: {q.get('date', result['date'])}; command: `{q.get('command', '')}`",
        f"- query encoder: the default MiniLM, precision {q['precision']}; query tokens "
        "(capped at the 256-token window): "
        + ", ".join(f"{kind} {n:.0f}" for kind, n in q["tokens"].items())
        + (
            "; identifiers per query: "
            + ", ".join(f"{kind} {n:.1f}" for kind, n in q["identifiers"].items())
            if "identifiers" in q
            else ""
        ),
        "- hybrid, k=10, document granularity; identifiers are looked up in one extra phrase "
        "search by a passage search, and in its BM25 pool by a document rule; interleaved rounds",
        f"- {TEXT_LINES[text]}",
        f"- the default hybrid rule ranks a query of {q.get('long_query_words', 24)} words or "
        "more by the lexical document rule (chosen on quality: results/doclevel_length.md) and "
        "does not encode it, so for 200-word queries 'as served' has no encoding in it; "
        "'dense legs forced' weighs the dense legs at any length (the short-query rule), with "
        "the encoding beside the chunk BM25 (the default) or everything on one thread",
        "- targets: 200-word queries, encoding included, p50 <= 50 ms at 10,000 chunks and "
        "<= 100 ms at 100,000",
        "",
        "| chunks | query | what | p50 ms | p95 ms | load (1 min) |",
        "|---|---|---|---|---|---|",
    ]
    for size, data in q["sizes"].items():
        load = "-".join(f"{x:.1f}" for x in (min(data["load"]), max(data["load"])))
        for kind, cell in data["cells"].items():
            for what, t in cell.items():
                lines.append(
                    f"| {int(size):,} | {kind} | {what} | {t['p50_ms']:.1f} | "
                    f"{t['p95_ms']:.1f} | {load} |"
                )
    return lines


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
    if result.get("encoding"):
        lines += encoding_markdown(result)
    for key in ("queries", "queries_real"):
        if result.get(key):
            lines += queries_markdown(result, key)
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
    parser.add_argument(
        "--encoding-only", action="store_true", help="re-measure the encoding section only"
    )
    parser.add_argument(
        "--queries-only", action="store_true", help="re-measure the real-encoder search section"
    )
    parser.add_argument("--windows", type=int, default=64, help="CUAD windows per encoding run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (new sections)")
    parser.add_argument("--encoded-queries", type=int, default=50, help="per kind and round")
    parser.add_argument("--work", help="folder for the synthetic collections (kept; reused)")
    parser.add_argument(
        "--text",
        choices=("synthetic", "real"),
        default="synthetic",
        help="--queries-only: chunks and queries of made-up words, or of the shared corpora's text",
    )
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    work = args.work or tempfile.mkdtemp(prefix="docsearch-speed-")
    stamp = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/speed.py " + " ".join(sys.argv[1:]),
    }
    result: dict[str, Any] = {
        **stamp,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
    }
    if args.encoding_only or args.queries_only:
        result = json.loads((RESULTS / "speed.json").read_text())
        if args.encoding_only:
            result["encoding"] = encoding(args.windows, args.rounds) | stamp
        if args.queries_only:
            queries = query_latency(args.sizes, args.encoded_queries, args.rounds, work, args.text)
            result["queries" if args.text == "synthetic" else "queries_real"] = queries | stamp
        write(result)
        return
    if args.latency_only:
        old = json.loads((RESULTS / "speed.json").read_text())
        kept = ("startup", "indexing", "encoding", "queries", "queries_real")
        result |= {k: old[k] for k in kept if k in old}
        # A run that itself reused them names the full run it took them from.
        result["reused"] = (
            old.get("reused") or f"Startup and indexing rows: the full run of {old['date']}."
        )
    else:
        result["startup"] = startup(f"{work}/startup", env, args.repeats)
        print(f"startup: {result['startup']}", file=sys.stderr)
    if not args.latency_only and args.cuad_docs and (DATA / "cuad").exists():
        result["indexing"] = indexing(args.cuad_docs, f"{work}/cuad", env)
        print(f"indexing: {result['indexing']}", file=sys.stderr)
    result["load"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    result["latency"] = latency(args.sizes, args.queries, f"{work}/latency")
    if not args.latency_only:
        result["encoding"] = encoding(args.windows, args.rounds) | stamp
        queries = query_latency(args.sizes, args.encoded_queries, args.rounds, f"{work}/latency")
        result["queries"] = queries | stamp
    write(result)


def write(result: dict[str, Any]) -> None:
    """speed.json and speed.md; notes written under peers.py's NOTES marker in speed.md survive."""
    from benchmarks.peers import NOTES, kept_notes

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "speed.json").write_text(json.dumps(result, indent=2) + "\n")
    path = RESULTS / "speed.md"
    notes = kept_notes(path)
    path.write_text(markdown(result) + "\n" + NOTES + "\n" + notes)
    print(markdown(result))


if __name__ == "__main__":
    main()
