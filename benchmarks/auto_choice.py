"""How often precision=auto picks the same engine and precision in fresh processes, with and
without a CPU load beside it.

    python benchmarks/auto_choice.py [--processes 10] [--load-threads 2] [--threads 2]
        [--conditions quiet,loaded] [--out benchmarks/results] [--name auto_choice]

Each process starts with an empty calibration cache (so it measures; the ONNX export, made once
before the first, is shared: exporting is not the choice), builds the MiniLM encoder with
precision=auto and reports its choice and what it measured. Under "loaded", `--load-threads`
busy-looping processes run beside each one. The reference verdict is `precision.decide` on the
median, over all the processes of all conditions, of each candidate's median seconds (and
cosines); the acceptance (issue 39) is the reference in >= 9 of 10 processes in each condition.
Writes `<out>/<name>.{json,md}` with the load average before and after each process: on a
shared machine the numbers say little about speed, only about how steady the choice is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
# One fresh process: build the encoder, print its choice and the cached record.
CHILD = """
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[1]))
from docsearch.config import cache_home
from docsearch.encoders import get_encoder
started = time.perf_counter()
encoder = get_encoder("sentence-transformers", precision="auto")
choice = encoder.precision  # chosen (timed) here, as the first batch would
took = time.perf_counter() - started
[path] = (cache_home() / "calibration").glob("precision-*.json")
record = json.loads(path.read_text())
print(json.dumps({"choice": choice, "engine": encoder.engine, "seconds": took,
                  "measured": record["measured"], "confident": record["confident"]}))
"""


def load_average() -> float:
    return os.getloadavg()[0]


def start_load(threads: int) -> list[subprocess.Popen[bytes]]:
    """`threads` processes that each keep one core busy."""
    spin = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(threads)]


def stop(load: list[subprocess.Popen[bytes]]) -> None:
    for process in load:
        process.terminate()
    for process in load:
        process.wait()


def one_process(shared: Path, threads: int, env: dict[str, str]) -> dict[str, Any]:
    cache = Path(tempfile.mkdtemp(prefix="auto-choice-"))
    (cache / "onnx").symlink_to(shared / "onnx", target_is_directory=True)
    before = load_average()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(threads)],
        env={**env, "DOCSEARCH_CACHE": str(cache)}, capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"a measuring process failed:\n{out.stderr[-2000:]}")
    run: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    run |= {"load_before": before, "load_after": load_average()}
    return run


def export_once(shared: Path, env: dict[str, str]) -> None:
    code = (
        "from docsearch.encoders import get_encoder; "
        "get_encoder('sentence-transformers', precision='onnx-fp32')"
    )
    subprocess.run(
        [sys.executable, "-c", code], env={**env, "DOCSEARCH_CACHE": str(shared)}, check=True,
        cwd=REPO,
    )  # fmt: skip


def reference(runs: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, float]]]:
    """decide() on the median over all processes of each candidate's median and cosine."""
    from docsearch.encoders.precision import decide

    names = runs[0]["measured"].keys()
    pooled = {
        name: {
            "seconds": statistics.median(r["measured"][name]["seconds"] for r in runs),
            "cosine": statistics.median(r["measured"][name]["cosine"] for r in runs),
        }
        for name in names
    }
    return decide(pooled), pooled


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# precision=auto in fresh processes",
        "",
        f"- date: {report['date']}; machine: {report['cpu']}, {report['cores']} cores; "
        f"torch threads {report['threads']}",
        f"- command: `{report['command']}`",
        f"- reference verdict (decide on the pooled medians): **{report['reference']}**",
        "",
        "| candidate | pooled median s | x torch fp32 | cosine to fp32 |",
        "|---|---|---|---|",
    ]
    fp32 = report["pooled"]["fp32"]["seconds"]
    for name, found in report["pooled"].items():
        lines.append(
            f"| {name} | {found['seconds']:.4f} | {fp32 / found['seconds']:.2f} | "
            f"{found['cosine']:.5f} |"
        )
    lines += ["", "| condition | processes | chosen (count) | = reference | confident | load avg |"]
    lines.append("|---|---|---|---|---|---|")
    for condition, runs in report["runs"].items():
        if not runs:
            continue
        counts = Counter(r["choice"] for r in runs)
        chosen = ", ".join(f"{name} {n}" for name, n in counts.most_common())
        agree = sum(r["choice"] == report["reference"] for r in runs)
        sure = sum(bool(r["confident"]) for r in runs)
        loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
        lines.append(
            f"| {condition} | {len(runs)} | {chosen} | {agree}/{len(runs)} | {sure}/{len(runs)} | "
            f"{min(loads):.1f}-{max(loads):.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--load-threads", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each process")
    parser.add_argument("--conditions", default="quiet,loaded")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="auto_choice")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the load is stopped
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    shared = Path(tempfile.mkdtemp(prefix="auto-choice-shared-"))
    export_once(shared, env)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in args.conditions.split(",")}
    for i in range(args.processes):  # conditions interleaved, so drift hits both alike
        for condition in runs:
            load = start_load(args.load_threads) if condition == "loaded" else []
            try:
                if load:
                    time.sleep(1.0)  # let the load reach the cores first
                runs[condition].append(one_process(shared, args.threads, env))
            finally:
                stop(load)
            last = runs[condition][-1]
            print(f"{condition} {i + 1}: {last['choice']} ({last['seconds']:.1f} s)", flush=True)
            write(args, runs)  # after every process: a run cut short still leaves its record
    print(markdown(write(args, runs)))


def write(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    from benchmarks.eval_sets import machine

    verdict, pooled = reference([r for found in runs.values() for r in found])
    info = machine()
    report = {
        "date": info["date"], "cpu": info["cpu"], "cores": os.cpu_count(),
        "threads": args.threads, "command": " ".join(["python", *sys.argv]),
        "reference": verdict, "pooled": pooled, "runs": runs,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(report))
    return report


if __name__ == "__main__":
    main()
