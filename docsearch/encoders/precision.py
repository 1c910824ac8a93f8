"""The precision an encoder runs inference in on the CPU: fp32, bf16 where it is faster, or int8.

`PRECISIONS`: "auto" (the default), "fp32", "bf16", "int8". "auto" is the fastest precision
whose vectors stay within the quality gate (mean cosine >= 0.999 to fp32; bf16 measured 0.99995
for MiniLM, benchmarks/results/speed.md): bf16 on a CPU that has native bf16 instructions *and*
runs the model faster in it, fp32 everywhere else. The flags alone do not decide, because a CPU
can have the instructions while the kernels torch picks for the whole model (not just its
matmuls) are slower; so `choose_precision` times both on a short fixed batch once per machine,
model and thread count, and caches the answer under the docsearch cache (a second process, or a
second encoder in this one, reads it instead of measuring again). GPUs keep fp32 (not measured).
int8 (dynamic quantisation of the Linear layers, per output channel) is never chosen by "auto":
it is about 2x faster on a 2-core AMD EPYC but measured a mean cosine of 0.98 to fp32, so it is
an explicit, lossier choice whose quality is reported beside the speed.

`convert(module, precision)` makes the inference copy. Not here: which device (device.py),
batching (batching.py), the models themselves.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from docsearch.encoders.device import cpu_has_fast_bf16
from docsearch.errors import UsageError

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16", "int8")
_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "qint8": "int8"}
# bf16 must beat fp32 by this much to be chosen: timing a short batch on a shared machine is
# noisy, and a precision that is only as fast is not worth its (small) change to the vectors.
MIN_SPEEDUP = 1.15
# The gate every automatic choice keeps (the issue's: mean cosine to fp32 vectors).
MIN_COSINE = 0.999
ROUNDS = 2  # interleaved fp32/bf16 rounds; each precision is scored by its fastest round

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

    bf16 casts the weights; int8 replaces every `nn.Linear` by a dynamically quantised one with
    per-output-channel weight scales (per-tensor scales measured a cosine of 0.93 to fp32 on
    MiniLM, per-channel 0.98). Without `in_place` the caller's module is left untouched.
    """
    import torch

    if precision == "fp32":
        return module
    target = module if in_place else copy.deepcopy(module)
    if precision == "bf16":
        return target.to(torch.bfloat16)
    if precision == "int8":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        spec = {torch.nn.Linear: per_channel_dynamic_qconfig}
        with warnings.catch_warnings():  # torch's notes that this API moves to torchao
            warnings.simplefilter("ignore", (UserWarning, DeprecationWarning, FutureWarning))
            return quantize_dynamic(target, spec, dtype=torch.qint8, inplace=True)
    raise UsageError(f"no conversion to precision {precision!r}")


def calibration_key(model_name: str, threads: int, sample: Sequence[str]) -> dict[str, Any]:
    """What the automatic choice depends on: the CPU, torch, the threads, the model and the
    batch it is timed on."""
    import torch

    return {
        "sample": hashlib.sha256("\x1e".join(sample).encode()).hexdigest()[:12],
        "cpu": _cpu_model(),
        "flags": _cpu_flags_digest(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "threads": threads,
        "model": model_name,
    }


def choose_precision(
    device: str, key: dict[str, Any], measure: Callable[[], dict[str, float]]
) -> str:
    """ "bf16" or "fp32" for "auto" on `device`: fp32 off the CPU and on CPUs without native
    bf16; otherwise `measure()` ({"fp32_s", "bf16_s", "cosine"}) decides, once per `key`."""
    if device != "cpu" or not cpu_has_fast_bf16():
        return "fp32"
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    if digest in _CHOSEN:
        return _CHOSEN[digest]
    path = _cache_path(digest)
    try:
        choice = str(json.loads(path.read_text())["choice"])
    except (OSError, ValueError, KeyError, TypeError):
        choice = _calibrate(key, measure, path)
    _CHOSEN[digest] = check_precision(choice)
    return _CHOSEN[digest]


def decide(measured: dict[str, float]) -> str:
    """bf16 when it keeps the cosine gate and is at least MIN_SPEEDUP times faster."""
    fast = measured["bf16_s"] * MIN_SPEEDUP <= measured["fp32_s"]
    return "bf16" if fast and measured["cosine"] >= MIN_COSINE else "fp32"


def _calibrate(key: dict[str, Any], measure: Callable[[], dict[str, float]], path: Path) -> str:
    started = time.monotonic()
    measured = measure()
    choice = decide(measured)
    log.info(
        "precision for %s on this CPU: %s (fp32 %.3f s, bf16 %.3f s, cosine %.5f; %.1f s, once)",
        key["model"],
        choice,
        measured["fp32_s"],
        measured["bf16_s"],
        measured["cosine"],
        time.monotonic() - started,
    )
    record = {**key, **measured, "choice": choice}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{time.monotonic_ns()}.tmp")  # two processes may race here
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(path)
    except OSError as exc:  # a read-only cache costs a calibration per process, nothing more
        log.warning("could not cache the precision choice in %s: %s", path, exc)
    return choice


def time_precisions(run: Callable[[Any], Any], fp32: Any, bf16: Any) -> dict[str, float]:
    """Fastest of ROUNDS interleaved runs of `run(model)` for each model, and the mean cosine
    of their outputs (unit rows are not assumed). `run` must return a 2-d tensor."""
    import torch

    best = {"fp32_s": float("inf"), "bf16_s": float("inf")}
    outputs: dict[str, Any] = {}
    with torch.inference_mode():
        run(fp32), run(bf16)  # first calls pay for kernel set-up
        for _ in range(ROUNDS):
            for name, model in (("fp32_s", fp32), ("bf16_s", bf16)):
                start = time.perf_counter()
                outputs[name] = run(model).float()
                best[name] = min(best[name], time.perf_counter() - start)
    cosine = torch.nn.functional.cosine_similarity(outputs["fp32_s"], outputs["bf16_s"], dim=1)
    return best | {"cosine": float(cosine.mean())}


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
