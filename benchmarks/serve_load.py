"""Search latency of `docsearch serve` under load while an index run writes the same collection.

Makes a synthetic corpus (seeded), indexes it, starts `docsearch serve` on a free localhost port
with a key, then runs `--clients` threads (each one keep-alive connection, POST search with 1-3
random words) for `--seconds`, while index jobs started through the API keep adding batches of
new files to the searched collection. Bounded: at most `--max-requests` per client and the time
limit; the server is stopped at the end. Reports errors (any status but 200 and a shed 503,
any exception), searches shed (503 with Retry-After: the client waits that long, as a client
should), p50/p95/p99 client-side latency of the searches answered, throughput, the load average
and what the index jobs wrote, to benchmarks/results/serve.{json,md}.

    flock /tmp/docsearch-heavy.lock python benchmarks/serve_load.py [--clients 16 --seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.app.server import Client, served  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
WORDS = [f"{a}{b}" for a in ("lex", "med", "tek", "jur", "fin") for b in range(400)]


def write_docs(folder: Path, count: int, seed: int, words_per_doc: int = 400) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for i in range(count):
        body = " ".join(rng.choices(WORDS, k=words_per_doc))
        (folder / f"doc{seed}-{i:04}.md").write_text(f"# Document {seed}-{i}\n\n{body}\n")


def client_loop(
    client: Client, stop: threading.Event, limit: int, seed: int, out: list[Any]
) -> None:
    rng, latencies, errors, shed = random.Random(seed), [], [], []
    url = "/api/v1/collections/load/search"
    for _ in range(limit):
        if stop.is_set():
            break
        body = {"query": " ".join(rng.choices(WORDS, k=rng.randint(1, 3))), "k": 10}
        started = time.perf_counter()
        try:
            reply = client.post(url, body)
        except OSError as exc:
            errors.append(repr(exc))
            continue
        took = time.perf_counter() - started
        if reply.status == 503 and reply.headers.get("retry-after", "").isdigit():
            shed.append(took)
            stop.wait(int(reply.headers["retry-after"]))
        elif reply.status != 200:
            errors.append(f"{reply.status}: {reply.body[:200]!r}")
        else:
            latencies.append(took)
    out.append((latencies, errors, shed))


def writer_loop(client: Client, folder: Path, stop: threading.Event, out: dict[str, Any]) -> None:
    """Index jobs back to back, each adding a batch of new files, until `stop`."""
    batch = 0
    while not stop.is_set():
        batch += 1
        write_docs(folder / f"batch{batch}", 40, seed=1000 + batch)
        reply = client.post("/api/v1/collections/load/index-jobs")
        if reply.status != 202:
            out["jobs"].append({"state": f"refused {reply.status}", "error": reply.json()})
            time.sleep(1)
            continue
        job = reply.json()
        while (state := client.get(job["url"]).json())["state"] == "running":
            time.sleep(0.2)
        out["jobs"].append({k: state[k] for k in ("state", "error", "files_done")})
        out["chunks_written"] += (state["result"] or {}).get("chunks_written", 0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from docsearch.app.keys import KeyStore
    from tests.helpers import index_into

    folder, db = base / "load", str(base / "db")
    write_docs(folder, args.docs, seed=1)
    index_into(db, folder, "load", encoder=args.encoder)
    key, _ = KeyStore(base / "keys.json").create(("load",), index=True)
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(base / "keys.json")}
    load_before = os.getloadavg()
    with served(env, log=base / "serve.log") as server:
        stop, results, wrote = threading.Event(), [], {"jobs": [], "chunks_written": 0}
        make = lambda: Client(server.host, server.port, key)  # noqa: E731
        threads = [
            threading.Thread(target=client_loop, args=(make(), stop, args.max_requests, i, results))
            for i in range(args.clients)
        ]
        writer = threading.Thread(target=writer_loop, args=(make(), folder, stop, wrote))
        started = time.perf_counter()
        for thread in [writer, *threads]:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(0.0, args.seconds - (time.perf_counter() - started)))
        stop.set()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started  # the clients' time; the writer's job ends after
        writer.join()
    load_after = os.getloadavg()
    latencies = [x for lat, _, _ in results for x in lat]
    errors = [e for _, errs, _ in results for e in errs]
    shed = [x for _, _, sheds in results for x in sheds]
    if errors:  # the server's side of them
        print((base / "serve.log").read_text()[-20_000:], file=sys.stderr)
    return {
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "encoder": args.encoder,
        "docs_at_start": args.docs,
        "requests": len(latencies) + len(shed) + len(errors),
        "answered": len(latencies),
        "shed_503": len(shed),
        "shed_max_ms": round(1000 * max(shed, default=0.0), 1),
        "errors": len(errors),
        "first_errors": errors[:5],
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "answered_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "index_jobs": len(wrote["jobs"]),
        "index_jobs_failed": sum(j["state"] != "done" for j in wrote["jobs"]),
        "chunks_written_meanwhile": wrote["chunks_written"],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """One row per encoder measured (the last run of each)."""
    first = next(iter(results.values()))
    lines = [
        "# `docsearch serve` under load while an index run writes",
        "",
        "`flock /tmp/docsearch-heavy.lock python benchmarks/serve_load.py [--encoder NAME]` "
        f"({first['machine']}, shared with other work). {first['clients']} clients, one "
        f"keep-alive connection each, POST search (k=10) for {first['seconds']:.0f} s while index "
        "jobs started through the API kept adding 40 new files at a time to the searched "
        "collection. Latency is measured by the clients (HTTP round trip included); a hybrid "
        "run's p99 holds the first search of each client, which waits for the query encoder "
        "to load.",
        "",
        "Searches that cannot be served in time are shed: 503 with Retry-After (the client "
        "waits that long), not counted as errors; p50/p95/p99 are of the searches answered.",
        "",
        "| encoder | requests | answered | shed (503) | errors | answered/s | p50 ms | p95 ms | "
        "p99 ms | index jobs | chunks written | load avg before, after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['requests']} | {r['answered']} | {r['shed_503']} | {r['errors']} "
            f"| {r['answered_per_s']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} "
            f"| {r['index_jobs']} ({r['index_jobs_failed']} failed) "
            f"| {r['chunks_written_meanwhile']} | {r['load_average_before_after']} |"
        )
    return "\n".join([*lines, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=100_000, help="per client")
    parser.add_argument("--docs", type=int, default=300, help="documents indexed before the load")
    parser.add_argument("--encoder", default="none", help="'none' (BM25 only) or an encoder name")
    parser.add_argument("--out", type=Path, default=RESULTS / "serve")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docsearch-serve-load-") as tmp:
        result = run(args, Path(tmp))
    print(json.dumps(result, indent=2))
    saved = args.out.with_suffix(".json")
    results = json.loads(saved.read_text()) if saved.exists() else {}
    results = {name: r for name, r in results.items() if "answered" in r}  # this format's only
    results[args.encoder] = result
    saved.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))


if __name__ == "__main__":
    main()
