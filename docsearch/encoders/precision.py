"""The precision (and engine) an encoder runs inference in on the CPU, whichever is fastest.

`PRECISIONS`: "auto" (the default), "fp32", "bf16", "int8" (torch), and for a BERT folder
(MiniLM) "onnx-fp32" and "onnx-int8" (ONNX Runtime, `onnx_backend.py`, with the `onnx` extra).
"auto" is the fastest candidate whose vectors stay within the quality gate (mean cosine >= 0.999
to torch fp32): bf16 where the CPU
has native bf16 instructions (MiniLM measured 0.99995), int8 (`int8.py`: per-token activations,
smoothing and fp32 outlier channels; MiniLM measured 0.9993-0.9995) where an exact int8 kernel
runs (int8 dot-product instructions, or fbgemm's 7-bit kernels on other x86 CPUs), fp32 when
neither is at least MIN_SPEEDUP faster; ONNX Runtime's fp32 or int8 where it wins by as much.
Of two that are within MIN_SPEEDUP of each other, the more faithful one wins (`decide`). The
flags alone do not decide, because the kernels picked for the whole model (not just its
matmuls) may be slower; so `choose_precision` times the candidates against fp32 once per
machine, model, thread count and ISA caps (`device.ISA_CAPS`), each run as indexing runs it
(full windows, its batch size, the encoder's workers and threads: `indexing_shape.py`), checks
their cosine to fp32 on it, and caches the answer under the docsearch cache (a second process,
or a second encoder in this one, reads it instead of measuring again). GPUs keep fp32.

Noise (`time_precisions`, `timing.py`): the candidates are timed in interleaved rounds and
scored by their medians; rounds are added while the verdict is not `confident` (it must hold
with every median moved NOISE_Z standard errors either way) or the machine looked busy. A
verdict that never became confident, or was timed while other processes crowded out most runs
(`crowded`), is used but cached as provisional: the next process measures again, up to
PROVISIONAL_TRIES times, after which the last one is kept.

`convert(module, precision)` makes the inference copy. Not here: which device (device.py),
batching (batching.py), the models themselves, the int8 layers (int8.py).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import logging
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docsearch.encoders.device import cpu_has_fast_bf16, isa_caps
from docsearch.encoders.timing import Clock
from docsearch.errors import UsageError

log = logging.getLogger(__name__)
# What a user waits for and should hear of without --verbose (the CLI shows this logger's INFO):
# timing the candidates takes 20-110 s on 2 cores the first time a model runs on a machine,
# which a progress line stuck at "0 chunks embedded" would leave unexplained.
notice = logging.getLogger("docsearch.notice")

PRECISIONS = ("auto", "fp32", "bf16", "int8", "onnx-fp32", "onnx-int8")
ONNX_PRECISIONS = ("onnx-fp32", "onnx-int8")
_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "qint8": "int8"}
# A precision must beat fp32 by this much to be chosen, and the less faithful of two must beat
# the other by as much: timing a short batch on a shared machine is noisy, and a precision
# that is only as fast is not worth its (small) change to the vectors.
MIN_SPEEDUP = 1.15
# The gate every automatic choice keeps (the issue's: mean cosine to fp32 vectors).
MIN_COSINE = 0.999
# A verdict is confident when it holds with every candidate's median moved this many of its
# standard errors either way (a ratio of two medians then moves ~2.1 of its own: ~97% one-sided).
NOISE_Z = 1.5
PROVISIONAL_TRIES = 3  # processes that measure again after a verdict that was not confident
# Part of the cache key: choices cached before int8 could be chosen (1), before it ran on CPUs
# without int8 dot products (2), made from one timing of each (3), timed on one short batch
# with all threads instead of as indexing runs each candidate (4), or before the int8 "dot"
# kernel's per-token scales stopped costing a fresh |x| tensor (5: int8 ~8% slower, enough to
# fall under MIN_SPEEDUP where it was close) are measured again.
CHOICE_VERSION = 6

# What `models list` and `doctor` say before any choice was made on this machine.
NOT_CHOSEN = "not chosen yet (precision=auto times the candidates at a model's first index run)"

# `choose_precision` answers once per process and key (tests and the UI build many encoders).
_CHOSEN: dict[str, str] = {}


def check_precision(requested: str | None) -> str:
    """The canonical name of a precision, or a UsageError listing them."""
    name = (requested or "auto").strip().lower()
    name = _ALIASES.get(name, name)
    if name not in PRECISIONS:
        raise UsageError(f"unknown precision {requested!r}; use one of: {', '.join(PRECISIONS)}")
    return name


def convert(module: Any, precision: str, *, in_place: bool = False) -> Any:
    """`module` for inference in `precision` ("fp32" returns it as it is).

    bf16 casts the weights; int8 replaces every `nn.Linear` by an `Int8Linear` calibrated on the
    built-in sample (the module must have `preprocess`, as sentence-transformers models do).
    Without `in_place` the caller's module is left untouched.
    """
    import torch

    if precision == "fp32":
        return module
    target = module if in_place else copy.deepcopy(module)
    if precision == "bf16":
        return target.to(torch.bfloat16)
    if precision == "int8":
        from docsearch.encoders.int8 import quantise
        from docsearch.encoders.sample_texts import windows

        def run_sample(model: Any) -> Any:
            return model(model.preprocess(windows()))

        return quantise(target, run_sample)
    raise UsageError(f"no conversion to precision {precision!r}")


def calibration_key(model_name: str, threads: int, sample: Sequence[str]) -> dict[str, Any]:
    """What the automatic choice depends on: the CPU, torch, the threads, the model and the
    batch it is timed on."""
    import torch

    return {
        "sample": hashlib.sha256("\x1e".join(sample).encode()).hexdigest()[:12],
        "cpu": _cpu_model(),
        "flags": _cpu_flags_digest(),
        "isa_caps": isa_caps(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "threads": threads,
        "model": model_name,
        "version": CHOICE_VERSION,
    }


def candidates(device: str, onnx: bool = False) -> list[str]:
    """The precisions "auto" may choose besides fp32 on `device`: none off the CPU; int8 where
    an exact int8 kernel runs (`int8.kernel_here`); bf16 on CPUs with native bf16 instructions;
    with `onnx` (a model ONNX Runtime can run) and the `onnx` extra installed, ONNX_PRECISIONS."""
    if device != "cpu":
        return []
    names = (["int8"] if int8_available() else []) + (["bf16"] if cpu_has_fast_bf16() else [])
    return names + (list(ONNX_PRECISIONS) if onnx and onnx_available() else [])


def onnx_available() -> bool:
    from docsearch.encoders.onnx_backend import available

    return available()


def engine(precision: str) -> str:
    """Which engine runs `precision`, in words: "onnxruntime int8", "torch bf16"."""
    if precision in ONNX_PRECISIONS:
        return "onnxruntime " + precision.removeprefix("onnx-")
    return "torch " + precision


def int8_available() -> bool:
    """int8 runs exact here: with int8 dot-product instructions (`torch._int_mm`), or through
    fbgemm's 7-bit kernels on other x86 CPUs (`int8.kernel_here`)."""
    from docsearch.encoders.int8 import kernel_here

    return kernel_here() is not None


