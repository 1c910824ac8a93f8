"""Scaling of M2-BERT against a same-width BERT: seconds per document at 512 to 32k tokens.

    flock /tmp/docsearch-heavy.lock python benchmarks/m2_scaling.py \
        [--lengths 512 2048 8192 32768] [--dtype bfloat16] [--threads 1] [--bert-full-max 8192]

M2-BERT: the 80M shape (12 layers, width 768, 32768 positions, random weights), one document per
forward at exactly L tokens (the padded length is what costs). BERT: transformers `BertModel`, 12
layers, width 768, 12 heads, SDPA attention, random weights; full attention on one sequence of L
tokens where L <= --bert-full-max, and 512-token chunks (4 chunks per forward) for L > 512.
The box is shared (2 cores, other jobs running), so each row records process CPU seconds (one
torch thread: CPU time leaves out the time other processes hold the core) beside wall seconds;
2048 tokens is measured again after the longest length and the ratios use the median of all its
samples; and the chunked BERT is a control: its work grows exactly linearly, so its 32k/2k ratio
shows how much this machine itself inflates long runs (cache, shared cores) over the ideal 16.
Timings are medians over --reps forwards (one forward from 8k up), after one warm-up forward.
`--malloc heap` (Linux/glibc) serves every allocation from the heap and never returns freed memory
to the system (the effect of GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=
2147483647): by default glibc maps each tensor above 32 MB fresh from the kernel and pays page
faults on every touch, which makes every operation at 32k tokens slower per element than at 2k.
Writes benchmarks/results/m2_scaling.{json,md}. Target (issue 7): M2 time(32k)/time(2k) <= 25
(an L log L curve gives about 21; attention would give 256).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
CHUNK = 512
CHUNKS_PER_FORWARD = 4  # every chunked forward has the same shape: a linear-work control
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def use_heap_malloc() -> None:
    """glibc: no mmap for large blocks, no trimming: freed tensors are reused warm."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_max = -1, -4
    if not (libc.mallopt(m_mmap_max, 0) and libc.mallopt(m_trim_threshold, 2**31 - 1)):
        raise RuntimeError("mallopt failed")


def seconds(fn: Callable[[], Any], reps: int) -> tuple[list[float], list[float]]:
    """(CPU seconds, wall seconds) of each of `reps` calls."""
    cpu, wall = [], []
    for _ in range(reps):
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return cpu, wall


def m2_model(dtype: torch.dtype, max_len: int) -> Any:
    from docsearch.encoders.m2_bert import M2BertModel, M2Config, cast_model

    config = M2Config(max_position_embeddings=max_len, long_conv_l_max=max_len)
    return cast_model(M2BertModel(config), dtype).eval()


def bert_model(dtype: torch.dtype, max_len: int) -> Any:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=30528,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=max_len,
        attn_implementation="sdpa",
    )
    return BertModel(config, add_pooling_layer=True).to(dtype).eval()


def m2_forward(model: Any, length: int) -> Callable[[], Any]:
    ids = torch.randint(1000, 30000, (1, length))
    return lambda: model(ids)


def bert_full(model: Any, length: int) -> Callable[[], Any]:
    ids = torch.randint(1000, 30000, (1, length))
    return lambda: model(input_ids=ids).pooler_output


