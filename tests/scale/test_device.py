"""Device, dtype and attention choice; CUDA-only requests on a CPU machine fail in one line.

CUDA is simulated by patching torch.cuda, so these run (and check the GPU branches) anywhere.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from docsearch.encoders import device
from docsearch.errors import EncoderUnavailableError, UsageError
from tests.helpers import REPO


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def ampere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with two compute-capability 8.0 GPUs that run bf16."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (8, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message and len(message) < 200
    return message


def test_auto_picks_cuda_when_present_else_cpu(no_gpu: None) -> None:
    assert device.resolve_device(None) == "cpu"
    assert device.resolve_device("auto") == "cpu"
    assert device.resolve_device("CPU") == "cpu"


def test_auto_picks_cuda_on_a_gpu_machine(ampere: None) -> None:
    assert device.resolve_device(None) == "cuda"
    assert device.resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(EncoderUnavailableError, match="2 CUDA GPU"):
        device.resolve_device("cuda:2")


def test_cuda_on_a_cpu_machine_fails_in_one_clear_line(no_gpu: None) -> None:
    with pytest.raises(EncoderUnavailableError) as exc:
        device.resolve_device("cuda")
    message = one_line(exc)
    assert "--device cuda needs a CUDA GPU" in message and "--device cpu" in message


def test_flash_attn_on_a_cpu_machine_fails_in_one_clear_line(no_gpu: None) -> None:
    with pytest.raises(EncoderUnavailableError) as exc:
        device.require(flash_attn=True)
    assert "flash-attn needs a CUDA GPU" in one_line(exc)
    with pytest.raises(EncoderUnavailableError):
        device.resolve_attention("cpu", "flash")


def test_flash_attn_needs_the_package_ampere_and_16_bits(
    ampere: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(device, "flash_attn_installed", lambda: False)
    with pytest.raises(EncoderUnavailableError, match="not installed"):
        device.require("cuda", flash_attn=True)
    monkeypatch.setattr(device, "flash_attn_installed", lambda: True)
    device.require("cuda", flash_attn=True)  # all present: no error
    with pytest.raises(EncoderUnavailableError, match="bfloat16 or float16"):
        device.require("cuda", flash_attn=True, dtype="float32")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (7, 5))
    with pytest.raises(EncoderUnavailableError, match="Ampere"):
        device.require("cuda", flash_attn=True)


def test_attention_auto_uses_flash_only_where_it_runs(
    ampere: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(device, "flash_attn_installed", lambda: True)
    assert device.resolve_attention("cuda", None) == device.FLASH_ATTENTION
    assert device.resolve_attention("cuda", "auto", dtype=torch.float32) == "sdpa"
    assert device.resolve_attention("cuda", None, allow_flash=False) == "sdpa"  # KV-Embedding
    assert device.resolve_attention("cpu", None) == "sdpa"
    assert device.resolve_attention("cuda", "eager") == "eager"
    with pytest.raises(UsageError, match="bias"):
        device.resolve_attention("cuda", "flash", allow_flash=False)
    monkeypatch.setattr(device, "flash_attn_installed", lambda: False)
    assert device.resolve_attention("cuda", None) == "sdpa"


def test_dtype_bf16_on_gpus_and_fast_cpus_else_fp32(
    ampere: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert device.resolve_dtype("cuda") == torch.bfloat16
    monkeypatch.setattr(device, "cpu_has_fast_bf16", lambda: True)
    assert device.resolve_dtype("cpu") == torch.bfloat16
    monkeypatch.setattr(device, "cpu_has_fast_bf16", lambda: False)
    assert device.resolve_dtype("cpu", "auto") == torch.float32
    assert device.resolve_dtype("cpu", "bf16") == torch.bfloat16  # asked for: honoured
    assert device.resolve_dtype("cuda", "fp32") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert device.resolve_dtype("cuda") == torch.float32  # pre-Ampere GPU


def test_unknown_names_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown device"):
        device.resolve_device("tpu")
    with pytest.raises(UsageError, match="unknown dtype"):
        device.resolve_dtype("cpu", "int4")
    with pytest.raises(UsageError, match="unknown attention"):
        device.resolve_attention("cpu", "ring")


def test_choose_is_the_one_call_an_encoder_makes(no_gpu: None) -> None:
    where, dtype, attn = device.choose(None, "float32", None)
    assert (where, dtype, attn) == ("cpu", torch.float32, "sdpa")


def test_cpu_flags_are_read_from_proc_cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import builtins

    info = tmp_path / "cpuinfo"
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        return real_open(info if path == "/proc/cpuinfo" else path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    cases = (
        ("fpu sse avx2 avx512f", False, False),
        ("fpu avx512_bf16 amx_tile", True, False),
        ("fpu avx2 avx_vnni", False, True),
        ("fpu avx512_vnni avx512_bf16", True, True),
    )
    for flags, bf16, int8 in cases:
        info.write_text(f"processor : 0\nflags : {flags}\n")
        device.cpu_flags.cache_clear()
        assert (device.cpu_has_fast_bf16(), device.cpu_has_int8_dot()) == (bf16, int8), flags
    # oneDNN held below VNNI sums int8 products in 16 bits whatever the CPU has
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not device.cpu_has_int8_dot()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    assert device.cpu_has_int8_dot()
    # ... and held below bf16 (the last flags above have it) runs bf16 products as fp32
    assert not device.cpu_has_fast_bf16()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core_bf16")
    assert device.cpu_has_fast_bf16() and device.cpu_has_int8_dot()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    assert device.isa_caps() == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}
    device.cpu_flags.cache_clear()


def test_importing_device_does_not_import_torch() -> None:
    code = "import sys, docsearch.encoders.device; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr
