"""Short hybrid queries on one thread: docsearch next to the peers, at ~2k real chunks and 100k.

    python -m benchmarks.short_queries [--contracts 40] [--rounds 3] [--sizes 2k,100000]
        [--tools docsearch,txtai,hand,fastembed] [--baseline DIR] [--work DIR] [--venv DIR]
        [--out benchmarks/results] [--name short_queries]

Writes benchmarks/results/NAME.{json,md}. Issue 39, item 5 / acceptance 3: short hybrid p50 <=
the best peer's at 2k and 100k chunks, 200-word queries keeping their targets.
- 2k: the peers.py folder (the first `--contracts` CUAD contracts and docsearch's samples),
  indexed once by each tool as peers.py indexes it (`peers.Bench.index`, fastembed's MiniLM
  exported by `peers.export_onnx`), in the peers' own virtual environment (`--venv`).
- 100k: a docsearch collection of `speed.real_chunks` (the shared corpora's text, 120 words a
  chunk, ten to a document) with synthetic vectors (`speed.synthetic_collection`: it has the
  ANN index docsearch builds from 50k rows), and the same rows as the hand pipeline's LanceDB
  table with its full-text index (what `peers.lance_table` makes: no vector index, as the
  25-line pipeline has none); fastembed searches that table too. txtai is left out at 100k:
  it would embed 100k chunks itself (hours on this CPU). Vectors are synthetic there, so the
  100k rankings say nothing of quality; the query is still encoded by each tool's own encoder.
- Queries: peers.SHORT_QUERIES (30 contract phrases) and 30 passages of 200 words
  (`peers.long_queries`). Each tool answers them in a fresh process per round (model load
  excluded, two warm-up queries), rounds interleaved with the order rotated; p50 / p95 over
  every round's queries, the 1-minute load average before and after each process.
- One thread: OMP/MKL threads 1 and torch.set_num_threads(1) for every tool ("docsearch");
  "docsearch, as served" is the same search with the process's default threads (what
  `docsearch serve` runs on this machine). The search timed is `Retriever.search(q, k=10)`:
  encoding, the legs, fusion, the document rule and the passages' snippets.
- `--baseline DIR`: a docsearch checkout (main before a change) timed beside this one, and the
  top-10 documents, their passages and snippets of every query compared between the two
  (a change that must keep rankings says so here).
Not here: indexing speed (peers.py), docsearch's own targets over many sizes (speed.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    if os.environ.get("SHORT_QUERIES_DOCSEARCH"):  # a worker timing another checkout's code
        sys.path.insert(0, os.environ["SHORT_QUERIES_DOCSEARCH"])

from benchmarks import peers  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
SMALL = "2k"  # the peers' folder, indexed by each tool
COLLECTION_100K = "realtext{size}"
NOTES = peers.NOTES
DOCSEARCH_VARIANTS = ("docsearch", "docsearch, as served", "baseline")
# The lock every timed benchmark on this (shared) machine holds while it times.
LOCK = os.environ.get(
    "DOCSEARCH_HEAVY_LOCK", str(Path(tempfile.gettempdir(), "docsearch-heavy.lock"))
)


# ---------------------------------------------------------------- the worker side


def docsearch_searcher(db: Path, collection: str, synthetic: bool) -> Any:
    """Retriever.search over `collection`; a synthetic one (vectors made up, its spec names no
    encoder) is queried through the MiniLM encoder the real collections use."""
    from docsearch.encoders import get_encoder
    from docsearch.retriever import Retriever

    encoder = get_encoder("sentence-transformers") if synthetic else None
    retriever = Retriever(collection, db=str(db), encoder=encoder)
    retriever.encoder()  # loaded before the first query, as the peers load theirs
    return retriever


def hits_record(hits: list[Any]) -> list[dict[str, Any]]:
    """What a ranking check compares: the documents, their passages and their snippets."""
    return [
        {
            "doc": hit.doc_id,
            "score": hit.score,
            "passages": [p.chunk_id for p in hit.passages],
            "snippets": [[p.snippet.text, p.snippet.anchor] for p in hit.passages],
        }
        for hit in hits
    ]


def time_queries(search: Any, queries: dict[str, list[str]]) -> dict[str, Any]:
    """Wall ms of each query, by kind, and the process's CPU ms per query of each kind (all
    its threads: on a shared machine the wall time waits for cores, the CPU time does not)."""
    for warm in queries["short"][:2]:
        search(warm)
    out: dict[str, Any] = {"cpu_ms": {}}
    for kind, batch in queries.items():
        times = out.setdefault(kind, [])
        cpu = time.process_time()
        for query in batch:
            start = time.perf_counter()
            search(query)
            times.append((time.perf_counter() - start) * 1000)
        out["cpu_ms"][kind] = (time.process_time() - cpu) * 1000 / len(batch)
    return out


def worker(args: argparse.Namespace) -> None:
    """One tool's timing in this fresh process; its JSON goes to --result."""
    threads = os.environ.get("PEERS_THREADS")
    if threads and args.tool != "docsearch":
        peers.set_threads()
    queries = json.loads(Path(args.queries_file).read_text())
    result: dict[str, Any] = {"load": [os.getloadavg()[0]]}
    if args.tool == "docsearch":
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        retriever = docsearch_searcher(Path(args.db), args.collection, args.synthetic)
        result["times"] = time_queries(lambda q: retriever.search(q, k=10), queries)
        result["cpu_ms"] = result["times"].pop("cpu_ms")
        if args.ids:
            result["ids"] = {
                q: hits_record(retriever.search(q, k=10)) for kind in queries.values() for q in kind
            }
        result["torch_threads"] = torch.get_num_threads()
    else:
        search = peers.searcher(args.tool, Path(args.db), Path(args.model), Path(args.onnx_dir))
        result["times"] = time_queries(search, queries)
        result["cpu_ms"] = result["times"].pop("cpu_ms")
    result["load"].append(os.getloadavg()[0])
    Path(args.result).write_text(json.dumps(result))


def build_100k(args: argparse.Namespace) -> None:
    """The 100k collection (docsearch side) and its rows as an Arrow file for the peers."""
    import numpy as np
    import pyarrow as pa

    from benchmarks import speed
    from docsearch.store.reads import Store

    size, name = args.size, COLLECTION_100K.format(size=args.size)
    texts = speed.real_chunks(size)
    vocab = [f"w{i}" for i in range(20000)]
    built = speed.synthetic_collection(args.db, name, size, np.random.default_rng(0), vocab, texts)
    store = Store.open(args.db, name)
    table = store.dataset("chunks").to_table(columns=["text", "path", "vector"])
    with pa.ipc.new_file(args.rows, table.schema) as sink:
        sink.write_table(table)
    Path(args.result).write_text(json.dumps({"build_s": built, "rows": table.num_rows}))


def peer_table(args: argparse.Namespace) -> None:
    """The hand pipeline's LanceDB table (and FTS index) of the rows `build_100k` wrote."""
    import pyarrow as pa

    table = pa.ipc.open_file(args.rows).read_all()
    vectors = table.column("vector").combine_chunks().flatten().to_numpy()
    made = peers.lance_table(
        Path(args.db),
        table.column("text").to_pylist(),
        table.column("path").to_pylist(),
        vectors.reshape(table.num_rows, -1),
    )
    Path(args.result).write_text(json.dumps(made))


# ---------------------------------------------------------------- the orchestration


