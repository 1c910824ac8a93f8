"""GPU throughput of each encoder family at 512 to 32k tokens, and SDPA vs flash agreement.

    python benchmarks/gpu.py                 # on a CUDA machine: ~5 minutes on one H200
    python benchmarks/gpu.py --smoke --out /tmp/x   # tiny shapes on the CPU (what the tests run)

Writes `gpu.json` and `gpu.md` to --out (default benchmarks/results). Without CUDA (and without
--smoke) it says so and exits 0, writing nothing. Speed depends on a model's shape, not on its
weights, so every model is built here with random weights in a released shape: M2-BERT 80M (the
2k/8k/32k retrieval checkpoints; `padding="pow2"` so a text of L tokens runs at length L), the
SmolLM2-135M decoder under KV-Embedding, LLM2Vec and NV-Embed, and Gemma-3-270M under
KV-Embedding. Tokenizers are word-level and built in memory (one word = one token), so a text
of L words is exactly L content tokens. Encoders are built only through `get_encoder(name,
**options)`; a family that is missing or refuses its options is listed as skipped with the reason.
Agreement: torch SDPA backends (flash, memory-efficient, fp32 math) and, when the `flash-attn`
package is installed, `flash_attn_func`, on random q/k/v in the decoders' head sizes, causal and
bidirectional; and LLM2Vec embeddings under `sdpa` vs `flash_attention_2`.
Needs nothing but the repo and its Python dependencies: no Hub, no weights, no network.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from docsearch.encoders.base import get_encoder  # noqa: E402
from docsearch.encoders.device import flash_attn_available, flash_attn_installed  # noqa: E402

LENGTHS = (512, 2048, 8192, 32768)
TOKENS_PER_CALL = 65536  # content tokens per encode call (and the encoders' token budgets)
BUDGET_S = 420.0  # stop starting new measurements after this (the whole run must stay < 8 min)
N_WORDS = 4000  # word-level vocabulary of the built tokenizers

SMOLLM2_135M = {
    "model_type": "llama",
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
GEMMA3_270M = {
    "model_type": "gemma3_text",
    "vocab_size": 262144,
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "sliding_window": 512,
    "query_pre_attn_scalar": 256,
    "rope_theta": 1000000.0,
}
TINY_DECODER = {
    "model_type": "llama",
    "vocab_size": 4096 + 8,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


@dataclass
class Run:
    """What one invocation measures; `smoke` shrinks everything to run on a CPU in seconds."""

    device: str
    lengths: tuple[int, ...]
    tokens_per_call: int
    min_seconds: float
    budget_s: float
    smoke: bool
    started: float = field(default_factory=time.perf_counter)

    def time_left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)


# ---------------------------------------------------------------------------------------------
# Inputs: word-level tokenizers and texts of an exact token count


WORDS = [f"w{i}" for i in range(N_WORDS)]


def texts_of(length: int, n: int) -> list[str]:
    """`n` different texts of `length` words (= tokens for the tokenizers built here)."""
    return [
        " ".join(WORDS[(7 * row + 13 * j) % N_WORDS] for j in range(length)) for row in range(n)
    ]


def save_word_tokenizer(folder: Path) -> None:
    """A fast word-level tokenizer with BOS/EOS/pad, in a folder AutoTokenizer can load."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {word: i for i, word in enumerate([*specials, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.save_pretrained(str(folder))


def save_random_decoder(folder: Path, shape: dict[str, Any], max_positions: int) -> Path:
    """A decoder with random weights in `shape`, saved as a local model folder."""
    from transformers import AutoConfig, AutoModel

    values = {k: v for k, v in shape.items() if k != "model_type"}
    config = AutoConfig.for_model(
        shape["model_type"], **values, max_position_embeddings=max_positions
    )
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(str(folder))
    save_word_tokenizer(folder)
    return folder


def save_random_m2(folder: Path, smoke: bool) -> Path:
    """M2-BERT with random weights: the 80M shape at 32k positions (tiny in smoke mode)."""
    from docsearch.encoders.m2_bert import M2Config
    from tests.encoders.tiny_m2 import save_random_checkpoint

    shape: dict[str, Any] = {}
    if not smoke:  # the M2Config defaults are the 80M shape
        shape = {f.name: f.default for f in fields(M2Config) if f.name != "vocab_size"}
    save_random_checkpoint(folder, words=WORDS, **shape)
    return folder


