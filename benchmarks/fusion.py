"""Choose the hybrid fusion default on train/val queries only: `benchmarks/results/fusion.{json,md}`.

    python benchmarks/fusion.py [--encoder sentence-transformers] [--cache DIR]

For every tuning query (qmsum train+val, qmsum/summary2meeting train+val, scifact/train) it
records the two legs exactly as `Retriever.search(k=100)` computes them (pool of 500 chunks per
leg, a document scores as its best chunk, identifier lifting on the lexical leg), then scores
each candidate rule offline. The rule kept is the one whose worst margin over the better single
leg, across the tuning sets, is largest (ties: the higher mean nDCG@10). Test queries are never
looked at here; `benchmarks/quality.py` checks the chosen default on them. A dataset's train and
val queries are pooled (qmsum/summary2meeting has only 35 val queries: one query moves its
mean nDCG@10 by up to 0.03, far more than the differences between good rules).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DEFAULT_CACHE, RESULTS, TUNING, load_group, machine, machine_lines  # noqa: E402
from docsearch.evaluation import RUN_DEPTH, EvalIndex, ndcg_at_k  # noqa: E402
from docsearch.fusion import Fusion  # noqa: E402
from docsearch.store.schema import Candidate  # noqa: E402

Legs = dict[str, dict[str, float]]  # leg -> doc id -> score


def best_per_doc(found: list[Candidate]) -> dict[str, float]:
    out: dict[str, float] = {}
    for one in found:  # candidates arrive best first
        out.setdefault(one.path, one.score)
    return out


def query_legs(retriever: Any, query: str, depth: int = RUN_DEPTH) -> Legs:
    """Both legs as `Retriever.search(query, k=depth)` sees them before fusing."""
    pool = max(50, 5 * depth)
    vector = retriever.encoder().encode_queries([query])[0]
    return {
        "dense": best_per_doc(retriever.store.search_vector(vector, pool, None)),
        "lexical": best_per_doc(retriever.lexical(query, pool, None)),
    }


def collect(encoder: str, cache: Path, seed: int) -> dict[str, dict[str, Any]]:
    """{"name:split": {"legs": {qid: Legs}, "qrels": {...}}}, cached next to the indexes."""
    out: dict[str, dict[str, Any]] = {}
    for group in TUNING:
        index_set, sets = load_group(group, seed=seed)
        with EvalIndex(index_set, encoder=encoder, cache=cache) as index:
            print(f"{group.corpus}: {index.chunks} chunks, cached={index.cached}", file=sys.stderr)
            retriever = index.retriever()
            for key, rset in sets.items():
                tag = hashlib.sha1(json.dumps(sorted(rset.queries)).encode()).hexdigest()[:12]
                path = cache / f"{index.name}-legs-{tag}.pkl"
                if path.is_file():
                    legs = pickle.loads(path.read_bytes())
                else:
                    started = time.perf_counter()
                    legs = {q: query_legs(retriever, t) for q, t in rset.queries.items()}
                    path.write_bytes(pickle.dumps(legs))
                    print(
                        f"  {key}: {len(legs)} queries, {time.perf_counter() - started:.0f} s",
                        file=sys.stderr,
                    )
                out[key] = {"legs": legs, "qrels": rset.qrels}
    return out


# ---------------------------------------------------------------------------------------------
# Scoring rules offline


def ranking(scores: Mapping[str, float]) -> list[str]:
    return sorted(scores, key=lambda d: (-scores[d], d))[:10]


def mean_ndcg(data: dict[str, Any], rule: Callable[[Legs], Mapping[str, float]]) -> float:
    values = [
        ndcg_at_k(ranking(rule(legs)), data["qrels"][q], 10) for q, legs in data["legs"].items()
    ]
    return sum(values) / len(values)


def candidates() -> dict[str, Fusion]:
    rules: dict[str, Fusion] = {}
    for wd in (0.1, 0.2, 0.3, 0.5, 1.0):
        rules[f"rrf k=60 dense={wd}"] = Fusion("rrf", {"dense": wd, "lexical": 1.0}, 60)
    for a in (0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5):
        rules[f"minmax dense={a}"] = Fusion("minmax", {"dense": a, "lexical": round(1 - a, 2)})
    for a in (0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6):
        rules[f"maxnorm dense={a}"] = Fusion("maxnorm", {"dense": a, "lexical": round(1 - a, 2)})
    return rules


def pool_splits(data: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{"qmsum:train": ..., "qmsum:val": ...} -> {"qmsum (train+val)": ...}."""
    pooled: dict[str, dict[str, Any]] = {}
    for key, d in data.items():
        name, split = key.split(":")
        pooled.setdefault(name, {"legs": {}, "qrels": {}, "splits": []})
        pooled[name]["legs"].update(d["legs"])
        pooled[name]["qrels"].update(d["qrels"])
        pooled[name]["splits"].append(split)
    return {f"{n} ({'+'.join(d.pop('splits'))})": d for n, d in pooled.items()}


