"""Needle-in-a-haystack probe by position: `benchmarks/results/needle.{json,md}`.

    python benchmarks/needle.py [--encoders sentence-transformers] [--passages 8] [--queries 40]

Haystacks of --passages SciFact abstracts, one per query, with the query's relevant abstract (the
needle) at position 1..N and the same fillers around it (`docsearch.corpora.needle`). Each
encoder reads the haystacks two ways:
- `one vector`: the encoder embeds each whole haystack as one input, as the M2-BERT paper's probe
  does; an encoder truncates what exceeds its window, so a short-window encoder only sees the
  first passages;
- `pipeline`: docsearch's own path: chunks that fit the encoder, a document scores as its best
  chunk (vector mode).
`none` (BM25, lexical-only index) is the position-blind control. Encoders that cannot be built
offline are listed with the reason.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA, DEFAULT_CACHE, RESULTS, machine, machine_lines, write_results  # noqa: E402
from benchmarks.quality import LEXICAL_ONLY, probe_encoders  # noqa: E402
from docsearch.corpora.beir import RetrievalSet, load_beir  # noqa: E402
from docsearch.corpora.needle import needle_sets  # noqa: E402
from docsearch.evaluation import EvalIndex, score_run  # noqa: E402


def one_vector(encoder: Any, rset: RetrievalSet) -> float:
    """nDCG@10 when each haystack is a single (possibly truncated) encoder input."""
    ids = list(rset.corpus)
    docs = encoder.encode_documents([rset.corpus[d].body for d in ids])  # (docs, dim)
    qids = list(rset.queries)
    queries = encoder.encode_queries([rset.queries[q] for q in qids])  # (queries, dim)
    scores = queries @ docs.T  # (queries, docs), unit vectors: cosine
    run = {q: [ids[i] for i in np.argsort(-scores[row])[:100]] for row, q in enumerate(qids)}
    return score_run(run, rset.qrels)[0]["ndcg@10"]


def pipeline(encoder: str, rset: RetrievalSet, mode: str, cache: Path) -> tuple[float, int]:
    with EvalIndex(rset, encoder=encoder, cache=cache) as index:
        return index.evaluate(mode).metrics["ndcg@10"], index.chunks


def run_encoder(name: str, sets: list[RetrievalSet], cache: Path) -> dict[str, Any]:
    from docsearch.encoders.base import get_encoder

    started = time.perf_counter()
    if name == LEXICAL_ONLY:
        scores = [pipeline(name, s, "lexical", cache) for s in sets]
        return {"pipeline (BM25)": [round(v, 4) for v, _ in scores], "seconds": _since(started)}
    encoder = get_encoder(name)
    window = encoder.max_tokens
    try:
        whole: list[float] | str = [round(one_vector(encoder, s), 4) for s in sets]
    except Exception as exc:  # noqa: BLE001 - an encoder that refuses long inputs is a finding
        whole = f"failed: {type(exc).__name__}: {exc}"[:200]
    del encoder
    gc.collect()
    chunked = [pipeline(name, s, "vector", cache) for s in sets]
    return {
        "window_tokens": window,
        "one vector": whole,
        "pipeline (best chunk)": [round(v, 4) for v, _ in chunked],
        "pipeline_chunks": [n for _, n in chunked],
        "seconds": _since(started),
    }


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 1)


def needle_tokens(sets: list[RetrievalSet]) -> list[int]:
    """Mean whitespace-token offset of the needle per position (from the set notes)."""
    out = []
    for rset in sets:
        offsets = [int(n.rsplit("offset ", 1)[1].rstrip(")")) for n in rset.notes if "offset" in n]
        body = next(iter(rset.corpus.values())).body
        words_per_char = len(body.split()) / max(1, len(body))
        out.append(int(offsets[0] * words_per_char) if offsets else 0)
    return out


def markdown(payload: dict[str, Any]) -> str:
    n = payload["passages"]
    lines = ["# Needle in a haystack: nDCG@10 by needle position", ""]
    lines += machine_lines(payload["machine"], payload["command"])
    lines += [
        f"- haystacks: {payload['queries']} SciFact test queries, each with a document of {n} "
        f"abstracts (~{payload['haystack_words']} words); the needle is the query's relevant "
        "abstract, the other abstracts are the same at every position",
        "- `one vector`: the whole haystack as one encoder input (truncated at the encoder's "
        "window); `pipeline`: docsearch chunks it and scores a document by its best chunk",
        "",
        "| encoder | reading | window | " + " | ".join(f"pos {p}" for p in range(1, n + 1)) + " |",
        "|---|---|---|" + "---|" * n,
        "| (needle starts at word) | | | "
        + " | ".join(str(w) for w in payload["needle_words"])
        + " |",
    ]
    for name, row in payload["rows"].items():
        for reading, values in row.items():
            if isinstance(values, list) and reading != "pipeline_chunks":
                window = row.get("window_tokens") or "-"
                lines.append(
                    f"| {name} | {reading} | {window} | "
                    + " | ".join(f"{v:.3f}" for v in values)
                    + " |"
                )
    failed = [
        (k, r["one vector"])
        for k, r in payload["rows"].items()
        if isinstance(r.get("one vector"), str)
    ]
    lines += [f"- `{k}` one vector: {why}" for k, why in failed]
    lines += ["", "## Encoders not in the table", ""]
    lines += [f"- `{k}`: {v}" for k, v in payload["skipped"].items()] or ["- none"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoders", help="comma-separated registry names and/or 'none'")
    parser.add_argument("--passages", type=int, default=8)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    info = machine()
    sets = needle_sets(
        load_beir(DATA / "scifact"), passages=args.passages, queries=args.queries, seed=args.seed
    )
    wanted = args.encoders.split(",") if args.encoders else None
    encoders, skipped = probe_encoders([w for w in wanted if w != LEXICAL_ONLY] if wanted else None)
    names = ([LEXICAL_ONLY] if wanted is None or LEXICAL_ONLY in wanted else []) + encoders
    rows = {}
    for name in names:
        rows[name] = run_encoder(name, sets, args.cache)
        print(f"{name}: {rows[name]}", file=sys.stderr)
    first = next(iter(sets[0].corpus.values())).body
    payload = {
        "machine": info,
        "command": "python " + " ".join(sys.argv),
        "passages": args.passages,
        "queries": len(sets[0].queries),
        "haystack_words": len(first.split()),
        "needle_words": needle_tokens(sets),
        "rows": rows,
        "skipped": skipped,
    }
    write_results(args.out, "needle", payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