class Run:
    """The indexes, the interpreters and the timings of one benchmark run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.work = args, Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
        self.peer_python = str(peers.ensure_venv(Path(args.venv)))
        env = peers.common_env(1)
        self.model = Path(args.model) if args.model else peers.locate_model(sys.executable, env)
        self.onnx_dir = self.work / "minilm-onnx"
        self.queries = self.work / "queries.json"
        long = peers.long_queries(args.queries, args.contracts)
        short = list(peers.SHORT_QUERIES[: args.queries])
        self.queries.write_text(json.dumps({"short": short, "200 words": long}))

    def script(self, variant: str) -> list[str]:
        return [sys.executable if variant in DOCSEARCH_VARIANTS else self.peer_python, __file__]

    def env(self, variant: str) -> dict[str, str]:
        env = peers.common_env(1)
        if variant == "docsearch, as served":  # the process's own thread defaults
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PEERS_THREADS"):
                env.pop(name)
        if variant == "baseline":
            env["SHORT_QUERIES_DOCSEARCH"] = str(Path(self.args.baseline).resolve())
        return env

    def job(self, name: str, variant: str, *extra: str) -> dict[str, Any]:
        result, log = self.work / f"{name}.json", self.work / f"{name}.log"
        cmd = [*self.script(variant), *extra, "--result", str(result)]
        with log.open("w") as out:
            done = subprocess.run(cmd, env=self.env(variant), stdout=out, stderr=out)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed (rc {done.returncode}):\n{log.read_text()[-3000:]}")
        return dict(json.loads(result.read_text()))

    def index_small(self) -> dict[str, Path]:
        """The 2k folder indexed once by each tool (kept in --work and reused)."""
        ns = argparse.Namespace(
            tools=",".join(t for t in self.tools if t != "docsearch") or "hand",
            docsearch_path=str(REPO), threads=2, model=str(self.model),
            docsearch_python=sys.executable, venv=self.args.venv,
            contracts=self.args.contracts, docsearch_option=[],
        )  # fmt: skip
        shutil.rmtree(self.work / "folder", ignore_errors=True)
        bench = peers.Bench(ns, self.work)
        bench.tools = self.tools
        if "fastembed" in self.tools and not (self.onnx_dir / "model.onnx").exists():
            bench.export_onnx()
        dbs = {}
        for tool in self.tools:
            db = self.work / f"db-{tool}-0"
            if not db.exists():
                print(f"indexing the 2k folder: {tool}", flush=True)
                bench.index(tool, 0)
            dbs[tool] = db
        return dbs

    def index_large(self, size: int) -> dict[str, Path]:
        db, rows = self.work / f"db-{size}", self.work / f"rows-{size}.arrow"
        peer_db = self.work / f"db-{size}-hand"
        if not rows.exists():
            print(f"building the {size:,}-chunk collection", flush=True)
            extra = ["_build", "--db", str(db), "--size", str(size), "--rows", str(rows)]
            print(json.dumps(self.job(f"build-{size}", "docsearch", *extra)), flush=True)
        if not peer_db.exists():
            extra = ["_peer_table", "--db", str(peer_db), "--rows", str(rows)]
            print(json.dumps(self.job(f"peer-table-{size}", "hand", *extra)), flush=True)
        return {"docsearch": db, "hand": peer_db, "fastembed": peer_db}

    def variants(self, size: str) -> list[str]:
        tools = [t for t in self.tools if t != "docsearch" and (size == SMALL or t != "txtai")]
        ours = ["docsearch", "docsearch, as served"]
        return ours + (["baseline"] if self.args.baseline else []) + tools

    def time(self, size: str, dbs: dict[str, Path], rounds: int) -> dict[str, Any]:
        runs: dict[str, list[dict[str, Any]]] = {}
        variants = self.variants(size)
        for round_no in range(rounds):
            for variant in peers.rotated(variants, round_no):
                tool = "docsearch" if variant in DOCSEARCH_VARIANTS else variant
                collection = (
                    peers.COLLECTION if size == SMALL else COLLECTION_100K.format(size=size)
                )
                extra = ["_time", "--tool", tool, "--db", str(dbs[tool])]
                extra += ["--collection", collection, "--queries-file", str(self.queries)]
                extra += ["--model", str(self.model), "--onnx-dir", str(self.onnx_dir)]
                extra += ["--synthetic"] if size != SMALL and tool == "docsearch" else []
                extra += ["--ids"] if round_no == 0 and variant in ("docsearch", "baseline") else []
                name = f"time-{size}-{variant.replace(', ', '-').replace(' ', '-')}-{round_no}"
                run = flocked(lambda: self.job(name, variant, *extra))  # noqa: B023
                runs.setdefault(variant, []).append(run)
                print(f"{size} round {round_no + 1} {variant}: {summary_line(run)}", flush=True)
        return {"variants": variants, "runs": runs, "summary": summarise(runs)}


def flocked(run: Any) -> Any:
    """`run()` holding the lock the machine's timed runs share, so no two overlap."""
    import fcntl

    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return run()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def percentiles(ms: list[float]) -> dict[str, float]:
    return peers.percentiles(ms)