def evaluate(data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    data = pool_splits(data)
    legs = {
        key: {
            "lexical": mean_ndcg(d, lambda L: L["lexical"]),
            "vector": mean_ndcg(d, lambda L: L["dense"]),
        }
        for key, d in data.items()
    }
    table: dict[str, dict[str, float]] = {}
    for name, fusion in candidates().items():
        table[name] = {key: mean_ndcg(d, fusion) for key, d in data.items()}
    margins = {
        name: min(row[k] - max(legs[k].values()) for k in row) for name, row in table.items()
    }
    means = {name: sum(row.values()) / len(row) for name, row in table.items()}
    chosen = max(table, key=lambda n: (round(margins[n], 4), means[n]))
    sizes = {key: len(d["legs"]) for key, d in data.items()}
    return {
        "queries": sizes,
        "legs": legs,
        "rules": table,
        "worst_margin": margins,
        "mean": means,
        "chosen": chosen,
        "fusion": asdict(candidates()[chosen]),
    }


def write(result: dict[str, Any], info: dict[str, Any], command: str, encoder: str) -> None:
    sets = list(result["legs"])
    lines = ["# Fusion tuning (train/val queries only)", ""]
    lines += machine_lines(info, command)
    lines += [f"- encoder: {encoder}; lexical = BM25 over the same chunks", ""]
    lines += [
        "| rule | "
        + " | ".join(f"{s} [{result['queries'][s]} q]" for s in sets)
        + " | worst margin | mean |"
    ]
    lines += ["|---|" + "---|" * (len(sets) + 2)]
    for leg in ("lexical", "vector"):
        lines.append(
            f"| {leg} only | "
            + " | ".join(f"{result['legs'][s][leg]:.4f}" for s in sets)
            + " | | |"
        )
    for name, row in result["rules"].items():
        mark = " **(chosen)**" if name == result["chosen"] else ""
        cells = " | ".join(f"{row[s]:.4f}" for s in sets)
        lines.append(
            f"| {name}{mark} | {cells} | {result['worst_margin'][name]:+.4f} | {result['mean'][name]:.4f} |"
        )
    lines += ["", "Worst margin: min over the tuning sets of nDCG@10(rule) - max(lexical, vector)."]
    (RESULTS / "fusion.md").write_text("\n".join(lines) + "\n")
    payload = {"machine": info, "command": command, "encoder": encoder, **result}
    (RESULTS / "fusion.json").write_text(json.dumps(payload, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default="sentence-transformers")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    info = machine()
    data = collect(args.encoder, args.cache, args.seed)
    result = evaluate(data)
    write(result, info, "python " + " ".join(sys.argv), args.encoder)
    print(
        f"chosen: {result['chosen']} (worst margin {result['worst_margin'][result['chosen']]:+.4f})"
    )


if __name__ == "__main__":
    main()
