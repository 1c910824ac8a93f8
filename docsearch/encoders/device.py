"""Where an encoder runs and in which precision: device, dtype and attention kernel choice.

`resolve_device(None)` gives "cuda" when torch sees a GPU, else "cpu"; an explicit "cuda" on a
machine without one fails with one line (`EncoderUnavailableError`), never with a CUDA traceback
from deep inside torch. `resolve_dtype` gives bf16 where `fast_bf16(device)` says the hardware
runs it natively (GPUs with bf16; CPUs with AVX512-BF16, AMX or Arm BF16), fp32 otherwise.
`resolve_attention` picks flash-attention 2 only where CUDA, an Ampere-or-newer GPU and the
`flash-attn` package (the `gpu` extra) are all present and the dtype is 16-bit, SDPA otherwise
(`auto_attention` is that decision, from its inputs); encoders that add a bias to attention scores
(KV-Embedding) pass `allow_flash=False` and keep SDPA. `require` checks what a user asked for
before any model is loaded, so the CLI can fail in one line. Encoders with attention call
`choose(device, dtype, attn)` for all three; M2-BERT (no attention) the first two.

Not here: batching, model loading, multi-GPU placement (the Ray engine gives each actor a GPU).
torch is imported inside the functions so that the CLI can import this module cheaply.
"""

from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from docsearch.errors import EncoderUnavailableError, UsageError

if TYPE_CHECKING:
    import torch

FLASH_ATTENTION = "flash_attention_2"  # transformers' attn_implementation name
ATTENTION_NAMES = {
    **{name: name for name in ("auto", "sdpa", "eager")},
    **dict.fromkeys(("flash", "flash-attn", "flash_attn", FLASH_ATTENTION), FLASH_ATTENTION),
}
DTYPE_ALIASES = {
    **dict.fromkeys(("bf16", "bfloat16"), "bfloat16"),
    **dict.fromkeys(("fp16", "half", "float16"), "float16"),
    **dict.fromkeys(("fp32", "float", "float32"), "float32"),
    **dict.fromkeys(("fp64", "float64"), "float64"),
}
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_MIN_FLASH_CAPABILITY = (8, 0)  # flash-attn 2 kernels exist for Ampere and newer


# ---------------------------------------------------------------------------------------------
# What this machine has


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read: not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("flags", "Features"))]
    except OSError:
        return frozenset()
    return frozenset(word for line in lines for word in line.split(":", 1)[-1].split())


def cpu_has_fast_bf16() -> bool:
    """True when the CPU has native bf16 matmul (x86 AVX512-BF16 or AMX, Arm BF16) and oneDNN
    is not held below it (`ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI`, say: torch's bf16 products
    then run converted to fp32, slower than fp32 itself, as on a CPU without bf16)."""
    if _onednn_cap() in _ONEDNN_WITHOUT_BF16:
        return False
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


# The environment variables that hold torch's kernel libraries below what the CPU has (oneDNN,
# MKL, fbgemm, ATen's own): a run under them takes other kernels, so a timed choice made
# without them does not hold under them.
ISA_CAPS = (
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "FBGEMM_ENABLE_INSTRUCTIONS",
    "ATEN_CPU_CAPABILITY",
)
# oneDNN ISA caps without int8 dot products (VNNI comes with AVX2_VNNI, AVX512_CORE_VNNI and up).
_ONEDNN_WITHOUT_VNNI = frozenset(("SSE41", "AVX", "AVX2", "AVX512_CORE"))
# ... and without bf16 products (AVX512_CORE_BF16, AVX10_1_512 and the AMX caps have them).
_ONEDNN_WITHOUT_BF16 = _ONEDNN_WITHOUT_VNNI | {"AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE_VNNI"}


def isa_caps() -> dict[str, str]:
    """The ISA_CAPS set in this process's environment."""
    return {name: os.environ[name] for name in ISA_CAPS if os.environ.get(name)}


def _onednn_cap() -> str:
    caps = isa_caps()
    return caps.get("ONEDNN_MAX_CPU_ISA", caps.get("DNNL_MAX_CPU_ISA", "")).upper()