Measure = Callable[[Sequence[str]], dict[str, dict[str, float]]]


def choose_precision(
    device: str, key: dict[str, Any], measure: Measure, onnx: bool = False, label: str = ""
) -> str:
    """The precision "auto" runs in on `device`: fp32 when there is no candidate, otherwise what
    `measure(candidates)` ({name: {"seconds", "cosine"[, "noise"]}}, fp32 included) decides,
    once per `key` and candidate list (a provisional verdict: see the module docstring)."""
    found = _lookup(device, key, onnx)
    if found.final is not None:
        return found.final
    tries = found.cached[1] if found.cached else 0
    choice = _calibrate(found.key, lambda: measure(found.names), found.path, tries + 1, label)
    _CHOSEN[found.digest] = check_precision(choice)
    return _CHOSEN[found.digest]


def cached_precision(device: str, key: dict[str, Any], onnx: bool = False) -> str | None:
    """What `choose_precision` would answer without measuring anything: its verdict where one is
    known (a provisional one as it stands), None where it would have to time the candidates."""
    found = _lookup(device, key, onnx)
    if found.final is not None:
        return found.final
    return check_precision(found.cached[0]) if found.cached else None


@dataclass(frozen=True)
class _Lookup:
    names: list[str]  # the candidates besides fp32
    key: dict[str, Any]  # the cache key, candidates included
    digest: str
    path: Path
    final: str | None  # the verdict, where nothing needs measuring
    cached: tuple[str, int] | None  # a cached verdict to measure again: (choice, tries)


