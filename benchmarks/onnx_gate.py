"""ONNX Runtime against torch on MiniLM: each engine/precision's mean and minimum cosine to torch
fp32 on real text, and the export's cost.

    python benchmarks/onnx_gate.py [--texts 96] [--out benchmarks/results]

Texts: the first `--texts` 254-token windows of scifact's corpus (../shared/data/scifact), or
docsearch's built-in sample where that is missing. Runs each precision docsearch can run on
this CPU through the encoder (`-o precision=...`), exports into a fresh cache (timed once) and
writes `<out>/onnx.{json,md}`. The gate is the automatic choice's (mean cosine >= 0.999);
retrieval quality (nDCG) per precision is benchmarks/precision.py's
(`--precisions fp32,onnx-fp32,onnx-int8`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"


def texts(count: int) -> list[str]:
    corpus = DATA / "scifact" / "corpus.jsonl"
    if not corpus.is_file():
        from docsearch.encoders.sample_texts import windows

        return list(windows())[:count]
    found = []
    with corpus.open() as f:
        for line in f:
            doc = json.loads(line)
            words = f"{doc.get('title', '')} {doc['text']}".split()
            found.append(" ".join(words[:180]))  # ~250 MiniLM tokens
            if len(found) == count:
                break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=96)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    os.environ["DOCSEARCH_CACHE"] = tempfile.mkdtemp(prefix="onnx-gate-")
    from docsearch.encoders import get_encoder, precision

    sample = texts(args.texts)
    started = time.perf_counter()
    get_encoder("sentence-transformers", precision="onnx-fp32")  # exports both
    export_s = time.perf_counter() - started
    names = ["fp32", *precision.candidates("cpu", onnx=True)]
    vectors = {}
    for name in names:
        encoder = get_encoder("sentence-transformers", precision=name)
        vectors[name] = encoder.encode_documents(sample)
    rows = {}
    for name, found in vectors.items():
        cosine = np.sum(found * vectors["fp32"], axis=1)
        rows[name] = {"mean": float(cosine.mean()), "min": float(cosine.min())}
    load = os.getloadavg()
    report = {"texts": len(sample), "export_s": export_s, "cosine": rows, "load": load}
    lines = [
        "# ONNX Runtime beside torch on MiniLM: cosine to torch fp32",
        "",
        f"- command: `python {' '.join(sys.argv)}`; {len(sample)} windows of scifact",
        f"- export (fp32 + dynamic int8, once per model and exporter): {export_s:.1f} s; "
        f"load average after: {load[0]:.1f} (shared 2-core machine)",
        "",
        "| precision | mean cosine | min cosine | keeps the gate (mean >= 0.999) |",
        "|---|---|---|---|",
    ]
    for name, row in rows.items():
        ok = "yes" if row["mean"] >= precision.MIN_COSINE else "**no**"
        lines.append(f"| {name} | {row['mean']:.6f} | {row['min']:.6f} | {ok} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "onnx.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "onnx.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
