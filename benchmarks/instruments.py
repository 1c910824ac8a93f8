"""Does lifting the numbered instrument a query names ("Amendment No. 3") find it among siblings?

    python -m benchmarks.instruments [--encoders none,sentence-transformers] [--cache DIR]

CUAD holds contract families (an agreement and its amendments No. 1, 2, 3) whose members share
parties and wording. `data/cuad_instruments.jsonl` holds 19 queries in the LegalBench-RAG form
("Consider the <instrument> between <parties>; <question>"), written for this benchmark from the
headings of the corpus's amendments, none from a test query: 16 name the amendment they want,
3 name an amendment while wanting the original agreement (where the lift can only hurt). Each
set's real queries are searched too: every query of the shared sets that names an instrument
(the lift leaves the others' order untouched, `tests/test_instruments.py`), and all of CUAD's.
Each through the real Retriever on quality.py's cached full-corpus indexes (lexical: the index
without a model; hybrid: MiniLM), with the lift on and off (`retriever.LIFT_INSTRUMENTS`).
Writes results/instruments.{json,md}, keeping the notes below the marker.
Not here: the lift itself (docsearch.instruments, ranking.DocumentRanker.instruments_first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import docsearch.ranking as ranking_module  # noqa: E402
from benchmarks.eval_sets import (  # noqa: E402
    DATA,
    DEFAULT_CACHE,
    RESULTS,
    TABLE,
    load_group,
    machine,
    machine_lines,
    write_results,
)
from docsearch import instruments  # noqa: E402
from docsearch.corpora.beir import RetrievalSet, load_beir  # noqa: E402
from docsearch.evaluation import EvalIndex, ndcg_at_k  # noqa: E402

QUERIES = Path(__file__).resolve().parent / "data" / "cuad_instruments.jsonl"
MODES = {"none": ("lexical",), "sentence-transformers": ("lexical", "hybrid")}
DEPTH = 100


def validation_sets() -> dict[str, tuple[dict[str, str], dict[str, set[str]]]]:
    """kind -> (queries, relevant documents) of the written queries."""
    out: dict[str, tuple[dict[str, str], dict[str, set[str]]]] = {}
    for line in QUERIES.read_text().splitlines():
        row = json.loads(line)
        queries, qrels = out.setdefault(f"written, {row['kind']}", ({}, {}))
        queries[row["_id"]] = row["text"]
        qrels[row["_id"]] = {row["relevant"]}
    return out


def naming_queries(corpus: str) -> dict[str, tuple[dict[str, str], dict[str, set[str]]]]:
    """The real queries (every split) over `corpus` that name an instrument, per dataset."""
    group = next(g for g in TABLE if g.corpus == corpus)
    out = {}
    for name, _ in group.datasets:
        rset = load_beir(DATA / name, "all")
        named = {q: t for q, t in rset.queries.items() if instruments.in_query(t)}
        if named:
            out[f"{name}, naming"] = (named, {q: rset.relevant(q) for q in named})
    return out


def compare(
    retriever: Any, queries: dict[str, str], qrels: dict[str, set[str]], mode: str
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(lift off, lift on): query id -> nDCG@10, the rank of its first relevant document
    (None: not in DEPTH) and the search's milliseconds; each query searched off then on."""
    out: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]] = ({}, {})
    for qid, text in queries.items():
        for lift, into in ((False, out[0]), (True, out[1])):
            ranking_module.LIFT_INSTRUMENTS = lift
            started = time.perf_counter()
            found = [h.path for h in retriever.search(text, k=DEPTH, mode=mode)]
            ms = 1000 * (time.perf_counter() - started)
            rank = next((i for i, path in enumerate(found, 1) if path in qrels[qid]), None)
            ndcg = ndcg_at_k(found, dict.fromkeys(qrels[qid], 1), 10)
            into[qid] = {"ndcg": ndcg, "rank": rank, "ms": ms}
    ranking_module.LIFT_INSTRUMENTS = True
    return out