def cpu_has_int8_dot() -> bool:
    """True when the CPU has int8 dot-product instructions (x86 VNNI or AMX, Arm dotprod) and
    oneDNN is not held below them (`ONEDNN_MAX_CPU_ISA=AVX2`, say).

    Without them torch's int8 matmul (oneDNN) sums pairs of products in 16 bits and saturates:
    with oneDNN held to AVX2, a random 384-deep product was off by up to 106,679, and MiniLM's
    vectors fell to cosine 0.998 to fp32.
    """
    if _onednn_cap() in _ONEDNN_WITHOUT_VNNI:
        return False
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"})


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def flash_attn_installed() -> bool:
    """The `flash-attn` package is importable (it is not imported here: that is slow)."""
    return importlib.util.find_spec("flash_attn") is not None


def fast_bf16(device: str) -> bool:
    """True when `device` runs bf16 natively: a CUDA GPU with bf16, or a CPU with bf16 matmul.

    The one bf16 test: `resolve_dtype` and training's autocast both ask it.
    """
    import torch

    if device.startswith("cuda"):
        return cuda_available() and bool(torch.cuda.is_bf16_supported())
    return device == "cpu" and cpu_has_fast_bf16()


def cuda_capability(device: str) -> tuple[int, int] | None:
    """The compute capability of `device` when it is a visible CUDA GPU, else None."""
    import torch

    if not device.startswith("cuda") or not cuda_available():
        return None
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def flash_attn_available(device: str = "cuda") -> bool:
    """flash-attention 2 can run on `device`: CUDA present, Ampere or newer, package installed."""
    return resolve_attention(device) == FLASH_ATTENTION


# ---------------------------------------------------------------------------------------------
# Checks that fail in one line


def _check_device_name(requested: str) -> str:
    name = requested.strip().lower()
    if not _DEVICE.match(name):
        raise UsageError(f"unknown device {requested!r}; use auto, cpu, cuda or cuda:N")
    return name


def require(
    device: str | None = None, *, flash_attn: bool = False, dtype: str | None = None
) -> None:
    """Raise `EncoderUnavailableError` (one line) if this machine cannot do what was asked.

    `device`: "cuda"/"cuda:N" needs a visible GPU (with that index); `flash_attn`: needs CUDA, an
    Ampere-or-newer GPU and the package, and a 16-bit dtype. Call it before loading any model.
    """
    name = _check_device_name(device) if device else "auto"
    if name.startswith("cuda"):
        _require_cuda(name, f"--device {name}")
    if name == "mps":
        _require_mps()
    if flash_attn:
        _require_flash(name, dtype)