def summary_line(run: dict[str, Any]) -> str:
    cells = {kind: percentiles(t)["p50_ms"] for kind, t in run["times"].items()}
    return f"p50 {cells}, load {run['load']}"


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for variant, done in runs.items():
        kinds = done[0]["times"].keys()
        out[variant] = {
            kind: percentiles([t for run in done for t in run["times"][kind]]) for kind in kinds
        }
        out[variant]["load"] = [run["load"] for run in done]
        out[variant]["cpu_ms"] = {
            kind: round(statistics.median(run["cpu_ms"][kind] for run in done), 1) for kind in kinds
        }
    return out


def compare_ids(size: dict[str, Any]) -> dict[str, Any] | None:
    """Top-10 documents, passages and snippets of docsearch against the baseline, per query."""
    runs = size["runs"]
    if "baseline" not in runs:
        return None
    ours, theirs = runs["docsearch"][0]["ids"], runs["baseline"][0]["ids"]
    same_docs = [q for q in ours if [h["doc"] for h in ours[q]] == [h["doc"] for h in theirs[q]]]
    same_all = [q for q in ours if strip_scores(ours[q]) == strip_scores(theirs[q])]
    score_diff = max(
        (
            abs(a["score"] - b["score"])
            for q in ours
            for a, b in zip(ours[q], theirs[q], strict=False)
        ),
        default=0.0,
    )
    return {
        "queries": len(ours),
        "same_top10_documents": len(same_docs),
        "same_documents_passages_snippets": len(same_all),
        "max_fused_score_difference": score_diff,
        "differing": sorted(set(ours) - set(same_all)),
    }


def strip_scores(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in hit.items() if k != "score"} for hit in hits]


def orchestrate(args: argparse.Namespace) -> None:
    run = Run(args)
    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", "-m", "benchmarks.short_queries", *sys.argv[1:]]),
        "machine": peers.machine(),
        "baseline": args.baseline or None,
        "tools": run.tools,
        "queries": args.queries,
        "rounds": args.rounds,
        "sizes": {},
    }
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        dbs = run.index_small() if size == SMALL else run.index_large(int(size))
        timed = run.time(size, dbs, args.rounds)
        timed["ids_check"] = compare_ids(timed)
        for variant_runs in timed["runs"].values():  # the top 10 kept, as documents only
            for one in variant_runs:
                ids = one.pop("ids", None)
                if ids:
                    one["top10"] = {q: [hit["doc"] for hit in hits] for q, hits in ids.items()}
        report["sizes"][size] = timed
    write_report(report, Path(args.out), args.name)


# ---------------------------------------------------------------- the report


def markdown(report: dict[str, Any], notes: str) -> str:
    lines = [
        "# Short hybrid queries next to the peers (one thread)",
        "",
        f"Generated by `benchmarks/short_queries.py` on {report['date']}. Command:",
        "",
        f"    {report['command']}",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, flags "
        f"{', '.join(report['machine']['flags'])}; shared with other jobs (loads below). "
        f"{report['rounds']} interleaved rounds, a fresh process per tool and round, "
        f"{report['queries']} queries of each kind a round, k=10, model load excluded, query "
        "encoding included. CPU ms: the process's CPU time per query (all threads; median of "
        "the rounds). How each tool is set up: the module docstring.",
        "",
    ]
    for size, timed in report["sizes"].items():
        lines += size_table(size, timed)
    return "\n".join(lines) + "\n" + NOTES + "\n" + notes