def run_corpus(corpus: str, encoder: str, cache: Path) -> list[dict[str, Any]]:
    group = next(g for g in TABLE if g.corpus == corpus)
    index_set, test = load_group(group, 100_000, 100_000)
    sets = naming_queries(corpus)
    if corpus == "cuad":
        rset: RetrievalSet = next(iter(test.values()))
        sets = validation_sets() | sets
        sets["cuad, all test queries"] = (rset.queries, {q: rset.relevant(q) for q in rset.queries})
    rows = []
    with EvalIndex(index_set, encoder=encoder, cache=cache) as index:
        print(f"[{encoder}] {corpus}: {index.chunks} chunks", file=sys.stderr)
        retriever = index.retriever()
        for name, (queries, qrels) in sets.items():
            for mode in MODES[encoder]:
                compare(retriever, queries, qrels, mode)  # warm: caches, the query thread
                off, on = compare(retriever, queries, qrels, mode)
                rows.append(row(corpus, name, encoder, mode, queries, off, on))
                print(
                    f"  {name} {mode}: {rows[-1]['off']:.4f} -> {rows[-1]['on']:.4f}",
                    file=sys.stderr,
                )
    return rows


def row(
    corpus: str,
    name: str,
    encoder: str,
    mode: str,
    queries: dict[str, str],
    off: dict[str, dict[str, Any]],
    on: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    changed = {
        q: {"query": queries[q], "rank_off": off[q]["rank"], "rank_on": on[q]["rank"]}
        for q in queries
        if off[q]["rank"] != on[q]["rank"]
    }
    return {
        "corpus": corpus,
        "set": name,
        "encoder": encoder,
        "mode": mode,
        "queries": len(queries),
        "naming": sum(bool(instruments.in_query(t)) for t in queries.values()),
        "off": sum(r["ndcg"] for r in off.values()) / len(off),
        "on": sum(r["ndcg"] for r in on.values()) / len(on),
        "at_1_off": sum(r["rank"] == 1 for r in off.values()),
        "at_1_on": sum(r["rank"] == 1 for r in on.values()),
        "ms_off": statistics.median(r["ms"] for r in off.values()),
        "ms_on": statistics.median(r["ms"] for r in on.values()),
        "changed": changed,
    }


def markdown(payload: dict[str, Any]) -> str:
    lines = [
        "# Numbered instruments: the lift on and off",
        "",
        *machine_lines(payload["machine"], payload["command"]),
        "",
        "nDCG@10 at the document level, and how many queries find their document at rank 1,",
        "with the lift off and on; the same index and queries in each row. ms: median search time",
        "(k=100, documents), each query searched with the lift off then on, after one warm pass.",
        "",
        "| corpus | queries | n | naming | encoder | mode | nDCG off | nDCG on | at 1 off "
        "| at 1 on | ms off | ms on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        lines.append(
            f"| {r['corpus']} | {r['set']} | {r['queries']} | {r['naming']} | {r['encoder']} "
            f"| {r['mode']} | {r['off']:.4f} | {r['on']:.4f} | {r['at_1_off']} | {r['at_1_on']} "
            f"| {r['ms_off']:.1f} | {r['ms_on']:.1f} |"
        )
    lines += ["", "Queries whose document moved (rank off -> on):", ""]
    for r in payload["rows"]:
        for qid, c in r["changed"].items():
            lines.append(
                f"- {r['set']}, {r['encoder']} {r['mode']}, {qid}: {c['rank_off']} -> "
                f'{c["rank_on"]}: "{c["query"][:110]}"'
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoders", default="none,sentence-transformers")
    parser.add_argument("--corpora", default="cuad,qmsum")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()
    rows = [
        one
        for corpus in args.corpora.split(",")
        for encoder in args.encoders.split(",")
        for one in run_corpus(corpus, encoder, args.cache)
    ]
    payload = {
        "machine": machine(),
        "command": "cd benchmarks && python " + " ".join(sys.argv),
        "rows": rows,
    }
    from benchmarks.peers import NOTES, kept_notes

    notes = kept_notes(RESULTS / "instruments.md")
    write_results(RESULTS, "instruments", payload, markdown(payload) + f"\n{NOTES}\n{notes}")


if __name__ == "__main__":
    main()