def _lookup(device: str, key: dict[str, Any], onnx: bool) -> _Lookup:
    names = candidates(device, onnx)
    key = {**key, "candidates": names}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = _cache_path(digest)
    if not names:
        return _Lookup(names, key, digest, path, "fp32", None)
    if digest in _CHOSEN:
        return _Lookup(names, key, digest, path, _CHOSEN[digest], None)
    try:
        cached = json.loads(path.read_text())
        choice, tries = str(cached["choice"]), int(cached.get("tries", 1))
    except (OSError, ValueError, KeyError, TypeError):
        return _Lookup(names, key, digest, path, None, None)
    if not cached.get("confident", True) and tries < PROVISIONAL_TRIES:
        return _Lookup(names, key, digest, path, None, (choice, tries))
    _CHOSEN[digest] = check_precision(choice)
    return _Lookup(names, key, digest, path, _CHOSEN[digest], None)


def decide(measured: dict[str, dict[str, float]]) -> str:
    """The precision "auto" runs in: of those that keep the cosine gate and are at least
    MIN_SPEEDUP times faster than fp32, the most faithful one within MIN_SPEEDUP of the
    fastest (bf16 over an int8 that is only as fast); fp32 when none is."""
    reference = measured["fp32"]["seconds"]
    passing = {
        name: found
        for name, found in measured.items()
        if name != "fp32"
        and found["cosine"] >= MIN_COSINE
        and found["seconds"] * MIN_SPEEDUP <= reference
    }
    if not passing:
        return "fp32"
    fastest = min(found["seconds"] for found in passing.values())
    near = [(-f["cosine"], n) for n, f in passing.items() if f["seconds"] <= fastest * MIN_SPEEDUP]
    return min(near)[1]


def confident(measured: dict[str, dict[str, float]]) -> bool:
    """`decide`'s verdict holds at every corner of the noise box: each candidate's seconds moved
    NOISE_Z times its relative "noise" (0 where not given) up or down."""
    verdict = decide(measured)
    names = list(measured)
    for signs in itertools.product((-1.0, 1.0), repeat=len(names)):
        moved = {
            name: {
                **found,
                "seconds": found["seconds"] * (1 + sign * NOISE_Z * found.get("noise", 0.0)),
            }
            for (name, found), sign in zip(measured.items(), signs, strict=True)
        }
        if decide(moved) != verdict:
            return False
    return True


def crowded(measured: dict[str, dict[str, float]]) -> bool:
    """Most timed runs were crowded out by other processes. Under such a load the order can
    change (MiniLM, 2 cores, a 2-process load: torch bf16 fell from ~3.4x fp32 to ~1.4x, ONNX
    Runtime fp32 kept 1.7-2.3x: benchmarks/results/auto_choice.md): the verdict is provisional."""
    busy = sum(found.get("busy_runs", 0) for found in measured.values())
    return busy > sum(found.get("quiet_runs", busy) for found in measured.values())


