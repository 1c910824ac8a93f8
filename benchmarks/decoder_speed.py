"""Speed of the training-free decoder encoders (KV-Embedding and its baselines) on CPU.

    flock /tmp/docsearch-heavy.lock python benchmarks/decoder_speed.py \
        [--models smollm2-135m gemma3-270m] [--lengths 512 2048 8192] [--encoder-lengths ...]

Writes benchmarks/results/decoder_speed.json and .md. For each model and input length L
(content tokens of real prose from ../shared/data/scisummnet-acl; batches of max(1, 2048 // L)
equal-length rows, so no padding):
- model level, same token ids: a plain forward (the prompt-only ablation; last-token, mean and
  PromptEOL cost the same), the KV-Embedding forward (re-routing in the calibrated layers), and
  an Echo forward (the text twice). Plain and KV-Embedding runs are interleaved and the best of
  the repeats is kept, so their ratio is measured under the same load;
- encoder level: tokens/s of `encode_documents` for each registered method (tokenising,
  batching and pooling included);
- the share of this machine's measured bf16 matmul peak reached by the plain forward (model
  FLOPs: 2 x non-embedding parameters per token, plus causal attention; sliding-window layers
  counted over their window);
- bf16 against fp32: plain-forward speed and the cosine between KV-Embedding vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from docsearch.encoders.base import get_encoder
from docsearch.encoders.decoder_common import DecoderEncoder, left_pad, tokenize, truncate

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
METHODS = ("kv-embedding", "last-token", "mean", "prompteol", "echo")


def best_of(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak(dtype: torch.dtype, sizes: tuple[int, ...] = (1024, 2048, 4096)) -> float:
    """Best GFLOP/s of a square matmul over a few sizes (one warm-up, best of three)."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        seconds = best_of(lambda a=a, b=b: a @ b, 3)
        best = max(best, 2 * n**3 / seconds / 1e9)
    return best


def shape_peak(config: Any, tokens: int = 2048) -> float:
    """bf16 GFLOP/s of this model's own MLP matmul, (tokens x hidden) @ (hidden x intermediate):
    what a forward could reach if every FLOP ran like its largest matmul."""
    x = torch.randn(tokens, config.hidden_size, dtype=torch.bfloat16)
    w = torch.randn(config.hidden_size, config.intermediate_size, dtype=torch.bfloat16)
    x @ w
    seconds = best_of(lambda: x @ w, 5)
    return 2 * tokens * config.hidden_size * config.intermediate_size / seconds / 1e9


def linear_flops(config: Any, rows: int, length: int) -> float:
    """FLOPs of the linear layers of one forward (attention projections and MLP; no LM head)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    per_layer = (
        hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * config.intermediate_size
    )
    return 2.0 * per_layer * layers * rows * length


def attention_flops(config: Any, rows: int, length: int) -> float:
    """FLOPs of causal attention (QK^T and AV) in one forward; sliding layers over their window."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None) or length
    flops = 0.0
    for kind in types:
        # Each query attends to min(i + 1, span) keys; two matmuls (QK^T, AV) of 2 FLOPs per MAC.
        span = min(window, length) if kind == "sliding_attention" else length
        keys = span * (span + 1) / 2 + (length - span) * span
        flops += 4.0 * keys * head_dim * heads * rows
    return flops


def forward_flops(config: Any, rows: int, length: int) -> float:
    """Model FLOPs of one forward without the LM head: linear layers plus causal attention."""
    return linear_flops(config, rows, length) + attention_flops(config, rows, length)


MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def time_breakdown(model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, float]:
    """Where one plain forward's CPU time goes (profiler self time): the linear layers' matmuls,
    the attention kernel, everything else (norms, RoPE, activations, copies); and the GFLOP/s
    of the first two, which says which one keeps the forward from the matmul peak."""
    from torch.profiler import profile

    with torch.inference_mode(), profile() as prof:
        model(**inputs)
    seconds = {"matmul": 0.0, "attention": 0.0, "other": 0.0}
    for event in prof.key_averages():
        kind = "matmul" if event.key in MATMUL_OPS else "other"
        kind = "attention" if "attention" in event.key else kind
        seconds[kind] += event.self_cpu_time_total / 1e6
    total = sum(seconds.values())
    rows, length = inputs["input_ids"].shape
    config = model.config
    return {
        **{f"{k}_share": v / total for k, v in seconds.items()},
        "matmul_gflops": linear_flops(config, rows, length) / seconds["matmul"] / 1e9,
        "attention_gflops": attention_flops(config, rows, length) / seconds["attention"] / 1e9,
    }


def prose(tokenizer: Any, length: int, rows: int) -> list[str]:
    """`rows` paper bodies, each cut to exactly `length` content tokens."""
    texts = []
    with open(DATA / "scisummnet-acl" / "corpus.jsonl") as f:
        for line in f:
            text = json.loads(line)["text"]
            cut = truncate(tokenizer, text, length)
            if len(tokenizer(cut, add_special_tokens=False)["input_ids"]) == length:
                texts.append(cut)
            if len(texts) == rows:
                return texts
    raise RuntimeError(f"not enough documents with {length} tokens")


def batch(enc: DecoderEncoder, template: str, texts: list[str]) -> dict[str, torch.Tensor]:
    items = [tokenize(enc.tokenizer, template, t).ids for t in texts]
    return left_pad(items, int(enc.tokenizer.pad_token_id))


def model_level(kv: Any, echo_template: str, texts: list[str], reps: int) -> dict[str, Any]:
    """Plain vs re-routed forward on identical ids (interleaved), and the Echo forward."""
    inputs = batch(kv, kv.document_template, texts)
    echo_inputs = batch(kv, echo_template, texts)
    plain_times, kv_times = [], []
    with torch.inference_mode():
        for _ in range(reps):
            plain_times.append(best_of(lambda: kv.model(**inputs), 1))
            kv_times.append(best_of(lambda: kv._forward(inputs), 1))
        echo = best_of(lambda: kv.model(**echo_inputs), max(1, reps - 1))
    plain, rerouted = min(plain_times), min(kv_times)
    forward_tokens = int(inputs["input_ids"].numel())
    return {
        "forward_tokens": forward_tokens,
        "echo_forward_tokens": int(echo_inputs["input_ids"].numel()),
        "plain_s": plain,
        "kv_s": rerouted,
        "echo_s": echo,
        "kv_over_plain": rerouted / plain,
        "echo_over_plain": echo / plain,
        "plain_forward_tokens_per_s": forward_tokens / plain,
        "breakdown": time_breakdown(kv.model, inputs),
    }


def encoder_level(encoders: dict[str, DecoderEncoder], texts: list[str], reps: int) -> dict:
    out = {}
    for name, enc in encoders.items():
        embedded = sum(
            min(
                len(enc.tokenizer(t, add_special_tokens=False)["input_ids"]),
                enc.max_tokens or 10**9,
            )
            for t in texts
        )
        seconds = best_of(lambda enc=enc: enc.encode_documents(texts), reps)
        out[name] = {
            "content_tokens": embedded,
            "seconds": seconds,
            "tokens_per_s": embedded / seconds,
        }
    return out


def dtype_comparison(model: str, layers: list[int], texts: list[str], reps: int) -> dict[str, Any]:
    """Plain-forward speed and KV-Embedding vectors in bf16 against fp32."""
    result: dict[str, Any] = {}
    vectors = {}
    for name in ("bfloat16", "float32"):
        enc = get_encoder("kv-embedding", model=model, layers=layers, dtype=name)
        inputs = batch(enc, enc.document_template, texts[:4])
        with torch.inference_mode():
            enc.model(**inputs)
            result[f"{name}_plain_s"] = best_of(
                lambda enc=enc, inputs=inputs: enc.model(**inputs), reps
            )
        vectors[name] = enc.encode_documents(texts)
    cos = (vectors["bfloat16"] * vectors["float32"]).sum(1)
    result.update(
        speedup_bf16=result["float32_plain_s"] / result["bfloat16_plain_s"],
        cosine_min=float(cos.min()),
        cosine_mean=float(cos.mean()),
        n_texts=len(texts),
    )
    return result


