"""What issue 37's query rules cost a short hybrid search: speed.md's 100k-chunk latency, again.

    flock /tmp/docsearch-heavy.lock python -m benchmarks.rule_latency [--work DIR] [--rounds 5]

Issue 37 acceptance 5: hybrid p50 at 100k chunks stays within 10% of speed.md's figure. Two
measures on speed.py's synthetic 100k-chunk collection (query encoding excluded, as there):
- `speed.py`: speed.py's own latency part (`speed.latency`), as speed.md's table was made;
- `a/b`: the shipped rules (fusion.form_rule: key terms by TERM_LIST_RULE, RareTerms and each
  leg's confidence on the four-leg rule) against the rule-free hybrid of 12bf41f (the four-leg
  rule for every short query: a Retriever given `DOCUMENT_RULES["hybrid"]` without `rare` or
  `confidence`), in interleaved rounds (the order
  flips each round) over four kinds of short query: speed.py's 3 words, 6 space-separated
  words (key terms now: no dense legs), 3 comma-separated terms (a list now) and 6 words with
  an "of" inside (key terms since the joiner);
- `spread`: speed.py's 3 words through the shipped rules against the same without the
  spread-words switch (fusion.SpreadWords: a Retriever given BARE_WORDS_RULE without it), in
  interleaved rounds, and how many of the queries the switch ranks (rule "whole-document").
- `versions` (with `--against COMMIT`): speed.py's three modes on the same collection in fresh
  processes, this checkout's docsearch against COMMIT's (a git worktree), alternating. Why:
  speed.md's figure was measured on another machine, and these 2-core hosts differ by 2x in
  every search leg, so only a comparison on one host can tell what the code changed.
Writes benchmarks/results/rule_latency.{json,md}; the load average is recorded per round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import speed  # noqa: E402

SIZE = 100_000
NOTES = "<!-- notes: kept across runs -->"
VARIANTS = ("shipped", "rule-free")
MODES = ("lexical", "vector", "hybrid")
VOCAB = [f"w{i}" for i in range(20000)]  # speed.py's made-up words


def query_kinds(rng: np.random.Generator, vocab: list[str], n: int) -> dict[str, list[str]]:
    """Short queries of made-up words (speed.py's vocabulary, its Zipf head) in three forms."""

    def words(count: int) -> list[str]:
        return [str(w) for w in rng.choice(vocab[:2000], size=count)]

    return {
        "3 words": [" ".join(words(3)) for _ in range(n)],
        "6 words": [" ".join(words(6)) for _ in range(n)],
        "3-term list": [", ".join(words(3)) for _ in range(n)],
        "6 words, an inner 'of'": [" ".join([*words(2), "of", *words(3)]) for _ in range(n)],
    }


def retrievers(db: str, name: str, vectors: np.ndarray) -> dict[str, Any]:
    from docsearch.fusion import DOCUMENT_RULES
    from docsearch.retriever import Retriever

    rule_free = replace(DOCUMENT_RULES["hybrid"], rare=None, confidence=None)
    return {
        "shipped": Retriever(name, db=db, encoder=speed.PrecomputedQueries(vectors)),  # type: ignore[arg-type]
        "rule-free": Retriever(
            name,
            db=db,
            encoder=speed.PrecomputedQueries(vectors),  # type: ignore[arg-type]
            fusion=rule_free,
        ),
    }


def timed(retriever: Any, queries: list[str]) -> list[float]:
    return speed.search_times(retriever, queries, "hybrid")


def a_b(db: str, n: int, rounds: int) -> dict[str, Any]:
    """Per kind and variant: every round's p50 and the pooled p50/p95; the loads per round."""
    rng = np.random.default_rng(7)
    kinds = query_kinds(rng, VOCAB, n)
    legs = retrievers(db, f"synthetic{SIZE}", speed.clustered(n, rng, speed.CENTROIDS))
    times: dict[str, dict[str, list[float]]] = {k: {v: [] for v in VARIANTS} for k in kinds}
    round_p50: dict[str, dict[str, list[float]]] = {k: {v: [] for v in VARIANTS} for k in kinds}
    loads = []
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for kind, queries in kinds.items():
            for variant in order:
                got = timed(legs[variant], queries)
                times[kind][variant] += got
                round_p50[kind][variant].append(float(np.percentile(got, 50)))
        print(f"round {r + 1}: load {loads[-1]:.2f} {round_p50}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"loads": loads, "kinds": {}}
    for kind in kinds:
        out["kinds"][kind] = {
            v: {
                "p50_ms": float(np.percentile(times[kind][v], 50)),
                "p95_ms": float(np.percentile(times[kind][v], 95)),
                "round_p50_ms": round_p50[kind][v],
                "median_round_p50_ms": statistics.median(round_p50[kind][v]),
            }
            for v in VARIANTS
        }
    return out


def spread_a_b(db: str, n: int, rounds: int) -> dict[str, Any]:
    """3-word queries: the shipped rules against them without the spread-words switch."""
    from collections import Counter

    from docsearch.fusion import BARE_WORDS_RULE
    from docsearch.retriever import Retriever

    rng = np.random.default_rng(7)
    queries = query_kinds(rng, VOCAB, n)["3 words"]
    vectors = speed.clustered(n, rng, speed.CENTROIDS)
    name = f"synthetic{SIZE}"
    variants = {
        "shipped": Retriever(name, db=db, encoder=speed.PrecomputedQueries(vectors)),  # type: ignore[arg-type]
        "without spread": Retriever(
            name,
            db=db,
            encoder=speed.PrecomputedQueries(vectors),  # type: ignore[arg-type]
            fusion=replace(BARE_WORDS_RULE, spread=None),
        ),
    }
    rules = Counter(variants["shipped"].search_result(q, k=10, mode="hybrid").rule for q in queries)
    round_p50: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in list(variants) if r % 2 == 0 else list(variants)[::-1]:
            round_p50[variant].append(float(np.percentile(timed(variants[variant], queries), 50)))
    return {"rules": dict(rules), "round_p50_ms": round_p50}


def mode_latency(checkout: str, db: str, n: int) -> dict[str, float]:
    """p50 ms per mode of speed.py's 3-word queries, with `checkout`'s docsearch (a worker
    process: nothing may have imported docsearch before)."""
    sys.path.insert(0, checkout)
    import docsearch
    from docsearch.retriever import Retriever

    # A docsearch from anywhere else (an installed copy) would time the wrong code in silence.
    if not Path(docsearch.__file__).resolve().is_relative_to(Path(checkout).resolve()):
        raise SystemExit(f"docsearch came from {docsearch.__file__}, not {checkout}")

    rng = np.random.default_rng(7)
    queries = query_kinds(rng, VOCAB, n)["3 words"]
    vectors = speed.clustered(n, rng, speed.CENTROIDS)
    retriever = Retriever(f"synthetic{SIZE}", db=db, encoder=speed.PrecomputedQueries(vectors))  # type: ignore[arg-type]
    return {
        mode: float(np.percentile(speed.search_times(retriever, queries, mode), 50))
        for mode in MODES
    }


def versions_a_b(db: str, n: int, rounds: int, against: str) -> dict[str, Any]:
    """Every round's p50 per mode for this checkout and `against` (a worktree of that commit),
    each a fresh process, the order flipped each round."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="docsearch-against-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(repo), "worktree"]
        subprocess.run(
            [*git, "add", "--detach", str(tree), against], check=True, capture_output=True
        )
        try:
            checkouts = {"this checkout": str(repo), against: str(tree)}
            p50: dict[str, dict[str, list[float]]] = {c: {m: [] for m in MODES} for c in checkouts}
            loads = []
            for r in range(rounds):
                loads.append(os.getloadavg()[0])
                for name in list(checkouts) if r % 2 == 0 else list(checkouts)[::-1]:
                    cmd = [sys.executable, "-m", "benchmarks.rule_latency", "--worker-checkout",
                           checkouts[name], "--db", db, "--queries", str(n)]  # fmt: skip
                    run = subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True)
                    for mode, value in json.loads(run.stdout.splitlines()[-1]).items():
                        p50[name][mode].append(value)
                print(f"versions round {r + 1}: {p50}", file=sys.stderr, flush=True)
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], capture_output=True)
    return {"against": against, "loads": loads, "round_p50_ms": p50}


def versions_lines(versions: dict[str, Any]) -> list[str]:
    against, p50 = versions["against"], versions["round_p50_ms"]
    loads = ", ".join(f"{x:.2f}" for x in versions["loads"])
    lines = [
        "",
        f"## speed.py's modes, this checkout against {against}, on this host",
        "",
        f"3-word queries, each checkout in a fresh process, {len(versions['loads'])} rounds, the "
        f"order flipped each round; 1-minute load average at each round's start: {loads}.",
        "",
        f"| mode | this checkout p50 ms | {against} p50 ms | ratio | rounds, this checkout "
        f"| rounds, {against} |",
        "|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        mine, theirs = p50["this checkout"][mode], p50[against][mode]
        a, b = statistics.median(mine), statistics.median(theirs)
        lines.append(
            f"| {mode} | {a:.1f} | {b:.1f} | {a / b:.2f} | {' '.join(f'{x:.1f}' for x in mine)} "
            f"| {' '.join(f'{x:.1f}' for x in theirs)} |"
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    recorded = result["speed_md"]
    here = result["speed"][str(SIZE)]
    lines = [
        "# Short-query hybrid latency with issue 37's rules (acceptance 5)",
        "",
        f"- date: {result['date']} (commit {result['commit']})",
        f"- machine: {result['machine']}",
        f"- command: `{result['command']}`",
        f"- collection: speed.py's synthetic {SIZE:,} chunks ({here['documents']:,} documents), "
        "query encoding excluded (a precomputed vector), k=10",
        "",
        "## speed.py's latency part on this branch",
        "",
        f"Load average before it: {result['speed_load']}.",
        "",
        "| mode | p50 ms | p95 ms | speed.md p50 ms | p50 vs speed.md |",
        "|---|---|---|---|---|",
    ]
    for mode in ("lexical", "vector", "hybrid"):
        p50, old = here[mode]["p50_ms"], recorded[mode]["p50_ms"]
        lines.append(
            f"| {mode} | {p50:.1f} | {here[mode]['p95_ms']:.1f} | {old:.1f} | {p50 / old - 1:+.0%} |"
        )
    ab = result["a_b"]
    loads = ", ".join(f"{x:.2f}" for x in ab["loads"])
    lines += [
        "",
        "## The rules against the rule-free hybrid, interleaved",
        "",
        f"{len(ab['loads'])} rounds, the order flipped each round; 1-minute load average at each "
        f"round's start: {loads}. Median of the rounds' p50s; p95 over every round's queries.",
        "",
        "| query | shipped p50 ms | rule-free p50 ms | shipped / rule-free | shipped p95 ms "
        "| rule-free p95 ms | rounds' p50s, shipped | rounds' p50s, rule-free |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, v in ab["kinds"].items():
        s, f = v["shipped"], v["rule-free"]
        ratio = s["median_round_p50_ms"] / f["median_round_p50_ms"]
        rounds_s = " ".join(f"{x:.1f}" for x in s["round_p50_ms"])
        rounds_f = " ".join(f"{x:.1f}" for x in f["round_p50_ms"])
        lines.append(
            f"| {kind} | {s['median_round_p50_ms']:.1f} | {f['median_round_p50_ms']:.1f} | "
            f"{ratio:.2f} | {s['p95_ms']:.1f} | {f['p95_ms']:.1f} | {rounds_s} | {rounds_f} |"
        )
    spread = result.get("spread")
    if spread:
        p50 = spread["round_p50_ms"]
        medians = {v: statistics.median(x) for v, x in p50.items()}
        lines += [
            "",
            "## 3 words with and without the spread-words switch, interleaved",
            "",
            f"Rules the shipped retriever reported: {spread['rules']}. Rounds' p50s, ms: shipped "
            f"{' '.join(f'{x:.1f}' for x in p50['shipped'])} (median {medians['shipped']:.1f}); "
            f"without the switch {' '.join(f'{x:.1f}' for x in p50['without spread'])} "
            f"(median {medians['without spread']:.1f}); ratio "
            f"{medians['shipped'] / medians['without spread']:.2f}.",
        ]
    if result.get("versions"):
        lines += versions_lines(result["versions"])
    return "\n".join(lines) + "\n"


def commit() -> str:
    import subprocess

    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return run.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", help="folder for the synthetic collection (kept; reused)")
    parser.add_argument("--queries", type=int, default=100, help="per kind, variant and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--against", help="a commit whose docsearch runs speed.py's modes beside this checkout's"
    )
    parser.add_argument("--worker-checkout", help=argparse.SUPPRESS)  # versions' worker process
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_checkout:
        print(json.dumps(mode_latency(args.worker_checkout, args.db, args.queries)))
        return
    db = f"{args.work or tempfile.mkdtemp(prefix='docsearch-rules-')}/latency"
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": "python -m benchmarks.rule_latency " + " ".join(sys.argv[1:]),
        "machine": f"{speed.platform.machine()}, {os.cpu_count()} CPUs",
        "speed_md": json.loads((speed.RESULTS / "speed.json").read_text())["latency"][str(SIZE)],
    }
    speed.synthetic_collection(db, f"synthetic{SIZE}", SIZE, np.random.default_rng(0), VOCAB)
    result["speed_load"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    result["speed"] = speed.latency([SIZE], args.queries, db)
    result["a_b"] = a_b(db, args.queries, args.rounds)
    result["spread"] = spread_a_b(db, args.queries, args.rounds)
    if args.against:
        result["versions"] = versions_a_b(db, args.queries, args.rounds, args.against)
    out = speed.RESULTS
    (out / "rule_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    page = out / "rule_latency.md"
    old = page.read_text() if page.is_file() else ""
    kept = old.split(NOTES, 1)[1] if NOTES in old else "\n"  # notes written by hand survive
    page.write_text(markdown(result) + "\n" + NOTES + kept)
    print(markdown(result))


if __name__ == "__main__":
    main()