def size_table(size: str, timed: dict[str, Any]) -> list[str]:
    label = "~2k real chunks (the peers' folder)" if size == SMALL else f"{int(size):,} chunks"
    lines = [
        f"## {label}",
        "",
        "| tool | short p50 / p95 ms | short CPU ms | 200 words p50 / p95 ms | 200 words CPU ms "
        "| 1-min load (per round) |",
        "|---|---|---|---|---|---|",
    ]
    summary = timed["summary"]
    for variant in timed["variants"]:
        cells = summary[variant]
        loads = ", ".join(f"{a:.1f}-{b:.1f}" for a, b in cells["load"])
        short, long = cells["short"], cells["200 words"]
        cpu = cells["cpu_ms"]
        lines.append(
            f"| {variant} | {short['p50_ms']} / {short['p95_ms']} | {cpu['short']} | "
            f"{long['p50_ms']} / {long['p95_ms']} | {cpu['200 words']} | {loads} |"
        )
    peer_p50 = {v: summary[v]["short"]["p50_ms"] for v in timed["variants"]}
    peer_p50 = {v: p for v, p in peer_p50.items() if v not in DOCSEARCH_VARIANTS}
    if peer_p50:
        best = min(peer_p50, key=lambda v: peer_p50[v])
        ours = summary["docsearch"]["short"]["p50_ms"]
        verdict = "met" if ours <= peer_p50[best] else "missed"
        lines += [
            "",
            f"Short p50, one thread: docsearch {ours} ms against the best peer ({best}) "
            f"{peer_p50[best]} ms: **{verdict}** ({ours / peer_p50[best]:.2f}x).",
        ]
    check = timed.get("ids_check")
    if check:
        lines += [
            "",
            f"Rankings against the baseline: the same top-10 documents for "
            f"{check['same_top10_documents']} of {check['queries']} queries, the same "
            f"documents, passages and snippets for {check['same_documents_passages_snippets']}; "
            f"fused scores differ by at most {check['max_fused_score_difference']:.2g}.",
        ]
    return [*lines, ""]


def write_report(report: dict[str, Any], out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    md = out / f"{name}.md"
    md.write_text(markdown(report, peers.kept_notes(md)))
    print(f"wrote {md}")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    jobs = ("bench", "render", "_time", "_build", "_peer_table")
    parser.add_argument("job", nargs="?", default="bench", choices=jobs)
    parser.add_argument("--tools", default="docsearch,txtai,hand,fastembed")
    parser.add_argument("--sizes", default=f"{SMALL},100000", help=f"{SMALL} and/or chunk counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contracts", type=int, default=40)
    parser.add_argument("--queries", type=int, default=30, help="short and long queries, each")
    parser.add_argument("--baseline", default="", help="a docsearch checkout to time beside")
    parser.add_argument("--work", default=str(peers.cache_dir("short-queries")))
    parser.add_argument("--venv", default=str(peers.DEFAULT_VENV))
    parser.add_argument("--model", default="", help="model folder (default: docsearch's MiniLM)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="short_queries")
    # the worker side
    parser.add_argument("--tool", default="")
    parser.add_argument("--db", default="")
    parser.add_argument("--collection", default=peers.COLLECTION)
    parser.add_argument("--queries-file", default="")
    parser.add_argument("--onnx-dir", default="")
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--ids", action="store_true", help="record the rankings too")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--rows", default="")
    parser.add_argument("--result", default="")
    return parser.parse_args(argv)


def main() -> None:
    args = parse(sys.argv[1:])
    if args.job == "bench":
        orchestrate(args)
    elif args.job == "render":
        md = Path(args.out) / f"{args.name}.md"
        report = json.loads((Path(args.out) / f"{args.name}.json").read_text())
        md.write_text(markdown(report, peers.kept_notes(md)))
    else:
        {"_time": worker, "_build": build_100k, "_peer_table": peer_table}[args.job](args)


if __name__ == "__main__":
    main()
