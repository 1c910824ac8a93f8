"""Query by document on irled2017-precedent: the key-term cap, quality and latency.

    python benchmarks/similar.py [--data DIR] [--cache DIR] [--report | --cold-start FILE]

The set has no train split, so the cap on query terms (and whether a term is repeated in the
query in proportion to its weight) is chosen on a seeded half of the 200 queries and reported on
the other half too. Then the product path (`Retriever.similar`, lexical, the chosen default) runs
every query: nDCG@10, Recall@10/100, and the latency of one query document with its explanation
(k=10), after the collection's word statistics are counted (timed on their own, once).
`--cold-start FILE` times fresh `docsearch similar` processes instead (the first counts the word
statistics and keeps them beside the collection, the next ones read them).
Writes results/similar.json and results/similar.md, whose dense and hybrid section comes from
benchmarks/similar_dense.py (a subsample: a MiniLM index of all 15M words would take hours on
2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA  # noqa: E402
from docsearch.evaluation import EvalIndex, load_dataset, score_run  # noqa: E402
from docsearch.indexer.extract import build_document  # noqa: E402
from docsearch.similar import MAX_TERMS, TermStats, collection_stats, lexical_query  # noqa: E402
from docsearch.text import index_words as words  # noqa: E402

HERE = Path(__file__).resolve().parent
CAPS = (10, 20, 30, 50, 75, 100, 150, 200, 300)
BASELINE = {"ndcg@10": 0.206, "recall@100": 0.54}  # whole-document BM25, whole case as query
# The rows of benchmarks/similar_dense.py that are fusion.SIMILAR_RULES, mode by mode.
SHIPPED = {
    "lexical",
    "vector: doc-mean + chunks",
    "hybrid: lexical 0.5 + doc-mean 0.25 + chunks 0.25",
}


def seeded_halves(qids: list[str], seed: int) -> dict[str, list[str]]:
    """The tune / held-out halves of the queries `qids` (sorted), split by `seed`."""
    tune = set(random.Random(seed).sample(qids, len(qids) // 2))
    return {"tune": sorted(tune), "held_out": [q for q in qids if q not in tune]}


def score_halves(run, qrels, halves: dict[str, list[str]]) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    """The mean metrics of `run` over each half's queries."""
    return {
        half: score_run({q: run[q] for q in ids}, {q: qrels[q] for q in ids})[0]
        for half, ids in halves.items()
    }


def query_text(terms: list[tuple[str, float]], weighted: bool) -> str:
    """The product's query (each term written in proportion to its weight), or each once."""
    return lexical_query(terms) if weighted else " ".join(t for t, _ in terms)


def sweep(store, stats: TermStats, queries: dict[str, str], qrels, halves) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = []
    ranked = {qid: stats.key_terms(text, max(CAPS)) for qid, text in queries.items()}
    for weighted in (False, True):
        for cap in CAPS:
            run = {
                qid: [
                    d.path
                    for d in store.search_documents_text(
                        query_text(terms[:cap], weighted), 100, None
                    )
                ]
                for qid, terms in ranked.items()
            }
            row = {"cap": cap, "weighted": weighted} | score_halves(run, qrels, halves)
            rows.append(row)
            print(json.dumps(row))
    return rows