def _require_cuda(device: str, what: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise EncoderUnavailableError(
            f"{what} needs a CUDA GPU, but torch {torch.__version__} sees none on this machine; "
            "leave --device out (or use --device cpu) to run on the CPU"
        )
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise EncoderUnavailableError(
            f"{what}: this machine has {torch.cuda.device_count()} CUDA GPU(s), "
            f"numbered from 0; pick one of them"
        )


def _require_mps() -> None:
    import torch

    if not torch.backends.mps.is_available():
        raise EncoderUnavailableError(
            "--device mps needs an Apple-silicon GPU, which this machine does not have; "
            "leave --device out to run on the CPU"
        )


def _require_flash(device: str, dtype: str | None) -> None:
    target = "cuda" if device == "auto" else device
    if not target.startswith("cuda") or not cuda_available():
        raise EncoderUnavailableError(
            "flash-attn needs a CUDA GPU, and this run is on the CPU; use the default "
            "attention (sdpa) instead"
        )
    _require_cuda(target, "flash-attn")
    if not flash_attn_installed():
        raise EncoderUnavailableError(
            "flash-attn is not installed; `pip install 'docsearch[gpu]'` (flash-attn) on the "
            "GPU machine, or use the default attention (sdpa)"
        )
    major, minor = cuda_capability(target) or (0, 0)  # _require_cuda saw the GPU
    if (major, minor) < _MIN_FLASH_CAPABILITY:
        raise EncoderUnavailableError(
            f"flash-attn 2 needs an Ampere or newer GPU (compute capability 8.0+), this one "
            f"is {major}.{minor}; use the default attention (sdpa)"
        )
    if dtype and DTYPE_ALIASES.get(dtype.lower()) in ("float32", "float64"):
        raise EncoderUnavailableError(
            f"flash-attn runs in bfloat16 or float16 only, not {dtype}; drop the dtype "
            "option (bf16 is the GPU default) or use sdpa"
        )


# ---------------------------------------------------------------------------------------------
# Choices


def resolve_device(requested: str | None = None) -> str:
    """ "cuda" when a GPU is visible, else "cpu"; an explicit device is checked, then returned."""
    name = _check_device_name(requested) if requested else "auto"
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    require(name)
    return name


def resolve_dtype(device: str, requested: str | None = None) -> torch.dtype:
    """The compute dtype: "auto" -> bf16 on GPUs and CPUs that run it natively, else fp32."""
    import torch

    asked = "auto" if requested is None else requested.lower()
    if asked == "auto":
        asked = "bfloat16" if fast_bf16(device) else "float32"
    name = DTYPE_ALIASES.get(asked)
    if name is None:
        raise UsageError(
            f"unknown dtype {requested!r}; use auto, bfloat16, float16, float32 or float64"
        )
    return cast(torch.dtype, getattr(torch, name))


def auto_attention(
    device: str,
    *,
    flash_installed: bool,
    capability: tuple[int, int] | None,
    dtype: Any = None,
    allow_flash: bool = True,
) -> str:
    """What attention "auto" means, decided from what the machine has (no probing here).

    flash-attention 2 on a CUDA device of compute capability 8.0+ (`capability`, None off CUDA)
    when the package is installed, the encoder allows it and the dtype is 16-bit (None: not
    known yet); SDPA in every other case.
    """
    sixteen_bit = dtype is None or str(dtype).endswith(("bfloat16", "float16"))
    on_ampere = capability is not None and capability >= _MIN_FLASH_CAPABILITY
    use_flash = device.startswith("cuda") and on_ampere and flash_installed
    return FLASH_ATTENTION if use_flash and allow_flash and sixteen_bit else "sdpa"


def resolve_attention(
    device: str, requested: str | None = None, *, allow_flash: bool = True, dtype: Any = None
) -> str:
    """transformers' `attn_implementation`: flash-attention 2 where it can run, else "sdpa".

    `allow_flash=False` is for encoders whose attention adds a bias that flash kernels cannot
    take (KV-Embedding's prefix bias): "auto" gives SDPA there and an explicit "flash" is refused.
    """
    name = ATTENTION_NAMES.get((requested or "auto").lower())
    if name is None:
        raise UsageError(f"unknown attention {requested!r}; use auto, sdpa, eager or flash")
    if name == FLASH_ATTENTION and not allow_flash:
        raise UsageError(
            "this encoder adds a bias to its attention scores, which flash-attn kernels "
            "cannot take; use sdpa (the default) or eager"
        )
    if name == "auto":
        return auto_attention(
            device,
            flash_installed=flash_attn_installed(),
            capability=cuda_capability(device),
            dtype=dtype,
            allow_flash=allow_flash,
        )
    if name == FLASH_ATTENTION:
        require(device, flash_attn=True, dtype=str(dtype).rsplit(".", 1)[-1] if dtype else None)
    return name


def choose(
    device: str | None = None,
    dtype: str | None = None,
    attn: str | None = None,
    *,
    allow_flash: bool = True,
) -> tuple[str, torch.dtype, str]:
    """(device, torch dtype, attn_implementation) in one call, for encoder constructors."""
    where = resolve_device(device)
    torch_dtype = resolve_dtype(where, dtype)
    attention = resolve_attention(where, attn, allow_flash=allow_flash, dtype=torch_dtype)
    return where, torch_dtype, attention