def _calibrate(
    key: dict[str, Any],
    measure: Callable[[], dict[str, dict[str, float]]],
    path: Path,
    tries: int,
    label: str = "",
) -> str:
    started = time.monotonic()
    label = label or key["model"]
    notice.info(
        "%s: timing %s against torch fp32 to choose the fastest precision for this CPU "
        "(once per machine; about a minute)", label, ", ".join(key.get("candidates", [])),
    )  # fmt: skip
    measured = measure()
    choice = decide(measured)
    sure = confident(measured) and not crowded(measured)
    notice.info(
        "%s: precision=auto runs %s here%s%s", label, engine(choice), _speedup(measured, choice),
        "" if sure else " (timed while the machine was busy: timed again next run)",
    )  # fmt: skip
    found = ", ".join(
        f"{name} {m['seconds']:.3f} s" + (f" cosine {m['cosine']:.5f}" if name != "fp32" else "")
        for name, m in measured.items()
    )
    log.info(
        "precision for %s on this CPU: %s (%s; %.1f s, %s)",
        key["model"], choice, found, time.monotonic() - started,
        "once" if sure else f"provisional, try {tries} of {PROVISIONAL_TRIES}",
    )  # fmt: skip
    record = {**key, "measured": measured, "choice": choice, "confident": sure, "tries": tries}
    record |= {"label": label, "engine": engine(choice)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{time.monotonic_ns()}.tmp")  # two processes may race here
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(path)
    except OSError as exc:  # a read-only cache costs a calibration per process, nothing more
        log.warning("could not cache the precision choice in %s: %s", path, exc)
    return choice


def _speedup(measured: dict[str, dict[str, float]], choice: str) -> str:
    """The choice's speed in words, " (1.85x torch fp32)"; nothing for fp32 itself."""
    if choice == "fp32":
        return ""
    return f" ({measured['fp32']['seconds'] / measured[choice]['seconds']:.2f}x torch fp32)"


def time_precisions(
    run: Callable[[Any], Any], models: dict[str, Any], clock: Clock | None = None
) -> dict[str, dict[str, float]]:
    """{name: {"seconds", "noise", "cosine", "runs", "busy_runs"}} for each of `models` (which
    holds "fp32", the reference): the median wall seconds of `run(model)` over interleaved
    rounds (`timing.interleaved`, until `confident` or out of rounds or time), its relative
    standard error, and the mean cosine of the output to fp32's (unit rows are not assumed).
    A candidate whose first output already fails the gate cannot be chosen, so it is not timed
    again: its seconds are its first (set-up) call's, with "runs" 0. `run` must return a
    2-d tensor."""
    import torch

    from docsearch.encoders.timing import interleaved

    clock = clock or Clock()
    with torch.inference_mode():
        # first calls pay for kernel set-up; their outputs give the cosines
        first: dict[str, float] = {}
        outputs = {}
        for name, model in models.items():
            started = clock.wall()
            outputs[name] = run(model).float()
            first[name] = clock.wall() - started
        cosine = torch.nn.functional.cosine_similarity
        cosines = {
            name: {"cosine": float(cosine(outputs["fp32"], out, dim=1).mean())}
            for name, out in outputs.items()
        }
        timed = [n for n in models if n == "fp32" or cosines[n]["cosine"] >= MIN_COSINE]

        def settled(medians: dict[str, float], noise: dict[str, float]) -> bool:
            found = {n: {"seconds": medians[n], "noise": noise[n], **cosines[n]} for n in timed}
            return confident(found)

        timings = interleaved(
            lambda name: run(models[name]), timed, settled, torch.get_num_threads(), clock
        )
    untimed = {"noise": 0.0, "runs": 0, "busy_runs": 0, "quiet_runs": 0}
    return {
        name: {"seconds": first[name], **cosines[name], **untimed, "cpu_seconds": 0.0}
        if name not in timed
        else {
            "seconds": timings.median(name),
            "noise": timings.noise(name),
            **cosines[name],
            "runs": len(timings.runs(name)),
            "busy_runs": len(timings.busy[name]),
            "cpu_seconds": statistics.median(timings.cpu[name]),
            "quiet_runs": len(timings.quiet[name]),
        }
        for name in models
    }


def cached_choices() -> list[dict[str, Any]]:
    """The choices "auto" made on this machine (this CPU, its flags, ISA caps and torch), as
    cached: {"label" (the model), "threads", "choice", "engine", "confident", "measured"}; read
    without importing torch (for `doctor` and `models list`)."""
    from importlib.metadata import PackageNotFoundError, version

    from docsearch.config import cache_home

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        return []
    here: dict[str, Any] = {"cpu": _cpu_model(), "flags": _cpu_flags_digest()}
    here["isa_caps"] = isa_caps()
    here |= {"machine": platform.machine(), "version": CHOICE_VERSION}
    found = []
    for path in sorted((cache_home() / "calibration").glob("precision-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or "choice" not in record:
            continue
        if (
            all(record.get(k) == v for k, v in here.items())
            and record.get("torch") == torch_version
        ):
            record.setdefault("label", record.get("model", "?"))
            record.setdefault("engine", engine(str(record["choice"])))
            found.append(record)
    return found


def describe_choices() -> list[str]:
    """One line per cached choice: "all-MiniLM-L6-v2, 2 threads: torch bf16 (...); short queries:
    onnxruntime fp32" (the last part where the model's short queries run there: short_query.py)."""
    lines = []
    for record in cached_choices():
        measured = record.get("measured", {})
        chosen = measured.get(record["choice"], {}).get("seconds")
        fp32 = measured.get("fp32", {}).get("seconds")
        speed = f", {fp32 / chosen:.2f}x torch fp32" if chosen and fp32 else ""
        sure = "" if record.get("confident", True) else ", provisional"
        # A model ONNX Runtime can run (it was a candidate) encodes short queries there.
        short = (
            "; short queries: onnxruntime fp32"
            if "onnx-fp32" in record.get("candidates", [])
            else ""
        )
        lines.append(
            f"{record['label']}, {record.get('threads')} threads: {record['engine']} "
            f"(precision=auto{speed}{sure}){short}"
        )
    return lines


def _cache_path(digest: str) -> Path:
    from docsearch.config import cache_home

    return cache_home() / "calibration" / f"precision-{digest}.json"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags_digest() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return hashlib.sha256(flags.encode()).hexdigest()[:12]