def run_model(model: str, lengths: list[int], encoder_lengths: list[int], peak: float) -> dict:
    kv = get_encoder("kv-embedding", model=model, dtype="bfloat16")
    assert isinstance(kv, DecoderEncoder)
    encoders: dict[str, DecoderEncoder] = {"kv-embedding": kv}
    for name in METHODS[1:]:
        enc = get_encoder(name, model=model, dtype="bfloat16")
        assert isinstance(enc, DecoderEncoder)
        encoders[name] = enc
    echo_template = encoders["echo"].document_template
    report: dict[str, Any] = {"layers": kv.layers, "lengths": {}}
    report["mlp_matmul_gflops"] = shape_peak(kv.model.config)
    with torch.inference_mode():  # warm-up: allocator and kernels
        kv.model(**batch(kv, kv.document_template, prose(kv.tokenizer, 256, 2)))
    for length in lengths:
        rows = max(1, 2048 // length)
        reps = 3  # interleaved plain and re-routed forwards; the best of each is kept
        texts = prose(kv.tokenizer, length, rows)
        entry = model_level(kv, echo_template, texts, reps)
        flops = forward_flops(kv.model.config, rows, entry["forward_tokens"] // rows)
        entry.update(rows=rows, gflops_per_s=flops / entry["plain_s"] / 1e9)
        entry["share_of_bf16_peak"] = entry["gflops_per_s"] / peak
        if length in encoder_lengths:
            entry["encoders"] = encoder_level(encoders, texts, 1 if length > 2048 else 2)
        report["lengths"][str(length)] = entry
        print(model, length, json.dumps(entry, default=float), file=sys.stderr, flush=True)
    sample = prose(kv.tokenizer, 512, 16)
    report["bf16_vs_fp32"] = dtype_comparison(model, kv.layers, sample, 2)
    return report


def hardware() -> dict[str, Any]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if "Model name" in ln), ""
    )
    flags = next((ln for ln in lscpu.splitlines() if ln.startswith("Flags")), "")
    return {
        "cpu": model,
        "torch_threads": torch.get_num_threads(),
        "bf16_flags": [f for f in ("avx512_bf16", "amx_bf16") if f in flags.split()],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Decoder encoder speed (KV-Embedding and baselines)",
        "",
        f"Date: {result['date']}. Command: `{result['command']}`.",
        f"Hardware: {result['hardware']['cpu']}, {result['hardware']['torch_threads']} torch threads, "
        f"bf16 instructions: {', '.join(result['hardware']['bf16_flags']) or 'none'}; "
        f"torch {result['hardware']['torch']}, transformers {result['hardware']['transformers']}.",
        f"Measured matmul peak: bf16 {result['peak_gflops']['bfloat16']:.0f} GFLOP/s, "
        f"fp32 {result['peak_gflops']['float32']:.0f} GFLOP/s. The machine is shared: absolute "
        "numbers move with other load; ratios are measured interleaved in one run. Peak and "
        "forwards use the same thread count (one by default: on this shared 2-vCPU machine two "
        "OpenMP threads run small ops about 10x slower whenever another process holds a core).",
        "",
    ]
    for model, rep in result["models"].items():
        lines += [f"## {model} (bf16; re-routed layers {rep['layers']})", ""]
        lines += [
            f"This model's own MLP matmul (2048 tokens) runs at {rep['mlp_matmul_gflops']:.0f} "
            f"GFLOP/s in bf16, {rep['mlp_matmul_gflops'] / result['peak_gflops']['bfloat16']:.0%} "
            "of the square-matmul peak: the ceiling for a forward made of such matmuls.",
            "",
        ]
        lines += [
            f"Command: `{rep['command']}`; 1-min load average before/after: "
            f"{rep['load_average_1min'][0]} / {rep['load_average_1min'][1]} (2 cores).",
            "",
        ]
        lines += [
            "| L | rows | plain forward tok/s | share of bf16 peak | KV-Emb / plain | Echo / plain |",
            "|---|---|---|---|---|---|",
        ]
        for length, e in rep["lengths"].items():
            lines.append(
                f"| {length} | {e['rows']} | {e['plain_forward_tokens_per_s']:.0f} | "
                f"{e['share_of_bf16_peak']:.0%} | {e['kv_over_plain']:.3f} | {e['echo_over_plain']:.2f} |"
            )
        lines += [
            "",
            "Where the plain forward's time goes (profiler self time) and what each part reaches:",
            "",
            "| L | linear matmuls | attention kernel | other ops | matmul GFLOP/s | attention GFLOP/s |",
            "|---|---|---|---|---|---|",
        ]
        for length, e in rep["lengths"].items():
            b = e.get("breakdown")
            if b:
                lines.append(
                    f"| {length} | {b['matmul_share']:.0%} | {b['attention_share']:.0%} | "
                    f"{b['other_share']:.0%} | {b['matmul_gflops']:.0f} | {b['attention_gflops']:.0f} |"
                )
        with_enc = {k: v for k, v in rep["lengths"].items() if "encoders" in v}
        if with_enc:
            lines += ["", "Encoder level, content tokens/s (`encode_documents`, all steps):", ""]
            lines += ["| L | " + " | ".join(METHODS) + " |", "|---" * (len(METHODS) + 1) + "|"]
            for length, e in with_enc.items():
                cells = [f"{e['encoders'][m]['tokens_per_s']:.0f}" for m in METHODS]
                lines.append(f"| {length} | " + " | ".join(cells) + " |")
        d = rep["bf16_vs_fp32"]
        lines += [
            "",
            f"bf16 vs fp32: plain forward {d['speedup_bf16']:.2f}x faster in bf16; cosine of "
            f"KV-Embedding vectors min {d['cosine_min']:.5f}, mean {d['cosine_mean']:.5f} "
            f"({d['n_texts']} texts of 512 tokens).",
            "",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[512, 2048, 8192])
    parser.add_argument("--encoder-lengths", nargs="+", type=int, default=[512, 2048, 8192])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (see below)")
    args = parser.parse_args()
    # On this shared 2-vCPU machine, 2 OpenMP threads run small ops about 10x slower than one
    # whenever another process holds the second core, so the default measures one thread.
    torch.set_num_threads(args.threads)
    peak = {"bfloat16": matmul_peak(torch.bfloat16), "float32": matmul_peak(torch.float32)}
    print("peak", peak, file=sys.stderr, flush=True)
    out = RESULTS / "decoder_speed.json"
    earlier = json.loads(out.read_text())["models"] if out.exists() else {}
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/decoder_speed.py " + " ".join(sys.argv[1:]),
        "threads": args.threads,
        "hardware": hardware(),
        "peak_gflops": peak,
        "models": {k: v for k, v in earlier.items() if k not in args.models},
    }
    for model in args.models:
        load = os.getloadavg()[0]
        rep = run_model(model, args.lengths, args.encoder_lengths, peak["bfloat16"])
        rep["load_average_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
        rep["command"] = result["command"]
        result["models"][model] = rep
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "decoder_speed.json").write_text(json.dumps(result, indent=1) + "\n")
        (RESULTS / "decoder_speed.md").write_text(markdown(result))


if __name__ == "__main__":
    main()
