"""Every family takes its device, dtype and attention kernel from `encoders/device.py`.

The flash-or-SDPA decision is tested from its inputs (no CUDA needed); the families are tested
on what a CPU machine shows: CUDA and flash requests fail in one line before any model loads,
and the decoders' automatic dtype follows the one bf16 test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from docsearch.encoders import device
from docsearch.encoders.base import get_encoder
from docsearch.errors import EncoderUnavailableError, UsageError
from tests.encoders import tiny_decoder
from tests.encoders.tiny_m2 import save_random_checkpoint
from tests.encoders.tiny_nv_embed import save_random_released

FLASH = device.FLASH_ATTENTION


@pytest.mark.parametrize(
    ("where", "installed", "capability", "dtype", "allow", "expected"),
    [
        ("cuda", True, (8, 0), None, True, FLASH),  # GPU, package, Ampere: flash
        ("cuda:1", True, (9, 0), torch.bfloat16, True, FLASH),
        ("cuda", True, (8, 0), torch.float16, True, FLASH),
        ("cuda", False, (8, 0), None, True, "sdpa"),  # the `gpu` extra is not installed
        ("cuda", True, (7, 5), None, True, "sdpa"),  # pre-Ampere GPU
        ("cuda", True, (8, 0), torch.float32, True, "sdpa"),  # flash runs 16-bit only
        ("cuda", True, (8, 0), None, False, "sdpa"),  # the encoder adds a score bias
        ("cpu", True, None, None, True, "sdpa"),  # package present, no GPU
        ("mps", True, None, torch.bfloat16, True, "sdpa"),
    ],
)
def test_auto_attention_is_flash_only_on_cuda_with_the_package(
    where: str,
    installed: bool,
    capability: tuple[int, int] | None,
    dtype: Any,
    allow: bool,
    expected: str,
) -> None:
    chosen = device.auto_attention(
        where, flash_installed=installed, capability=capability, dtype=dtype, allow_flash=allow
    )
    assert chosen == expected


def test_fast_bf16_is_the_one_bf16_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for flag in (True, False):
        monkeypatch.setattr(device, "cpu_has_fast_bf16", lambda flag=flag: flag)
        assert device.fast_bf16("cpu") is flag
        assert device.resolve_dtype("cpu") == (torch.bfloat16 if flag else torch.float32)
        assert device.fast_bf16("cuda") is False  # no GPU visible
        assert device.fast_bf16("mps") is False


# ---------------------------------------------------------------------------------------------
# The families


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {
        "decoder": tiny_decoder.folder("llama", root),
        "nv-embed": save_random_released(root / "nv"),
        "m2-bert": save_random_checkpoint(root / "m2"),
    }


FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llm2vec": ("decoder", {}),
    "nv-embed": ("nv-embed", {}),
    "m2-bert": ("m2-bert", {}),
    "mean": ("decoder", {"dtype": "float32"}),
    "kv-embedding": ("decoder", {"dtype": "float32", "layers": [0]}),
}
ATTENTION_OPTION = {"llm2vec": "attn_implementation", "nv-embed": "attn_implementation"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cuda_on_a_cpu_machine_fails_in_one_line_in_every_family(
    family: str, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    kind, options = FAMILIES[family]
    with pytest.raises(EncoderUnavailableError, match="needs a CUDA GPU") as exc:
        get_encoder(family, model=str(folders[kind]), device="cuda", **options)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("family", ["llm2vec", "nv-embed", "mean"])
def test_flash_attention_on_the_cpu_fails_in_one_line(
    family: str, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    kind, options = FAMILIES[family]
    attention = {ATTENTION_OPTION.get(family, "attn"): "flash"}
    with pytest.raises(EncoderUnavailableError, match="flash-attn needs a CUDA GPU"):
        get_encoder(family, model=str(folders[kind]), **options, **attention)


def test_kv_embedding_refuses_flash_because_of_its_score_bias(folders: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="bias"):
        get_encoder("kv-embedding", model=str(folders["decoder"]), layers=[0], attn="flash")


def test_decoder_auto_dtype_follows_the_one_bf16_test(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for flag, expected in ((False, torch.float32), (True, torch.bfloat16)):
        monkeypatch.setattr(device, "cpu_has_fast_bf16", lambda flag=flag: flag)
        encoder: Any = get_encoder("mean", model=str(folders["decoder"]), dtype="auto")
        assert encoder.torch_dtype == expected and encoder.device == "cpu"
        assert next(encoder.model.parameters()).dtype == expected