def bert_chunked(model: Any, length: int) -> Callable[[], Any]:
    """All 512-token chunks of one document, CHUNKS_PER_FORWARD per forward."""
    chunks = torch.randint(1000, 30000, (length // CHUNK, CHUNK))

    def run() -> list[Any]:
        return [model(input_ids=b).pooler_output for b in chunks.split(CHUNKS_PER_FORWARD)]

    return run


def _skip(name: str, mode: str, length: int, full_max: int) -> bool:
    if mode == "full attention":
        return length > full_max
    return name == "bert" and length <= CHUNK  # one chunk is the full-attention row


def _row(name: str, mode: str, length: int, cpu: list[float], wall: list[float]) -> dict[str, Any]:
    return {
        "model": name,
        "mode": mode,
        "tokens": length,
        "seconds": statistics.median(cpu),
        "wall_seconds": statistics.median(wall),
        "cpu_samples": [round(x, 3) for x in cpu],
        "wall_samples": [round(x, 3) for x in wall],
    }


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    dtype, rows = DTYPES[args.dtype], []
    m2 = m2_model(dtype, max(args.lengths))
    bert = bert_model(dtype, max(CHUNK, min(args.bert_full_max, max(args.lengths))))
    series: list[tuple[str, str, Callable[[Any, int], Callable[[], Any]], Any]] = [
        ("m2-bert", "whole document", m2_forward, m2),
        ("bert", "full attention", bert_full, bert),
        ("bert", f"{CHUNK}-token chunks", bert_chunked, bert),
    ]
    # 2048 again after the longest: drift shows, and the medians absorb it
    order = [*args.lengths, *([2048] if 2048 in args.lengths else [])]
    with torch.inference_mode():
        for name, mode, make, model in series:
            make(model, CHUNK)()  # warm-up (allocator, kernels)
            samples: dict[int, tuple[list[float], list[float]]] = {}
            for length in order:
                if _skip(name, mode, length, args.bert_full_max):
                    continue
                cpu, wall = seconds(make(model, length), args.reps if length <= 2048 else 1)
                samples.setdefault(length, ([], []))[0].extend(cpu)
                samples[length][1].extend(wall)
                message = (
                    f"{name:8} {mode:18} {length:6} tokens  cpu {statistics.median(cpu):8.2f} s"
                )
                print(
                    f"{message}  wall {statistics.median(wall):8.2f} s", file=sys.stderr, flush=True
                )
            rows += [_row(name, mode, n, *samples[n]) for n in sorted(samples)]
    return rows


def series_time(rows: list[dict[str, Any]], model: str, mode: str, tokens: int) -> float | None:
    for row in rows:
        if (row["model"], row["mode"], row["tokens"]) == (model, mode, tokens):
            return float(row["seconds"])
    return None


def ratios(rows: list[dict[str, Any]], lengths: list[int]) -> dict[str, dict[str, float]]:
    """time(L) / time(2048) per series; a document of <= 512 tokens is one BERT chunk."""
    chunked = f"{CHUNK}-token chunks"
    series = {
        "m2-bert": lambda n: series_time(rows, "m2-bert", "whole document", n),
        "bert full attention": lambda n: series_time(rows, "bert", "full attention", n),
        f"bert {chunked}": lambda n: series_time(
            rows, "bert", chunked if n > CHUNK else "full attention", n
        ),
    }
    out: dict[str, dict[str, float]] = {}
    for label, time_at in series.items():
        base = time_at(2048)
        values = {n: time_at(n) for n in lengths}
        out[label] = {f"{n}/2048": round(v / base, 2) for n, v in values.items() if base and v}
    return out


def hardware(threads: int) -> dict[str, Any]:
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            ln.split(":", 1)[1].strip()
            for ln in cpuinfo.read_text().splitlines()
            if ln.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def markdown(result: dict[str, Any]) -> str:
    hw, rows = result["hardware"], result["rows"]
    lines = [
        "# M2-BERT scaling: seconds per document against sequence length",
        "",
        f"Date {result['date']}; command `{result['command']}`.",
        f"Hardware: {hw['cpu']}, {hw['cores']} cores shared with other jobs, torch {hw['torch']} "
        f"with {hw['torch_threads']} thread(s); dtype {result['dtype']}; malloc {result['malloc']}; "
        "load average at start "
        f"{', '.join(f'{x:.1f}' for x in hw['load_average_at_start'])}, at end "
        f"{', '.join(f'{x:.1f}' for x in result['load_average_at_end'])}.",
        "Random weights (timing only). M2-BERT: 80M shape, one forward per document at exactly L "
        f"tokens. BERT: 12 layers, width 768, SDPA; full attention, or {CHUNK}-token chunks.",
        "",
        "| model | mode | tokens | CPU s / doc | wall s / doc | tokens / CPU s | forwards timed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        rate = r["tokens"] / r["seconds"]
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['tokens']} | {r['seconds']:.2f} | "
            f"{r['wall_seconds']:.2f} | {rate:.0f} | {len(r['cpu_samples'])} |"
        )
    lines += ["", "Growth against 2048 tokens (CPU time(L) / CPU time(2048)):", ""]
    lengths = sorted({r["tokens"] for r in rows})
    lines += [
        "| series | " + " | ".join(str(n) for n in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for label, values in result["ratios"].items():
        cells = [str(values.get(f"{n}/2048", "-")) for n in lengths]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    target = result["target"]
    lines += [
        "",
        f"Target: M2-BERT time(32768)/time(2048) <= 25: measured {target['m2_32k_over_2k']} "
        f"({'met' if target['met'] else 'NOT met'}). L log L predicts ~21, attention 256.",
        f"Linear-work control (chunked BERT, ideal 16): {target['control_32k_over_2k']}; the M2-BERT "
        f"ratio scaled by 16 / control: {target['m2_normalised_by_control']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192, 32768])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=2, help="forwards timed up to 2048 tokens")
    parser.add_argument("--bert-full-max", type=int, default=8192)
    parser.add_argument("--malloc", choices=("default", "heap"), default="default")
    parser.add_argument("--out", type=Path, default=RESULTS / "m2_scaling")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.malloc == "heap":
        use_heap_malloc()
    torch.manual_seed(0)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    info = hardware(args.threads)
    rows = measure(args)
    table = ratios(rows, args.lengths)
    m2_ratio = table["m2-bert"].get("32768/2048")
    control = table[f"bert {CHUNK}-token chunks"].get("32768/2048")
    normalised = round(m2_ratio * 16 / control, 2) if m2_ratio and control else None
    result = {
        "date": started,
        "command": "python " + " ".join(["benchmarks/m2_scaling.py", *sys.argv[1:]]),
        "dtype": args.dtype,
        "malloc": args.malloc,
        "hardware": info,
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
        "ratios": table,
        "target": {
            "m2_32k_over_2k": m2_ratio,
            "max": 25,
            "met": bool(m2_ratio and m2_ratio <= 25),
            "control_32k_over_2k": control,
            "m2_normalised_by_control": normalised,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
