"""Latency of `GET /documents/{id}/pages/{n}` on a long PDF, through a real `docsearch serve`.

Makes a PDF of `--pages` text pages (reportlab, seeded words), indexes it (BM25 only), serves
the database on a free localhost port and asks for `--requests` random pages one after another,
each on a new connection, as a reader paging through would. The page's text comes from the
stored chunks; for scale, the script also times one extraction of the whole PDF, which is what
the route did per request before. Writes benchmarks/results/serve_pages.{json,md}.

    python benchmarks/serve_pages.py [--pages 2000 --requests 300]
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
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.app.server import Client, served  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
WORDS = [f"{a}{b}" for a in ("lex", "med", "tek", "jur", "fin") for b in range(400)]


def make_long_pdf(path: Path, pages: int, seed: int = 1) -> Path:
    from tests.ui.corpus import make_pdf

    rng = random.Random(seed)
    texts = []
    for n in range(1, pages + 1):
        lines = [" ".join(rng.choices(WORDS, k=10)) for _ in range(30)]
        texts.append(f"Page {n} of the long contract\n" + "\n".join(lines))
    return make_pdf(path, texts)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from docsearch.indexer.extract import Limits, extract
    from docsearch.store.reads import Store
    from tests.helpers import index_into

    folder, db = base / "docs", str(base / "db")
    folder.mkdir()
    pdf = make_long_pdf(folder / "long.pdf", args.pages)
    started = time.perf_counter()
    extract(pdf, pdf.read_bytes(), limits=Limits())
    extract_s = time.perf_counter() - started
    index_into(db, folder, "long", encoder="none")
    doc_id = Store.open(db, "long").rows("ordinal = 0", ["doc_id"])[0]["doc_id"]
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(base / "keys.json")}
    rng, latencies = random.Random(2), []
    with served(env, "--no-ui", log=base / "serve.log") as server:
        client = Client(server.host, server.port)
        url = f"/api/v1/collections/long/documents/{doc_id}/pages"
        first = client.get(f"{url}/1")  # the collection opened once, as a running server has it
        assert first.status == 200, first.body[:300]
        for _ in range(args.requests):
            number = rng.randint(1, args.pages)
            started = time.perf_counter()
            reply = client.get(f"{url}/{number}")
            latencies.append(time.perf_counter() - started)
            assert reply.status == 200 and f"Page {number} of" in reply.json()["text"], number
    return {
        "pages": args.pages,
        "pdf_bytes": pdf.stat().st_size,
        "requests": args.requests,
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "max_ms": round(1000 * max(latencies), 1),
        "one_whole_extraction_s": round(extract_s, 2),
        "load_average": round(os.getloadavg()[0], 2),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def markdown(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# `/pages/N` on a long PDF",
            "",
            f"`python benchmarks/serve_pages.py --pages {r['pages']} --requests {r['requests']}` "
            f"({r['machine']}, shared with other work; load average {r['load_average']} at the "
            "end). A real `docsearch serve` on localhost; random pages, one request at a time, "
            "each on a new connection; latency measured by the client (HTTP included).",
            "",
            "| pages | PDF bytes | requests | p50 ms | p95 ms | p99 ms | max ms | "
            "one extraction of the PDF, s |",
            "|---|---|---|---|---|---|---|---|",
            f"| {r['pages']} | {r['pdf_bytes']} | {r['requests']} | {r['p50_ms']} | {r['p95_ms']} "
            f"| {r['p99_ms']} | {r['max_ms']} | {r['one_whole_extraction_s']} |",
            "",
            "The page's text is rebuilt from the chunks that cover it (their offsets in the "
            "document's text, and where each page starts, kept in the file record at index time). "
            "Before, each request extracted the whole PDF in the server's process: the last "
            "column is what one such extraction takes.",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS / "serve_pages")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docsearch-serve-pages-") as tmp:
        result = run(args, Path(tmp))
    print(json.dumps(result, indent=2))
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))


if __name__ == "__main__":
    main()
