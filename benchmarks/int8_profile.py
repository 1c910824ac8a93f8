"""Where an int8 MiniLM encode spends its time, and what the integer product alone gains.

    python -m benchmarks.int8_profile [--windows 4] [--repeats 20]
    ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI ATEN_CPU_CAPABILITY=avx512 python -m benchmarks.int8_profile

Issue 39 asked why `torch._int_mm` gains little over fp32 on some CPUs. Two measurements, on
one torch thread (as each of indexing's two workers runs) and in this process's ISA caps:
- the integer product against MKL's fp32 GEMM on MiniLM's layer shapes (1,024 token rows: a
  batch of 4 windows of 256 tokens), median of `--repeats` timings each;
- one int8 `encode_documents` of `--windows` scifact windows (indexing's int8 batch is 4) under
  the torch profiler, after a warm-up, its operators' self time grouped: the integer products,
  attention, GELU and LayerNorm (fp32 in every precision), and the rest, mostly int8's own work
  around the products (each token's scale, rounding, the casts, the per-channel epilogue, the
  fp32 outlier channels) beside the residual adds and the embeddings.
Writes results/int8_profile.{json,md} (a run with ISA caps is kept beside the others by `--name`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import RESULTS, machine, machine_lines, write_results  # noqa: E402

# MiniLM-L6's Linear shapes (in, out): query/key/value fused, attention output, the two halves
# of the feed-forward block.
SHAPES = ((384, 1152), (384, 384), (384, 1536), (1536, 384))
ROWS = 1024
GROUPS = {
    "integer products": ("aten::_int_mm", "quantized::linear_dynamic"),
    "attention": (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::bmm",
        "aten::softmax",
    ),
    "GELU": ("aten::gelu",),
    "LayerNorm": ("aten::native_layer_norm",),
}


def median_seconds(run: Callable[[], Any], repeats: int) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def gemms(repeats: int) -> list[dict[str, Any]]:
    """fp32 GEMM against `torch._int_mm` per shape: seconds and the ratio."""
    import torch

    out = []
    for width, outputs in SHAPES:
        x, w = torch.randn(ROWS, width), torch.randn(width, outputs)
        q = torch.randint(-127, 128, (ROWS, width), dtype=torch.int8)
        wq = torch.randint(-127, 128, (width, outputs), dtype=torch.int8)
        fp32 = median_seconds(partial(torch.mm, x, w), repeats)
        int8 = median_seconds(partial(torch._int_mm, q, wq), repeats)
        out.append({"shape": f"{ROWS}x{width} @ {width}x{outputs}", "fp32_s": fp32,
                    "int8_s": int8, "speedup": fp32 / int8})  # fmt: skip
    return out


def forward_profile(windows: int) -> dict[str, Any]:
    """Self CPU time of the torch operators of one int8 encode, by group, in ms."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.onnx_gate import texts
    from docsearch.encoders import get_encoder

    # One torch thread: encode_documents runs its batches in this thread (no workers), where
    # the profiler sees them; the batch is indexing's int8 batch.
    encoder = get_encoder("sentence-transformers", precision="int8")
    sample = texts(windows)
    encoder.encode_documents(sample)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        encoder.encode_documents(sample)
    ops = {e.key: e.self_cpu_time_total / 1000 for e in prof.key_averages()}
    total = sum(ops.values())
    groups = {g: sum(ops.get(name, 0.0) for name in names) for g, names in GROUPS.items()}
    groups["the rest: int8's work around the products, residual adds, embeddings"] = total - sum(
        groups.values()
    )
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:12]
    return {"windows": windows, "total_ms": total, "groups_ms": groups, "top_ms": dict(top)}


def markdown(payload: dict[str, Any], command: str) -> str:
    lines = ["# int8 MiniLM: the integer product and the rest", "", *machine_lines(
        payload["machine"], command)]  # fmt: skip
    lines += ["", "## fp32 GEMM against `torch._int_mm` (one thread)", "",
              "| shape | fp32 ms | int8 ms | speedup |", "|---|---|---|---|"]  # fmt: skip
    for row in payload["gemms"]:
        lines.append(f"| {row['shape']} | {row['fp32_s'] * 1e3:.2f} | {row['int8_s'] * 1e3:.2f} "
                     f"| {row['speedup']:.2f}x |")  # fmt: skip
    prof = payload["forward"]
    lines += ["", f"## One int8 encode of {prof['windows']} windows (256 tokens), one thread: "
              f"{prof['total_ms']:.0f} ms self CPU time", "", "| part | ms | share |",
              "|---|---|---|"]  # fmt: skip
    for group, ms in prof["groups_ms"].items():
        lines.append(f"| {group} | {ms:.1f} | {ms / prof['total_ms']:.0%} |")
    lines += ["", "Largest operators (self ms): " + ", ".join(
        f"{k} {v:.1f}" for k, v in prof["top_ms"].items())]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--name", default="int8_profile", help="results file names")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from docsearch.encoders.device import isa_caps

    caps = " ".join(f"{k}={v}" for k, v in isa_caps().items())
    command = f"{caps} python -m benchmarks.int8_profile --windows {args.windows} " + (
        f"--repeats {args.repeats} --name {args.name}"
    )
    payload = {"machine": machine(), "isa_caps": isa_caps(), "gemms": gemms(args.repeats),
               "forward": forward_profile(args.windows)}  # fmt: skip
    write_results(RESULTS, args.name, payload, markdown(payload, command.strip()))
    print(markdown(payload, command.strip()))


if __name__ == "__main__":
    main()
