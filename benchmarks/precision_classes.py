"""Each inference precision against torch fp32 per CPU class: speed as indexing runs it, and
the mean cosine of its vectors to fp32's (issue 39, acceptance 4).

    python benchmarks/precision_classes.py [--classes amx,avx512-bf16,avx512-vnni,avx2]
        [--windows 64] [--rounds 3] [--lock FILE] [--out benchmarks/results]

Per class (the ISA caps of `cpu_classes.CLASSES` in a fresh process's environment): the MiniLM
encoder is built in each precision (fp32, bf16, int8, onnx-fp32, onnx-int8, asked for
explicitly, so a precision auto would not consider under the class is measured too) and
`encode_documents` runs `--windows` scifact windows (onnx_gate.texts: one encode call, as
indexing makes one per group of windows: its batch sizes, workers and threads) in `--rounds`
interleaved rounds after a first call that pays for set-up; the speed is fp32's median over the
precision's. The cosines are of the first call's vectors. Writes precision_classes.{json,md}
and the same table into precision.md (between CLASS_MARKERS, kept when precision.py rewrites
it). What the caps cannot emulate (ONNX Runtime's kernels, fbgemm): see cpu_classes.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import cpu_classes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PRECISIONS = ("fp32", "bf16", "int8", "onnx-fp32", "onnx-int8")
CLASS_MARKERS = ("<!-- CLASSES: precision_classes.py writes this part -->", "<!-- /CLASSES -->")


def measure_here(windows: int, rounds: int) -> dict[str, Any]:
    """Every precision's median seconds per encode call and cosines, in this process's caps."""
    import numpy as np
    import torch

    from benchmarks.onnx_gate import texts
    from docsearch.encoders import get_encoder
    from docsearch.encoders.timing import rotated

    torch.set_num_threads(int(os.environ.get("PEERS_THREADS", "2")))
    sample = texts(windows)
    encoders: dict[str, Any] = {}
    vectors: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in PRECISIONS:
        try:
            encoders[name] = get_encoder("sentence-transformers", precision=name)
            vectors[name] = encoders[name].encode_documents(sample)
        except Exception as exc:  # a precision this class cannot run is reported, not fatal
            errors[name] = f"{type(exc).__name__}: {exc}"[:200]
    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    loads = [os.getloadavg()[0]]
    for round_no in range(rounds):
        for name in rotated(list(encoders), round_no):
            started = time.perf_counter()
            encoders[name].encode_documents(sample)
            seconds[name].append(time.perf_counter() - started)
        loads.append(os.getloadavg()[0])
    fp32 = statistics.median(seconds["fp32"])
    rows = {}
    for name, found in vectors.items():
        cosine = np.sum(found * vectors["fp32"], axis=1)
        median = statistics.median(seconds[name])
        rows[name] = {
            "seconds": round(median, 3),
            "speed_vs_fp32": round(fp32 / median, 2),
            "cosine_mean": float(cosine.mean()),
            "cosine_min": float(cosine.min()),
            "engine": encoders[name].engine,
        }
    return {"rows": rows, "errors": errors, "loads": loads, "windows": len(sample)}


def one_class(label: str, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    env = cpu_classes.class_env(cpu_classes.CLASSES[label], cache)
    env["PEERS_THREADS"] = str(args.threads)
    cmd = [sys.executable, str(Path(__file__).resolve()), "_class"]
    cmd += ["--windows", str(args.windows), "--rounds", str(args.rounds)]
    with cpu_classes.held(args.lock):
        out = subprocess.run(
            cmd, env=env, capture_output=True, text=True, cwd=cpu_classes.peers.REPO
        )
    if out.returncode != 0:
        raise SystemExit(f"{label} failed:\n{out.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return {"class": label, "caps": cpu_classes.CLASSES[label], **found}


def table(report: dict[str, Any]) -> list[str]:
    lines = [
        "## Per CPU class: speed (as indexing runs it) and cosine to torch fp32",
        "",
        f"`{report['command']}` on {report['date']} ({report['cpu']}); {report['windows']} "
        f"scifact windows per encode call, {report['rounds']} interleaved rounds after a set-up "
        "call; classes emulated with ISA caps (cpu_classes.py; ONNX Runtime ignores them).",
        "",
        "| class | precision | engine | s per call (median) | x torch fp32 | mean cosine | "
        "min cosine | gate (mean >= 0.999) | 1-min load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["classes"]:
        loads = f"{min(row['loads']):.1f}-{max(row['loads']):.1f}"
        for name, cell in row["rows"].items():
            gate = "pass" if cell["cosine_mean"] >= 0.999 else "**fail**"
            lines.append(
                f"| {row['class']} | {name} | {cell['engine']} | {cell['seconds']:.2f} | "
                f"{cell['speed_vs_fp32']:.2f} | {cell['cosine_mean']:.5f} | "
                f"{cell['cosine_min']:.4f} | {gate} | {loads} |"
            )
        for name, error in row["errors"].items():
            lines.append(f"| {row['class']} | {name} | could not run: {error} | | | | | | |")
    return lines


def section(out: Path) -> str:
    """The per-class table for precision.md, from precision_classes.json ('' without it)."""
    path = out / "precision_classes.json"
    if not path.exists():
        return ""
    body = "\n".join(table(json.loads(path.read_text())))
    return f"{CLASS_MARKERS[0]}\n{body}\n{CLASS_MARKERS[1]}\n"


def into_precision_md(out: Path) -> None:
    """precision.md with the per-class section replaced, or put before its notes."""
    from benchmarks.peers import NOTES

    md = out / "precision.md"
    text = md.read_text() if md.exists() else ""
    start, end = CLASS_MARKERS
    if start in text and end in text:
        text = text.split(start)[0] + text.split(end, 1)[1].lstrip("\n")
    head, notes = text.split(NOTES, 1) if NOTES in text else (text, "")
    md.write_text(head.rstrip("\n") + "\n\n" + section(out) + "\n" + NOTES + notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", nargs="?", default="run", choices=("run", "_class"))
    parser.add_argument("--classes", default=",".join(cpu_classes.CLASSES))
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--lock",
        default=os.environ.get("DOCSEARCH_BENCH_LOCK", ""),
        help="a file to flock while each class runs (default: $DOCSEARCH_BENCH_LOCK, else none)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.job == "_class":
        print(json.dumps(measure_here(args.windows, args.rounds)))
        return
    from datetime import UTC, datetime

    from benchmarks.peers import machine

    cache = Path(tempfile.mkdtemp(prefix="precision-classes-"))
    path = args.out / "precision_classes.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    rows = {row["class"]: row for row in previous.get("classes", [])}
    for label in args.classes.split(","):
        rows[label] = one_class(label, args, cache)
        report = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python", "benchmarks/precision_classes.py", *sys.argv[1:]]),
            "cpu": machine()["cpu"],
            "windows": args.windows,
            "rounds": args.rounds,
            "classes": [rows[c] for c in cpu_classes.CLASSES if c in rows],
        }
        path.write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "precision_classes.md").write_text("\n".join(table(report)) + "\n")
        into_precision_md(args.out)
        print("\n".join(table(report)), flush=True)


if __name__ == "__main__":
    main()
