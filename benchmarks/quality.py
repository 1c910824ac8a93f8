"""Retrieval quality of every offline encoder x mode x dataset: `benchmarks/results/quality.{json,md}`.

    python benchmarks/quality.py [--encoders none,sentence-transformers] [--datasets cuad,scifact]
        [--modes lexical,vector,hybrid] [--max-docs N] [--max-queries N] [--cache DIR]
        [--merge OLD/quality.json]

Every encoder in the registry is tried with its default options; one that cannot be built here
(no weights offline, missing module) is listed with the reason. `none` is the lexical-only index
(BM25 over 400-word chunks, no model). `bm25-reference` is whole-document Okapi BM25 from
rank-bm25 (k1 0.9, b 0.4, regex word tokens, no stemming: the data README's reference), not a
docsearch mode. Each corpus is indexed once per encoder through the real pipeline and searched in
every mode with the default rules (docsearch.fusion.DOCUMENT_RULES); `--compare-chunk` adds the
hybrid ranking from before the document level (each document its best chunk, CHUNK_FUSION), and
`--compare-rrf` plain RRF over the same (both without the numbered-instrument lift, which came
later). The main table runs every corpus at full size (the small
tier samples, see `eval_sets.py`). Indexes are cached in --cache, so a re-run only searches (a
cached collection built before the document table gets one from its stored chunks and vectors:
nothing is embedded); `--merge` keeps an earlier run's cells for the datasets this one leaves out.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import docsearch.ranking as ranking_module  # noqa: E402
from benchmarks.eval_sets import (  # noqa: E402
    DEFAULT_CACHE,
    DEFAULT_DECODER,
    RESULTS,
    SMALL,
    SMALL_CAP,
    TABLE,
    Group,
    dataset_names,
    load_group,
    machine,
    machine_lines,
    write_results,
)
from docsearch.corpora.beir import RetrievalSet  # noqa: E402
from docsearch.evaluation import RUN_DEPTH, EvalIndex, score_run  # noqa: E402
from docsearch.fusion import CHUNK_FUSION, DOCUMENT_RULES, Fusion  # noqa: E402

MODES = ("lexical", "vector", "hybrid")
FAST = ("sentence-transformers",)  # encoders fast enough on CPU for the main table
MAIN_ABOUT = (
    "The lexical-only index and the fast encoders on the full corpora; `bm25-reference` is "
    "whole-document BM25, not a docsearch mode."
)
SMALL_ABOUT = (
    "Every encoder that runs offline, on small seeded samples that decoder encoders can embed "
    "on 2 CPU cores; the fast rows are repeated here so that the rows compare on the same "
    "documents. Decoder encoders run SmolLM2-135M (the packaged `smollm2-135m`; llm2vec untrained, "
    "bf16) on chunks of at most 1,024 tokens. CUAD is left out of this tier (8k-word contracts "
    "cost too much decoder time on 2 cores). Samples this small are noisy: read differences "
    "under ~0.05 as ties."
)
PLAIN_RRF = "hybrid, plain RRF"  # the pre-tuning default, for comparison (--compare-rrf)
BEST_CHUNK = "hybrid, best chunk"  # the default before the document level (--compare-chunk)
FUSIONS = {PLAIN_RRF: Fusion("rrf", {"dense": 1.0, "lexical": 1.0}, 60), BEST_CHUNK: CHUNK_FUSION}
NEEDS_RELEASED_WEIGHTS = {
    "m2-bert": "needs released weights (togethercomputer/m2-bert-80M-*), not on PyPI; "
    "random weights would measure nothing",
    "nv-embed": "needs released weights (nvidia/NV-Embed-v1/v2, 7B) or a latent block trained "
    "for the decoder (benchmarks/nv_embed_train.py reports that comparison)",
}
LEXICAL_ONLY = "none"
REFERENCE = "bm25-reference"
TOLERANCE = 0.005  # hybrid may trail the better leg by this much


def probe_encoders(wanted: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """(encoders to run, {encoder: why it is not in the table}); every one is tried.

    An encoder is tried with the options the small tier gives it (a named packaged decoder),
    so `llm2vec` runs as the untrained bidirectional SmolLM2; nv-embed's latent block and
    m2-bert need released weights, which are not here.
    """
    from docsearch.encoders.base import available, get_encoder

    run, skipped = [], {}
    for name in available():
        if name == "hashing":  # the test fake, registered only under tests
            continue
        if name in NEEDS_RELEASED_WEIGHTS:
            skipped[name] = NEEDS_RELEASED_WEIGHTS[name]
            continue
        try:
            encoder = get_encoder(name, **small_options(name))
            del encoder
        except Exception as exc:  # noqa: BLE001 - any failure to build means "cannot run here"
            why = f"{type(exc).__name__}: {_first_line(exc)}"
            skipped[name] = f"cannot be built offline ({why})"
            continue
        finally:
            gc.collect()
        if wanted is None or name in wanted:
            run.append(name)
        else:
            skipped[name] = "runs offline, left out of this run (add it with --encoders)"
    return run, skipped


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:200]


# ---------------------------------------------------------------------------------------------
# Cells


def cell(result: Any) -> dict[str, Any]:
    return {
        **{k: round(v, 4) for k, v in result.metrics.items()},
        "span_hits": {k: round(v, 4) for k, v in result.span_hits.items()},
        "queries": result.queries,
        "documents": result.documents,
        "chunks": result.chunks,
        "index_seconds": round(result.index_seconds, 1),
        "search_seconds": round(result.search_seconds, 1),
        "notes": result.notes,
    }


def small_options(encoder: str) -> dict[str, Any]:
    """The small tier names its decoder (the same indexes as benchmarks/decoder_quality.py)."""
    if encoder in FAST:
        return {}
    if encoder == "llm2vec":  # float32 is its default (parity); bf16 is 4x faster on this CPU
        return {"model": DEFAULT_DECODER, "dtype": "bfloat16"}
    return {"model": DEFAULT_DECODER}


def run_encoder(
    encoder: str,
    groups: list[Group],
    modes: list[str],
    args: argparse.Namespace,
    small: bool = False,
) -> dict[str, dict[str, dict[str, Any]]]:
    """{mode: {dataset: cell}} for one encoder over every selected dataset."""
    if "hybrid" in modes:
        modes += [
            m
            for m, asked in ((BEST_CHUNK, args.compare_chunk), (PLAIN_RRF, args.compare_rrf))
            if asked
        ]
    out: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in modes}
    for group in groups:
        index_set, sets = load_group(group, args.max_docs, args.max_queries, args.seed)
        options = small_options(encoder) if small else dict(o.split("=", 1) for o in args.option)
        cap = SMALL_CAP if small and encoder not in FAST else None
        with EvalIndex(
            index_set, encoder=encoder, options=options, cap=cap, cache=args.cache
        ) as index:
            print(
                f"[{encoder}] {group.corpus}: {index.chunks} chunks, index "
                f"{index.index_seconds:.0f} s{' (cached)' if index.cached else ''}",
                file=sys.stderr,
            )
            for key, rset in sets.items():
                name = key.split(":")[0]
                for mode in modes:
                    started = time.perf_counter()
                    search_mode = "hybrid" if mode in FUSIONS else mode
                    # The rankings from before are compared as they were: no instrument lift.
                    ranking_module.LIFT_INSTRUMENTS = mode not in FUSIONS
                    result = index.evaluate(search_mode, queries=rset, fusion=FUSIONS.get(mode))
                    out[mode][name] = cell(result) | {"cached_index": index.cached}
                    print(
                        f"  {name} {mode}: nDCG@10 {result.metrics['ndcg@10']:.4f} "
                        f"({time.perf_counter() - started:.0f} s)",
                        file=sys.stderr,
                    )
    return out


def reference_bm25(rset: RetrievalSet) -> dict[str, Any]:
    """Whole-document Okapi BM25 (rank-bm25) over the same documents and queries."""
    from rank_bm25 import BM25Okapi

    def tokens(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    started = time.perf_counter()
    ids = list(rset.corpus)
    bm25 = BM25Okapi([tokens(rset.corpus[d].body) for d in ids], k1=0.9, b=0.4)
    run = {}
    for qid, text in rset.queries.items():
        scores = bm25.get_scores(tokens(text))
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))[:RUN_DEPTH]
        run[qid] = [ids[i] for i in order]
    means, per_query = score_run(run, {q: rset.qrels.get(q, {}) for q in rset.queries})
    return {
        **{k: round(v, 4) for k, v in means.items()},
        "span_hits": {},
        "queries": len(per_query),
        "documents": len(rset.corpus),
        "chunks": len(rset.corpus),
        "index_seconds": 0.0,
        "search_seconds": round(time.perf_counter() - started, 1),
        "notes": rset.notes,
    }


def run_reference(groups: list[Group], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    out = {}
    for group in groups:
        _, sets = load_group(group, args.max_docs, args.max_queries, args.seed)
        for key, rset in sets.items():
            out[key.split(":")[0]] = reference_bm25(rset)
    return out


# ---------------------------------------------------------------------------------------------
# Markdown


def _fusion_text() -> str:
    rules = "; ".join(f"{mode}: {_rule(rule)}" for mode, rule in DOCUMENT_RULES.items())
    return f"{rules} (chunk level, and documents without document legs: {_rule(CHUNK_FUSION)})"


def _rule(rule: Fusion) -> str:
    if len(rule.weights) == 1:
        leg = next(iter(rule.weights))
        return f"{leg} ({rule.aggregate.get(leg, 'max')} per document)"
    legs = " + ".join(
        f"{w:g} {leg}" + (f" {rule.aggregate[leg]}" if leg in rule.aggregate else "")
        for leg, w in rule.weights.items()
    )
    return f"{rule.method}({legs})" + (f" agreement tau {rule.tau:g}" if rule.tau else "")


def hybrid_checks(rows: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    checks = []
    for encoder, modes in rows.items():
        if not all(m in modes for m in MODES):
            continue
        for dataset, hybrid in modes["hybrid"].items():
            lexical, vector = (
                modes["lexical"][dataset]["ndcg@10"],
                modes["vector"][dataset]["ndcg@10"],
            )
            margin = hybrid["ndcg@10"] - max(lexical, vector)
            checks.append(
                {
                    "encoder": encoder,
                    "dataset": dataset,
                    "lexical": lexical,
                    "vector": vector,
                    "hybrid": hybrid["ndcg@10"],
                    "margin": round(margin, 4),
                    "ok": margin >= -TOLERANCE,
                }
            )
    return checks


def markdown(payload: dict[str, Any]) -> str:
    lines = ["# Retrieval quality: encoder x mode x dataset", ""]
    lines += machine_lines(payload["machine"], payload["command"])
    lines += [
        f"- ranking rules: {payload['fusion']}",
        "- queries: test splits (a set without a split field is all test); document level, "
        "documents ranked by the rule of their mode (chunk legs over 500-chunk pools)",
        "",
    ]
    for tier in payload["tiers"].values():
        lines += _tier(tier)
    lines += ["## Encoders not in the tables", ""]
    lines += [f"- `{name}`: {why}" for name, why in payload["skipped"].items()] or ["- none"]
    return "\n".join(lines) + "\n"


def _tier(tier: dict[str, Any]) -> list[str]:
    datasets, rows = tier["datasets"], tier["rows"]
    lines = [f"## {tier['title']}", "", tier["about"], ""]
    lines += _metric_table(rows, datasets, "ndcg@10", "nDCG@10")
    lines += _hybrid_section(tier["hybrid_checks"])
    for metric, title in (
        ("recall@100", "Recall@100"),
        ("mrr@10", "MRR@10"),
        ("recall@10", "Recall@10"),
    ):
        lines += _metric_table(rows, datasets, metric, title)
    lines += _span_table(rows)
    lines += _time_table(rows, datasets)
    lines += ["### Sampling and sizes", ""]
    for dataset in datasets:
        cell = next((m[dataset] for r in rows.values() for m in r.values() if dataset in m), None)
        if cell:
            notes = "; ".join(cell["notes"]) or "all documents"
            lines.append(
                f"- {dataset}: {cell['queries']} queries, {cell['documents']} documents; {notes}"
            )
    return [*lines, ""]


def _metric_table(rows: dict[str, Any], datasets: list[str], metric: str, title: str) -> list[str]:
    lines = [f"### {title}", "", "| encoder | mode | " + " | ".join(datasets) + " |"]
    lines.append("|---|---|" + "---|" * len(datasets))
    for encoder, modes in rows.items():
        for mode, cells in modes.items():
            values = [f"{cells[d][metric]:.4f}" if d in cells else "-" for d in datasets]
            lines.append(f"| {encoder} | {mode} | " + " | ".join(values) + " |")
    return [*lines, ""]


def _hybrid_section(checks: list[dict[str, Any]]) -> list[str]:
    lines = [f"### Hybrid against the better leg (nDCG@10; pass: margin >= -{TOLERANCE})", ""]
    lines += [
        "| encoder | dataset | lexical | vector | hybrid | margin | pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        lines.append(
            f"| {c['encoder']} | {c['dataset']} | {c['lexical']:.4f} | {c['vector']:.4f} | "
            f"{c['hybrid']:.4f} | {c['margin']:+.4f} | {'yes' if c['ok'] else '**no**'} |"
        )
    return [*lines, ""]


def _span_table(rows: dict[str, Any]) -> list[str]:
    lines = [
        "### CUAD: answer span in a top-k passage (chunk level)",
        "",
        "| encoder | mode | hit@1 | hit@5 | hit@10 |",
        "|---|---|---|---|---|",
    ]
    found = False
    for encoder, modes in rows.items():
        for mode, cells in modes.items():
            spans = cells.get("cuad", {}).get("span_hits")
            if spans:
                found = True
                lines.append(
                    f"| {encoder} | {mode} | "
                    + " | ".join(f"{spans[f'hit@{k}']:.4f}" for k in (1, 5, 10))
                    + " |"
                )
    return [*lines, ""] if found else []


def _time_table(rows: dict[str, Any], datasets: list[str]) -> list[str]:
    lines = [
        "### Wall time per cell: index (shared by a corpus's modes and datasets) + search, seconds",
        "",
    ]
    lines += [
        "| encoder | mode | " + " | ".join(datasets) + " |",
        "|---|---|" + "---|" * len(datasets),
    ]
    for encoder, modes in rows.items():
        for mode, cells in modes.items():
            values = [
                f"{cells[d]['index_seconds']:.0f}{'*' if cells[d].get('cached_index') else ''} + "
                f"{cells[d]['search_seconds']:.0f}"
                if d in cells
                else "-"
                for d in datasets
            ]
            lines.append(f"| {encoder} | {mode} | " + " | ".join(values) + " |")
    lines += [
        "",
        "\\* index built by an earlier run and reused from the cache (its build time shown).",
    ]
    return [*lines, ""]


# ---------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoders", help="comma-separated registry names, 'none' (default: all)")
    parser.add_argument("--datasets", help="comma-separated dataset folders (default: all)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max-docs", type=int, help="override every group's document cap")
    parser.add_argument("--max-queries", type=int, help="override every group's query sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-reference", action="store_true", help="skip the rank-bm25 row")
    parser.add_argument(
        "--compare-rrf", action="store_true", help="add a hybrid row fused by plain RRF (k=60)"
    )
    parser.add_argument(
        "--compare-chunk",
        action="store_true",
        help="add the hybrid row from before the document level (best chunk, maxnorm 0.4/0.6)",
    )
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option for the main tier's encoders, e.g. precision=fp32 (its own cached index)",
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for quality.{json,md}")
    parser.add_argument(
        "--tiers", default="main,small", help="main (fast encoders), small (every encoder)"
    )
    parser.add_argument(
        "--merge",
        type=Path,
        help="an earlier run's quality.json: its main-tier cells for datasets this run leaves "
        "out are kept (both commands are recorded)",
    )
    return parser.parse_args()


def merged(tier: dict[str, Any], earlier: Path) -> tuple[dict[str, Any], str]:
    """`tier` with the cells of `earlier`'s main tier that it lacks, and `earlier`'s command."""
    before = json.loads(earlier.read_text())
    old = before["tiers"]["main"]
    ordered = [d for d in dataset_names(TABLE) if d in {*tier["datasets"], *old["datasets"]}]
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for encoder in {**old["rows"], **tier["rows"]}:
        earlier, now = old["rows"].get(encoder, {}), tier["rows"].get(encoder, {})
        rows[encoder] = {}
        for mode in {**earlier, **now}:
            cells = {**earlier.get(mode, {}), **now.get(mode, {})}
            rows[encoder][mode] = {d: cells[d] for d in ordered if d in cells}
    out = tier | {"datasets": ordered, "rows": rows, "hybrid_checks": hybrid_checks(rows)}
    return out, before["command"]


def select_groups(table: tuple[Group, ...], names: str | None) -> list[Group]:
    if not names:
        return list(table)
    wanted = set(names.split(","))
    unknown = wanted - set(dataset_names(table))
    if unknown:
        sys.exit(f"unknown datasets {sorted(unknown)}; choose from {dataset_names(table)}")
    return [
        Group(g.corpus, tuple(d for d in g.datasets if d[0] in wanted), g.max_docs, g.max_queries)
        for g in table
        if any(d[0] in wanted for d in g.datasets)
    ]


def run_tier(
    groups: list[Group],
    encoders: list[str],
    lexical: bool,
    args: argparse.Namespace,
    small: bool = False,
) -> dict[str, Any]:
    """Rows for the reference, the lexical-only index and `encoders` over `groups`."""
    modes = [m for m in MODES if m in args.modes.split(",")]
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    if not args.no_reference:
        rows[REFERENCE] = {"lexical": run_reference(groups, args)}
    if lexical:
        rows[LEXICAL_ONLY] = run_encoder(LEXICAL_ONLY, groups, ["lexical"], args, small)
    for encoder in encoders:
        rows[encoder] = run_encoder(encoder, groups, modes, args, small)
    datasets = [name for g in groups for name, _ in g.datasets]
    return {"datasets": datasets, "rows": rows, "hybrid_checks": hybrid_checks(rows)}


def main() -> None:
    args = parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    info = machine()
    wanted = args.encoders.split(",") if args.encoders else None
    encoders, skipped = probe_encoders([w for w in wanted if w != LEXICAL_ONLY] if wanted else None)
    lexical = wanted is None or LEXICAL_ONLY in wanted
    fast = [e for e in encoders if e in FAST]
    slow = [e for e in encoders if e not in FAST]
    tiers: dict[str, Any] = {}
    command = "python " + " ".join(sys.argv)
    if "main" in args.tiers:
        tier = run_tier(select_groups(TABLE, args.datasets), fast, lexical, args)
        if args.merge:
            tier, earlier = merged(tier, args.merge)
            command += f"; cells of the datasets it left out: `{earlier}`"
        tiers["main"] = tier | {"title": "Main table", "about": MAIN_ABOUT}
    if "small" in args.tiers and slow:
        small_args = argparse.Namespace(**{**vars(args), "max_docs": None, "max_queries": None})
        groups = select_groups(SMALL, args.datasets)
        tier = run_tier(groups, [*fast, *slow], lexical, small_args, small=True)
        tiers["small"] = tier | {
            "title": "Small-sample table (every encoder)",
            "about": SMALL_ABOUT,
        }
    payload = {
        "machine": info,
        "command": command,
        "fusion": _fusion_text(),
        "tiers": tiers,
        "skipped": skipped,
    }
    write_results(args.out, "quality", payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
