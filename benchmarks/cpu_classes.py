"""Indexing next to the peers under each CPU class this machine can pretend to be (issue 39).

    python benchmarks/cpu_classes.py [--classes amx,avx512-bf16,avx512-vnni,avx2]
        [--contracts 15] [--rounds 2] [--tools docsearch,txtai,fastembed,hand] [--threads 2]
        [--lock FILE] [--out benchmarks/results] [--name cpu_classes] [--host SUFFIX]

A class is a set of ISA caps (CLASSES) put into the environment of every process of its run,
so that torch's kernel libraries take the kernels that class of CPU has: oneDNN
(ONEDNN_MAX_CPU_ISA), ATen's own vectorised kernels (ATEN_CPU_CAPABILITY) and MKL
(MKL_ENABLE_INSTRUCTIONS). Per class, in order:
1. one fresh process builds the MiniLM encoder with precision=auto under the caps, with an
   empty calibration cache (`auto_choice.one_process`; the ONNX export is made once and shared):
   what auto chooses there and what it measured;
2. `peers.py` (the same folder, tools interleaved, loads recorded, --no-search) with
   `-o precision=<auto's choice>`, so every docsearch run runs what auto chose without paying
   for the choice again (it is made once per machine); written as peers_class_<class>.{json,md}
   with the caps and auto's record added.
The summary of all classes goes to cpu_classes.{json,md}. Each class holds `--lock` while it
runs (the machine is shared; timed runs must not overlap).

What the caps cannot emulate: ONNX Runtime's kernels (MLAS) choose by CPUID and read none of
these variables, so docsearch's onnx-* candidates and the fastembed peer run the native
kernels (AVX-512 with VNNI, and AMX where MLAS has it) in every class; fbgemm (torch's int8 on
CPUs without int8 dot products) reads none either; and the CPU's own cache sizes, clock and
core count stay this machine's. So an emulated class is this Xeon with some kernels held back,
not the other CPU.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import auto_choice, peers  # noqa: E402

CLASSES: dict[str, dict[str, str]] = {
    "amx": {},  # this machine as it is
    "avx512-bf16": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
    "avx512-vnni": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "ATEN_CPU_CAPABILITY": "avx512"},
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}
DESCRIBED = {
    "amx": "AMX + AVX-512 BF16 + VNNI (native)",
    "avx512-bf16": "AVX-512 BF16 + VNNI, no AMX",
    "avx512-vnni": "AVX-512 VNNI, no bf16 (the issue's Xeon)",
    "avx2": "AVX2 only, no VNNI",
}
DEFAULT_TOOLS = "docsearch,txtai,fastembed,hand"


@contextmanager
def held(lock: str):  # type: ignore[no-untyped-def]
    """The heavy-benchmark lock, so that this class's timed runs overlap no other's."""
    if not lock:
        yield
        return
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def class_env(caps: dict[str, str], cache: Path) -> dict[str, str]:
    """This process's environment with the class's caps (and no other class's) and `cache`."""
    env = {k: v for k, v in os.environ.items() if k not in _ALL_CAPS}
    return (
        env
        | caps
        | {"PYTHONPATH": str(peers.REPO), "HF_HUB_OFFLINE": "1"}
        | {"DOCSEARCH_CACHE": str(cache)}
    )


_ALL_CAPS = set(peers.ISA_CAPS)


def auto_verdict(shared: Path, threads: int, env: dict[str, str]) -> dict[str, Any]:
    """What precision=auto chooses under `env`, measured by a fresh process."""
    run = auto_choice.one_process(shared, threads, env)
    fp32 = run["measured"]["fp32"]["seconds"]
    run["speed_vs_fp32"] = {n: round(fp32 / m["seconds"], 2) for n, m in run["measured"].items()}
    return run


def peers_run(name: str, args: argparse.Namespace, choice: str, env: dict[str, str]) -> None:
    cmd = [sys.executable, str(Path(peers.__file__).resolve()), "--tools", args.tools]
    cmd += ["--contracts", str(args.contracts), "--rounds", str(args.rounds), "--no-search"]
    cmd += ["--threads", str(args.threads), "--name", name, "--out", str(args.out)]
    cmd += ["--docsearch-option", f"precision={choice}", "--venv", str(args.venv)]
    subprocess.run(cmd, env=env, check=True, cwd=peers.REPO)


def one_class(label: str, args: argparse.Namespace, shared: Path) -> dict[str, Any]:
    caps = CLASSES[label]
    env = class_env(caps, shared)
    with held(args.lock):
        load_before = os.getloadavg()[0]
        auto = auto_verdict(shared, args.threads, env)
        print(f"{label}: auto chose {auto['choice']} ({auto['speed_vs_fp32']})", flush=True)
        name = f"peers_class_{label}{args.host}"
        peers_run(name, args, auto["choice"], env)
    path = Path(args.out) / f"{name}.json"
    report = json.loads(path.read_text())  # its command carries the caps (peers.isa_caps)
    report |= {"cpu_class": label, "isa_caps": caps, "auto": auto}
    peers.write_report(report, Path(args.out), name)
    loads = [r["load_before"] for r in report["order"]] + [r["load_after"] for r in report["order"]]
    return {
        "class": label,
        "described": DESCRIBED[label],
        "caps": caps,
        "auto_choice": auto["choice"],
        "auto_confident": auto["confident"],
        "auto_speed_vs_fp32": auto["speed_vs_fp32"],
        "auto_seconds": round(auto["seconds"], 1),
        "summary": report["summary"],
        "ratios": report["ratios"],
        "load_min": round(min([load_before, *loads]), 2),
        "load_max": round(max([load_before, *loads]), 2),
        "load_median": round(statistics.median(loads), 2),
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Indexing next to the peers, per CPU class",
        "",
        f"Generated by `benchmarks/cpu_classes.py` on {report['date']}. Command:",
        "",
        f"    {report['command']}",
        "",
        f"Machine: {report['cpu']}, {report['cores']} cores, shared with other jobs (loads "
        "below). Each class: its caps in every process's environment, auto's choice made by a "
        "fresh process with an empty calibration cache, then peers.py with docsearch running "
        "that choice. Per-class tables: peers_class_<class>.md.",
        "",
        "| class | caps | auto chose (x torch fp32; confident) | docsearch tokens/s "
        "| fastest peer (tokens/s) | vs fastest peer | vs hand | 1-min load min-median-max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["classes"]:
        summary, rat = row["summary"], row["ratios"]
        peer = rat.get("fastest_peer", "-")
        speed = row["auto_speed_vs_fp32"].get(row["auto_choice"], 1.0)
        caps = ", ".join(f"{k}={v}" for k, v in row["caps"].items()) or "none (native)"
        lines.append(
            f"| {row['class']}: {row['described']} | {caps} | {row['auto_choice']} ({speed}x; "
            f"{'yes' if row['auto_confident'] else 'provisional'}) | "
            f"{summary['docsearch']['tokens_per_s']:,} | {peer} "
            f"({summary.get(peer, {}).get('tokens_per_s', 0):,}) | "
            f"**{rat.get('vs_fastest_peer', '-')}x** | {rat.get('vs_hand', '-')}x | "
            f"{row['load_min']}-{row['load_median']}-{row['load_max']} |"
        )
    lines += ["", "auto's timings per class (x torch fp32, as indexing runs each):", ""]
    for row in report["classes"]:
        found = ", ".join(f"{n} {x}x" for n, x in row["auto_speed_vs_fp32"].items())
        lines.append(f"- {row['class']}: {found} ({row['auto_seconds']} s to choose)")
    lines += ["", peers.NOTES]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--contracts", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tools", default=DEFAULT_TOOLS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--venv", default=str(peers.DEFAULT_VENV))
    parser.add_argument(
        "--lock",
        default=os.environ.get("DOCSEARCH_BENCH_LOCK", ""),
        help="a file to flock while each class runs (default: $DOCSEARCH_BENCH_LOCK, else none)",
    )
    parser.add_argument("--out", default=str(peers.RESULTS))
    parser.add_argument("--name", default="cpu_classes")
    parser.add_argument(
        "--host",
        default="",
        help="a suffix for the per-class reports' names, so that one host's run of a class "
        "keeps another host's (e.g. _amd: peers_class_avx512-bf16_amd.md)",
    )
    args = parser.parse_args()
    shared = Path(tempfile.mkdtemp(prefix="cpu-classes-"))
    auto_choice.export_once(shared, class_env({}, shared))
    out = Path(args.out)
    summary_path = out / f"{args.name}.json"
    previous = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    rows = {row["class"]: row for row in previous.get("classes", [])}
    for label in args.classes.split(","):
        rows[label] = one_class(label, args, shared)
        info = peers.machine()
        report = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python", "benchmarks/cpu_classes.py", *sys.argv[1:]]),
            "cpu": info["cpu"],
            "cores": info["cores"],
            "classes": [rows[c] for c in CLASSES if c in rows],
        }
        summary_path.write_text(json.dumps(report, indent=1) + "\n")
        md = out / f"{args.name}.md"
        md.write_text(markdown(report) + peers.kept_notes(md))
        print(markdown(report), flush=True)


if __name__ == "__main__":
    main()