def cold_start(db: str, name: str, query: str, runs: int = 3) -> dict[str, Any]:
    """`docsearch similar QUERY --mode lexical` in fresh processes: the first one counts the
    collection's word statistics and keeps them, the next ones read them."""
    from docsearch.similar import _stats
    from docsearch.store.database import cache_file
    from docsearch.store.reads import Store

    kept = cache_file(db, name, "termstats")
    assert kept is not None
    kept.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "docsearch.app.cli", "similar", query, "--db", db, "-c", name]
    argv += ["--mode", "lexical", "-k", "10", "--json"]
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        seconds.append(round(time.perf_counter() - began, 2))
    _stats.cache_clear()
    began = time.perf_counter()
    collection_stats(Store.open(db, name))  # read from the kept file
    read = time.perf_counter() - began
    return {
        "query_words": len(words(Path(query).read_text())),
        "first_process_s": seconds[0],
        "next_processes_s": seconds[1:],
        "read_kept_stats_s": round(read, 3),
        "kept_bytes": kept.stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(DATA / "irled2017-precedent"))
    parser.add_argument("--cache", default=str(HERE / ".cache"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", action="store_true", help="Only rewrite similar.md.")
    parser.add_argument(
        "--cold-start",
        metavar="QUERY_FILE",
        help="Only time fresh `docsearch similar` processes on the cached index (kept in "
        "similar.json as cold_start).",
    )
    args = parser.parse_args()
    results = HERE / "results" / "similar.json"
    if args.report:
        write_markdown(json.loads(results.read_text()))
        return
    if args.cold_start:
        rset = load_dataset(args.data, "all")
        with EvalIndex(rset, encoder="none", cache=args.cache) as index:
            measured = cold_start(index.db, index.name, args.cold_start)
        print(json.dumps(measured))
        result = json.loads(results.read_text()) | {"cold_start": measured}
        results.write_text(json.dumps(result, indent=2) + "\n")
        write_markdown(result)
        return

    rset = load_dataset(args.data, "all")
    qids = sorted(rset.queries)
    halves = seeded_halves(qids, args.seed)
    with EvalIndex(rset, encoder="none", cache=args.cache) as index:
        retriever = index.retriever()
        started = time.perf_counter()
        stats = collection_stats(retriever.store)
        stats_seconds = time.perf_counter() - started
        rows = sweep(retriever.store, stats, rset.queries, rset.qrels, halves)
        best = max(rows, key=lambda r: (r["tune"]["ndcg@10"], -r["cap"]))
        docs = {q: build_document(q, "", [t]) for q, t in rset.queries.items()}
        run = {
            q: [h.path for h in retriever.similar(d, k=100, explain=False)] for q, d in docs.items()
        }
        means, per_query = score_run(run, rset.qrels)
        halves_scored = score_halves(run, rset.qrels, halves)
        latency = {}
        for qid, doc in docs.items():
            began = time.perf_counter()
            retriever.similar(doc, k=10)
            latency[qid] = time.perf_counter() - began
    lengths = {q: len(words(t)) for q, t in rset.queries.items()}
    long = [latency[q] for q in latency if lengths[q] >= 10_000]
    result = {
        "dataset": rset.name,
        "documents": len(rset.corpus),
        "queries": len(qids),
        "seed": args.seed,
        "default_terms": MAX_TERMS,
        "best_on_tune": {"cap": best["cap"], "weighted": best["weighted"]},
        "sweep": rows,
        "product": {"all": means, **halves_scored},
        "stats_seconds": round(stats_seconds, 2),
        "latency_p50_s": round(statistics.median(latency.values()), 4),
        "latency_p90_s": round(statistics.quantiles(latency.values(), n=10)[-1], 4),
        "latency_p50_10k_words_s": round(statistics.median(long), 4) if long else None,
        "queries_10k_words": len(long),
        "baseline_bm25_whole_document": BASELINE,
    }
    out = HERE / "results" / "similar.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "sweep"}, indent=2))
    write_markdown(result)


def _row(name: str, metrics: dict[str, float]) -> str:
    cells = " | ".join(f"{metrics[m]:.4f}" for m in ("ndcg@10", "recall@10", "recall@100"))
    return f"| {name} | {cells} |"


def write_markdown(result: dict) -> None:  # type: ignore[type-arg]
    """results/similar.md from the numbers of results/similar.json."""
    product, best = result["product"], result["best_on_tune"]
    weighting = "in proportion to weight" if best["weighted"] else "once each"
    lines = [
        "# Query by document: irled2017-precedent",
        "",
        f"- {result['queries']} whole-case queries, {result['documents']} prior cases, "
        "5 cited (relevant) per query; `--encoder none` index (400-word chunks)",
        "- command: `python benchmarks/similar.py`; the product path alone: `docsearch eval "
        "../shared/data/irled2017-precedent --similar --split all --encoder none --mode lexical`",
        f"- key-term cap and weighting chosen on a seeded ({result['seed']}) half of the queries "
        f"(tune): {best['cap']} terms, each written {weighting}; the other half (held out) "
        "chose nothing",
        "",
        "| run | nDCG@10 | Recall@10 | Recall@100 |",
        "|---|---|---|---|",
        "| whole-document BM25, whole case as the query (data README) | 0.206 | - | ~0.54 |",
        _row(f"docsearch similar, lexical: all {result['queries']} queries", product["all"]),
        _row("  tune half", product["tune"]),
        _row("  held-out half", product["held_out"]),
        "",
        *full_section(),
        *dense_section(),
        "## Latency (lexical, k=10 with explanations, one query document after another)",
        "",
        f"- p50 {result['latency_p50_s']:.3f} s, p90 {result['latency_p90_s']:.3f} s over all "
        f"{result['queries']} queries (mean 7.9k tokens); p50 "
        f"{result['latency_p50_10k_words_s']:.3f} s over the {result['queries_10k_words']} "
        "queries of 10k words or more",
        f"- once per version of the docs table: counting its word statistics took "
        f"{result['stats_seconds']:.1f} s (15M words); they are kept beside the collection "
        "(`.<name>.termstats.cache`), so only the first query after an index run pays it",
        *cold_start_lines(result.get("cold_start")),
        "",
        "## Key-term cap (nDCG@10; tune / held out)",
        "",
        "| terms | once each | in proportion to weight |",
        "|---|---|---|",
    ]
    by = {(r["cap"], r["weighted"]): r for r in result["sweep"]}
    for cap in sorted({r["cap"] for r in result["sweep"]}):
        cells = [
            f"{by[cap, w]['tune']['ndcg@10']:.4f} / {by[cap, w]['held_out']['ndcg@10']:.4f}"
            for w in (False, True)
        ]
        lines.append(f"| {cap} | {cells[0]} | {cells[1]} |")
    (HERE / "results" / "similar.md").write_text("\n".join(lines) + "\n")


def cold_start_lines(cold: dict[str, Any] | None) -> list[str]:
    if not cold:
        return []
    later = ", ".join(f"{s:.2f}" for s in cold["next_processes_s"])
    return [
        f"- fresh processes (`docsearch similar FILE --mode lexical -k 10 --json`, a "
        f"{cold['query_words']:,}-word case, whole command with its imports): "
        f"{cold['first_process_s']:.2f} s for the first (counts and keeps the statistics), "
        f"{later} s for the next ones (read them: {cold['read_kept_stats_s']:.2f} s, "
        f"{cold['kept_bytes'] / 1e6:.1f} MB)"
    ]


def _halves_row(name: str, metrics: dict[str, Any]) -> str:
    halves = metrics.get("halves", {})
    cells = [f"{metrics[m]:.4f}" for m in ("ndcg@10", "recall@10", "recall@100")]
    cells += [f"{halves[h]['ndcg@10']:.4f}" if h in halves else "-" for h in ("tune", "held_out")]
    return f"| {name} | {' | '.join(cells)} |"


def _latency_table(latency: dict[str, dict[str, float]], embedding: str) -> list[str]:
    """p50 per mode, with the share spent embedding the query document (`embedding`: its
    column's heading) and the rest."""
    lines = [f"| mode | p50 s | {embedding} | the rest |", "|---|---|---|---|"]
    for mode, timed in latency.items():
        lines.append(
            f"| {mode} | {timed['p50_s']:.2f} | {timed['p50_embedding_s']:.2f} | "
            f"{timed['p50_rest_s']:.2f} |"
        )
    return lines


def full_section() -> list[str]:
    """Dense and hybrid on the whole set (benchmarks/similar_dense.py --full)."""
    path = HERE / "results" / "similar_full.json"
    if not path.is_file():
        return []
    full = json.loads(path.read_text())
    lines = [
        "## Dense and hybrid: the whole set",
        "",
        f"All {full['queries']} queries and {full['documents']:,} documents; "
        f"{full['encoder']}, {full['chunks']:,} chunks, indexed in "
        f"{full['index_seconds'] / 60:.0f} min of wall time (bf16 on this CPU; other "
        "measurements ran beside it and paused it at times), once, and kept in the cache. The "
        "path is `docsearch eval --similar`'s (an EvalIndex and `Retriever.similar` over "
        "each query as an extracted document). The dense and hybrid weights were chosen "
        "before, on the 20-query subsample below; nothing here was tuned on these queries but "
        "the query-chunk cap (next table), on the tune half. Bold: what each mode ships; a "
        "collection with vectors searches hybrid unless told otherwise.",
        "",
        "command: `python benchmarks/similar_dense.py --full`",
        "",
        "| run (all 200 queries) | nDCG@10 | Recall@10 | Recall@100 | nDCG@10 tune half | "
        "nDCG@10 held-out half |",
        "|---|---|---|---|---|---|",
        _halves_row(
            "whole-document BM25, whole case as the query", full["baseline_bm25_whole_document"]
        ),
    ]
    lines += [
        _halves_row(f"**{name}** (the default)" if name in SHIPPED else name, metrics)
        for name, metrics in full["rules"].items()
    ]
    check = full.get("cli_check")
    if check:
        figures = ", ".join(
            f"{mode} {run['metrics']['ndcg@10']:.4f} ({run['search_seconds']} s of search)"
            for mode, run in check["results"].items()
        )
        lines += [
            "",
            f"The product command on the same kept index, `{check['command']}`, printed nDCG@10 "
            f"{figures}.",
        ]
    caps = full.get("caps", {})
    if caps:
        lines += [
            "",
            "The shipped vector and hybrid rules with the query document (from outside the "
            "collection) embedded through at most N of its chunks, spread evenly over it "
            f"(`similar.MAX_QUERY_CHUNKS`, shipped: {full.get('max_query_chunks')}, as in the "
            "rows above: the smallest N whose hybrid nDCG@10 on the tune half is within 0.005 "
            "of embedding every chunk):",
            "",
            "| N | mode | nDCG@10 | Recall@10 | Recall@100 | nDCG@10 tune half | "
            "nDCG@10 held-out half |",
            "|---|---|---|---|---|---|---|",
        ]
        for cap, scored in caps.items():
            for mode, metrics in scored.items():
                lines.append(_halves_row(f"{cap if cap != '0' else 'all'} | {mode}", metrics))
    if "latency" in full:
        words_at = ", ".join(f"{w:,}" for w in full["latency_query_words"])
        lines += [
            "",
            f"Latency on the whole set: the {len(full['latency_query_words'])} queries nearest "
            f"10k words ({words_at} words), k=10 with explanations, each query document embedded "
            "afresh (through the shipped cap), one after another, nothing else running; in "
            "hybrid the embedding runs beside the lexical leg, so 'the rest' (total minus "
            "embedding) overstates what follows it:",
            "",
            *_latency_table(full["latency"], "embedding the query document"),
        ]
    return [*lines, ""]


def dense_section() -> list[str]:
    """Dense and hybrid on the subsample of benchmarks/similar_dense.py (results/similar_dense.json)."""
    path = HERE / "results" / "similar_dense.json"
    if not path.is_file():
        return ["Dense and hybrid: not measured (run benchmarks/similar_dense.py).", ""]
    dense = json.loads(path.read_text())
    lines = [
        "## Dense and hybrid (a subsample)",
        "",
        "Before the whole set above was indexed (a MiniLM index of all 2,000 cases looked like "
        "hours on 2 shared cores), the rules were chosen on a stated subsample: "
        f"{'; '.join(dense['notes'])}. "
        f"{dense['documents']} documents, {dense['chunks']:,} chunks, {dense['queries']} queries; "
        f"{dense['encoder']}, indexed in {dense['index_seconds'] / 60:.0f} min. The baseline is "
        "scored on the same documents and queries. Most of the candidates are cited by one of "
        "the sampled queries (the full set: 5 of 2,000 per query), so every figure is far above "
        "the full set's and dense gains need not carry over; compare rows, not sets. With 20 "
        "queries, differences of a few hundredths of nDCG@10 are noise.",
        "",
        "command: `python benchmarks/similar_dense.py --queries 20 --docs 150`",
        "",
        "| run (subsample) | nDCG@10 | Recall@10 | Recall@100 |",
        "|---|---|---|---|",
        _row("whole-document BM25, whole case as the query", dense["baseline_bm25_whole_document"]),
    ]
    lines += [
        _row(f"**{name}** (the default)" if name in SHIPPED else name, metrics)
        for name, metrics in dense["rules"].items()
    ]
    if "latency" not in dense:
        return [*lines, "", "Latency on the subsample: not measured yet.", ""]
    words_at = ", ".join(f"{w:,}" for w in dense["latency_query_words"])
    lines += [
        "",
        f"Latency on the subsample: the {len(dense['latency_query_words'])} queries nearest 10k "
        f"words ({words_at} words), k=10 with explanations, each query document embedded afresh:",
        "",
        *_latency_table(dense["latency"], "of which embedding the query document"),
    ]
    lines += [
        "",
        "These were measured before the query-chunk cap, every chunk of the query document "
        "embedded (about 60 MiniLM chunks of 256 tokens for 10k words: over 2 s on 2 cores, "
        "under load). With the cap, see the whole-set latency above. The rest (searches, chunk "
        "matching, explanations) depends little on the collection's size: chunk matching reads "
        "the chunks of at most 200 candidates (the top 100 of each document leg; here all 150 "
        "documents).",
    ]
    return [*lines, ""]


if __name__ == "__main__":
    main()