def save_random_nv_adapter(folder: Path, base: Path, smoke: bool) -> Path:
    """An NV-Embed adapter folder for `base`: a random latent-attention block in the release's
    shape (512 latents, 8 heads of the decoder's width; 16 latents, 2 heads in smoke mode)."""
    from transformers import AutoConfig, AutoTokenizer

    from docsearch.encoders import nv_embed

    hidden = int(AutoConfig.from_pretrained(str(base)).hidden_size)
    shape = {"latents": 16, "heads": 2} if smoke else {"latents": 512, "heads": 8}
    torch.manual_seed(0)
    latent = nv_embed.LatentAttentionModel(
        nv_embed.LatentAttentionConfig.for_decoder(hidden, **shape)
    )
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    return nv_embed.save_adapter_folder(
        folder, base=str(base), latent=latent, tokenizer=tokenizer, settings={}
    )


# ---------------------------------------------------------------------------------------------
# Throughput


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def tokens_per_second(encoder: Any, length: int, run: Run) -> dict[str, Any]:
    """Encode batches of texts of `length` content tokens for at least `run.min_seconds`."""
    batch = max(1, run.tokens_per_call // length)
    texts = texts_of(length, batch)
    counted = encoder.count_tokens(texts[:1])[0]
    encoder.encode_documents(texts[:1])  # warm-up: kernels, allocator, lazy init
    sync(run.device)
    calls, start = 0, time.perf_counter()
    while calls < 2 or (time.perf_counter() - start < run.min_seconds and calls < 50):
        vectors = encoder.encode_documents(texts)
        calls += 1
    sync(run.device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30 if run.device.startswith("cuda") else 0.0
    return {
        "tokens": length,
        "counted_tokens": counted,
        "batch": batch,
        "calls": calls,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(calls * batch * length / seconds, 1),
        "dim": int(vectors.shape[1]),
        "peak_gib": round(peak, 2),
    }


@dataclass
class Case:
    """One encoder family on one model shape; `options(length_cap)` builds its get_encoder kwargs."""

    encoder: str
    shape: str
    options: Callable[[int], dict[str, Any]]
    overhead: int = 0  # special tokens the encoder adds (M2: [CLS] and [SEP])


def cases(folders: dict[str, Path], run: Run) -> list[Case]:
    dev, budget, cap = run.device, run.tokens_per_call, max(run.lengths)
    bf16 = "float32" if run.smoke else "bfloat16"
    smol = "tiny-llama" if run.smoke else "smollm2-135m"
    layers = [0, 1] if run.smoke else [9, 12]
    return [
        Case(
            "m2-bert",
            "tiny" if run.smoke else "m2-bert-80M",
            lambda _: {
                "model": str(folders["m2"]),
                "padding": "pow2",
                "dtype": bf16,
                "device": dev,
                "tokens_per_batch": budget,
            },
            overhead=2,
        ),
        Case(
            "kv-embedding",
            smol,
            lambda _: {
                "model": str(folders["smol"]),
                "layers": layers,
                "max_tokens": cap,
                "device": dev,
                "token_budget": budget,
            },
        ),
        Case(
            "llm2vec",
            smol,
            lambda _: {
                "model": str(folders["smol"]),
                "pooling": "mean",
                "max_length": cap + 16,
                "doc_max_length": cap,
                "dtype": bf16,
                "device": dev,
                "batch_size": max(1, budget // min(run.lengths)),
            },
        ),
        Case(
            "nv-embed",
            smol,
            lambda _: {
                "model": str(folders["smol"]),
                "adapter": str(folders["nv"]),
                "max_length": cap + 16,
                "dtype": bf16,
                "device": dev,
                "batch_size": max(1, budget // min(run.lengths)),
            },
        ),
        Case(
            "kv-embedding",
            "tiny-llama-2" if run.smoke else "gemma-3-270m",
            lambda _: {
                "model": str(folders["gemma"]),
                "layers": layers,
                "max_tokens": cap,
                "device": dev,
                "token_budget": budget,
            },
        ),
    ]


def measure_case(case: Case, run: Run) -> list[dict[str, Any]]:
    """One row per length; a row with `skipped` says why a length or the whole case did not run."""
    base = {"encoder": case.encoder, "shape": case.shape}
    try:
        encoder = get_encoder(case.encoder, **case.options(max(run.lengths)))
    except Exception as exc:  # noqa: BLE001 - missing family, refused option: report, go on
        return [{**base, "skipped": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}]
    rows = []
    for length in run.lengths:
        if run.time_left() <= 0:
            rows.append({**base, "tokens": length, "skipped": "time budget spent"})
            continue
        try:
            rows.append({**base, **tokens_per_second(encoder, length - case.overhead, run)})
            rows[-1]["tokens"] = length
        except torch.cuda.OutOfMemoryError:
            rows.append({**base, "tokens": length, "skipped": "out of GPU memory"})
        except Exception as exc:  # noqa: BLE001 - keep measuring the others
            rows.append({**base, "tokens": length, "skipped": f"{type(exc).__name__}: {exc}"[:300]})
        if run.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    del encoder
    return rows


# ---------------------------------------------------------------------------------------------
# Efficiency: the decoders' plain forward against the measured matmul rate


FORWARD_LENGTHS = (512, 2048, 8192)  # issue 4's lengths


def plain_forward(folders: dict[str, Path], run: Run, peak: float) -> list[dict[str, Any]]:
    """TFLOP/s of each decoder's plain forward (SDPA, bf16; what KV-Embedding costs 1.00x of)
    and its share of the measured bf16 matmul rate. FLOPs: decoder_speed's count (linear
    layers and causal attention, sliding windows honoured; no LM head)."""
    from transformers import AutoModel

    from benchmarks.decoder_speed import attention_flops, linear_flops

    dtype = torch.float32 if run.smoke else torch.bfloat16
    lengths = run.lengths if run.smoke else FORWARD_LENGTHS
    rows = []
    names = ("tiny-llama", "tiny-llama-2") if run.smoke else ("smollm2-135m", "gemma3-270m")
    for key, shape in zip(("smol", "gemma"), names, strict=True):
        model = AutoModel.from_pretrained(
            str(folders[key]), dtype=dtype, attn_implementation="sdpa"
        )
        model = model.to(run.device).eval()
        for length in lengths:
            if run.time_left() <= 0:
                rows.append({"shape": shape, "tokens": length, "skipped": "time budget spent"})
                continue
            batch = max(1, run.tokens_per_call // length)
            seconds = _time_forward(model, batch, length, run)
            flops = linear_flops(model.config, batch, length)
            flops += attention_flops(model.config, batch, length)
            tflops = flops / seconds / 1e12
            rows.append({"shape": shape, "tokens": length, "batch": batch,
                         "seconds_per_call": round(seconds, 4), "tflops": round(tflops, 1),
                         "peak_tflops": peak,  # rounds to 0 on a busy CPU: no share then
                         "share_of_peak": round(tflops / peak, 3) if peak else None})  # fmt: skip
        del model
        if run.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def _time_forward(model: Any, batch: int, length: int, run: Run) -> float:
    """Seconds per forward of `batch` rows of `length` random tokens (mean over >= 3 calls)."""
    ids = torch.randint(10, model.config.vocab_size - 1, (batch, length), device=run.device)
    with torch.inference_mode():
        model(input_ids=ids)  # warm-up
        sync(run.device)
        calls, start = 0, time.perf_counter()
        while calls < 3 or (time.perf_counter() - start < run.min_seconds and calls < 50):
            model(input_ids=ids)
            calls += 1
        sync(run.device)
    return (time.perf_counter() - start) / calls


# ---------------------------------------------------------------------------------------------
# Agreement: SDPA backends and flash-attn on random q/k/v; LLM2Vec sdpa vs flash_attention_2


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, backend: Any
) -> torch.Tensor:
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([backend]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def kernel_agreement(run: Run) -> list[dict[str, Any]]:
    """Max |difference| of attention outputs against torch's memory-efficient SDPA kernel."""
    rows = []
    for heads, head_dim in ((9, 64), (4, 256)):  # SmolLM2-135M, Gemma-3-270M
        for length in (512, 2048, 8192):
            for causal in (True, False):
                rows += _kernels_on(heads, head_dim, length, causal, run.device)
    return rows


def _kernels_on(
    heads: int, head_dim: int, length: int, causal: bool, device: str
) -> list[dict[str, Any]]:
    from torch.nn.attention import SDPBackend

    torch.manual_seed(length)
    shape = (1, heads, length, head_dim)  # (batch, heads, seq, dim)
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(3))
    reference = _sdpa(q, k, v, causal, SDPBackend.EFFICIENT_ATTENTION).float()
    others = {"sdpa-flash": functools.partial(_sdpa, q, k, v, causal, SDPBackend.FLASH_ATTENTION)}
    if length <= 2048:  # the fp32 math kernel materialises (seq, seq) scores
        fp32 = (q.float(), k.float(), v.float())
        others["sdpa-math-fp32"] = functools.partial(_sdpa, *fp32, causal, SDPBackend.MATH)
    if flash_attn_available(device):
        others["flash-attn"] = functools.partial(_flash_attn, q, k, v, causal)
    rows = []
    for name, compute in others.items():
        row: dict[str, Any] = {
            "kernel": name,
            "heads": heads,
            "head_dim": head_dim,
            "tokens": length,
            "causal": causal,
        }
        try:
            row["max_abs_diff"] = float((compute().float() - reference).abs().max())
        except Exception as exc:  # noqa: BLE001 - a backend may not take this shape
            row["skipped"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        rows.append(row)
    return rows


def _flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    from flash_attn import flash_attn_func  # type: ignore[import-not-found]

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    return out.transpose(1, 2)  # (batch, heads, seq, dim) like SDPA


def encoder_agreement(folders: dict[str, Path], run: Run) -> list[dict[str, Any]]:
    """LLM2Vec and NV-Embed (bidirectional: flash runs with is_causal=False) embeddings under
    `sdpa` vs `flash_attention_2`; KV-Embedding keeps SDPA (its prefix bias needs a mask)."""
    rows = []
    for name in ("llm2vec", "nv-embed"):
        row: dict[str, Any] = {"encoder": name, "shape": "smollm2-135m", "tokens": 512}
        if not flash_attn_available(run.device):
            why = "not installed" if not flash_attn_installed() else "no CUDA GPU of capability 8+"
            rows.append({**row, "skipped": f"flash-attn {why}; see the sdpa-flash kernel rows"})
            continue
        try:
            rows.append({**row, **_sdpa_vs_flash(name, folders, run.device)})
        except Exception as exc:  # noqa: BLE001 - report and go on
            rows.append({**row, "skipped": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]})
    return rows


def _sdpa_vs_flash(name: str, folders: dict[str, Path], device: str) -> dict[str, float]:
    texts = texts_of(512, 8)
    vectors = {}
    for attn in ("sdpa", "flash_attention_2"):
        options = {"model": str(folders["smol"]), "max_length": 600, "dtype": "bfloat16"}
        options["device"] = device
        if name == "nv-embed":
            options["adapter"] = str(folders["nv"])
        options["attn_implementation"] = attn
        vectors[attn] = get_encoder(name, **options).encode_documents(texts)
    diff = abs(vectors["sdpa"] - vectors["flash_attention_2"])
    cosines = (vectors["sdpa"] * vectors["flash_attention_2"]).sum(axis=1)
    return {"max_abs_diff": float(diff.max()), "min_cosine": float(cosines.min())}


# ---------------------------------------------------------------------------------------------
# Hardware, output


def matmul_tflops(device: str, n: int = 8192, dtype: torch.dtype = torch.bfloat16) -> float:
    """Measured matmul rate (n^3, bf16 by default), the ceiling the throughput numbers sit under."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    sync(device)
    return round(10 * 2 * n**3 / (time.perf_counter() - start) / 1e12, 1)


def hardware(run: Run) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "flash_attn_installed": flash_attn_installed(),
    }
    if run.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            bf16_matmul_tflops=matmul_tflops(run.device),
        )
    else:
        info["cpu"] = platform.processor() or platform.machine()
    return info


def _forward_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "## Plain forward: share of the measured bf16 matmul rate",
        "",
        "| decoder | tokens | batch | s / call | TFLOP/s | matmul peak TFLOP/s | share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['shape']} | {r['tokens']} | {r['skipped']} | | | | |")
            continue
        lines.append(
            f"| {r['shape']} | {r['tokens']} | {r['batch']} | {r['seconds_per_call']} | "
            f"{r['tflops']} | {r['peak_tflops']} | {r['share_of_peak']:.0%} |"
        )
    return lines


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# GPU throughput and attention agreement",
        "",
        f"Date: {report['date']}. Command: `{report['command']}`.",
        f"Hardware: {json.dumps(report['hardware'])}.",
        "Random weights in released shapes; tokens/s counts content tokens of the inputs.",
        "",
        "| encoder | shape | " + " | ".join(f"{n} tok/s" for n in report["lengths"]) + " |",
        "|---|---|" + "---:|" * len(report["lengths"]),
    ]
    groups: dict[tuple[str, str], dict[int, str]] = {}
    for row in report["throughput"]:
        cell = f"{row['tokens_per_s']:,.0f}" if "tokens_per_s" in row else "skipped"
        groups.setdefault((row["encoder"], row["shape"]), {})[row.get("tokens", 0)] = cell
    for (name, shape), cells in groups.items():
        row_cells = [cells.get(n, cells.get(0, "skipped")) for n in report["lengths"]]
        lines.append(f"| {name} | {shape} | " + " | ".join(row_cells) + " |")
    skipped = [r for r in report["throughput"] if "skipped" in r]
    if skipped:
        lines += ["", "Skipped:"] + [
            f"- {r['encoder']} ({r['shape']}, {r.get('tokens', 'all')}): {r['skipped']}"
            for r in skipped
        ]
    lines += _forward_lines(report.get("plain_forward", []))
    lines += [
        "",
        "## Agreement (max abs difference)",
        "",
        "| what | shape | tokens | causal | max abs diff |",
        "|---|---|---:|---|---:|",
    ]
    for row in report["agreement"]:
        what = row.get("kernel") or row.get("encoder")
        shape = f"{row['heads']}x{row['head_dim']}" if "heads" in row else row.get("shape", "")
        value = f"{row['max_abs_diff']:.2e}" if "max_abs_diff" in row else row.get("skipped", "")
        lines.append(f"| {what} | {shape} | {row['tokens']} | {row.get('causal', '')} | {value} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (tests)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.smoke:
        print(
            f"gpu.py: skipped: torch {torch.__version__} sees no CUDA device on this machine; "
            "run `python benchmarks/gpu.py` on a GPU machine (see docs/scale.md)"
        )
        return 0
    run = Run(
        device="cpu" if args.smoke else "cuda",
        lengths=(32, 64) if args.smoke else tuple(args.lengths),
        tokens_per_call=256 if args.smoke else TOKENS_PER_CALL,
        min_seconds=0.05 if args.smoke else 1.5,
        budget_s=args.budget_s,
        smoke=args.smoke,
    )
    report = benchmark(run)
    report["command"] = "python benchmarks/gpu.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "gpu.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def benchmark(run: Run) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="docsearch-gpu-"))
    try:
        folders = build_models(work, run)
        info = hardware(run)  # measures the matmul rate once; smoke: a tiny fp32 one
        peak = info.get("bf16_matmul_tflops") or matmul_tflops(run.device, 256, torch.float32)
        forward = plain_forward(folders, run, peak)
        throughput = [row for case in cases(folders, run) for row in measure_case(case, run)]
        agreement = kernel_agreement(run) if run.device.startswith("cuda") else []
        agreement += encoder_agreement(folders, run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "hardware": info,
        "run": {k: v for k, v in asdict(run).items() if k != "started"},
        "lengths": list(run.lengths),
        "throughput": throughput,
        "plain_forward": forward,
        "agreement": agreement,
        "seconds": round(time.perf_counter() - run.started, 1),
    }


def build_models(work: Path, run: Run) -> dict[str, Path]:
    positions = max(run.lengths) + 64
    smol = TINY_DECODER if run.smoke else SMOLLM2_135M
    gemma = TINY_DECODER if run.smoke else GEMMA3_270M
    folders = {
        "smol": save_random_decoder(work / "smol", smol, positions),
        "gemma": save_random_decoder(work / "gemma", gemma, positions),
    }
    builders = {
        "m2": lambda: save_random_m2(work / "m2", run.smoke),
        "nv": lambda: save_random_nv_adapter(work / "nv", folders["smol"], run.smoke),
    }
    for key, build in builders.items():
        try:
            folders[key] = build()
        except Exception as exc:  # noqa: BLE001 - module missing or changed: its case skips
            print(f"gpu.py: cannot build {key} ({type(exc).__name__}: {exc})", file=sys.stderr)
            folders[key] = work / f"{key}-missing"
    return folders


if __name__ == "__main__":
    raise SystemExit(main())
