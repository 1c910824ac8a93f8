"""Inference precision of the sentence-transformers encoder: fp32, bf16, int8 and "auto".

A tiny random BERT built in code (tests/training/tiny_st.py) stands in for MiniLM: what is
checked is how the precisions relate to fp32 on the same weights, not MiniLM's numbers (those
are in benchmarks/results/speed.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from docsearch.encoders import encoder_from_spec, get_encoder, precision
from docsearch.errors import UsageError
from tests.training.tiny_st import TOPICS, topic_text

TEXTS = [topic_text(topic, 2, i) for i, topic in enumerate(TOPICS)] + ["pump", "blood pressure"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def encode(folder: Path, how: str) -> np.ndarray:
    encoder = get_encoder("sentence-transformers", model=str(folder), precision=how)
    assert encoder.precision == how  # type: ignore[attr-defined]
    return encoder.encode_documents(TEXTS)


def test_bf16_and_int8_vectors_stay_close_to_fp32(tiny_st: Path) -> None:
    """bf16 keeps 8 mantissa bits (relative error ~0.4% per product), int8 per-channel weights
    and per-batch activations ~1/127 of each range: both leave unit vectors nearly parallel.
    The bounds leave a wide margin over what either measures here, and fail for a broken
    conversion (a random vector's cosine to another is ~0)."""
    fp32 = encode(tiny_st, "fp32")
    for how, floor in (("bf16", 0.999), ("int8", 0.98)):
        other = encode(tiny_st, how)
        assert other.dtype == np.float32 and other.shape == fp32.shape
        assert np.allclose(np.linalg.norm(other, axis=1), 1.0, atol=1e-5)
        cosine = np.sum(fp32 * other, axis=1)
        assert cosine.min() >= floor, (how, cosine)
        assert not np.array_equal(other, fp32)  # it did run in the other precision


def test_int8_is_part_of_the_spec_and_bf16_is_not(tiny_st: Path) -> None:
    """int8 changes vectors beyond the quality gate, so queries must use it too; bf16 stays
    within it, a run-time choice like the device."""
    int8 = get_encoder("sentence-transformers", model=str(tiny_st), precision="int8")
    assert int8.spec()["options"]["precision"] == "int8"
    again = encoder_from_spec(int8.spec())
    assert again.precision == "int8"  # type: ignore[attr-defined]
    bf16 = get_encoder("sentence-transformers", model=str(tiny_st), precision="bfloat16")
    assert bf16.precision == "bf16" and "precision" not in bf16.spec()["options"]  # type: ignore[attr-defined]


def test_an_unknown_precision_is_a_usage_error(tiny_st: Path) -> None:
    with pytest.raises(UsageError, match="unknown precision 'fp8'; use one of: auto, fp32"):
        get_encoder("sentence-transformers", model=str(tiny_st), precision="fp8")


def test_training_gets_fp32_weights_and_encoding_follows_them(tiny_st: Path) -> None:
    """The bf16 model was converted in place; `module` hands out fp32 weights again, and what
    training does to them shows in the next encoding."""
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision="bf16")
    before = encoder.encode_documents(TEXTS)
    module = encoder.module  # type: ignore[attr-defined]
    assert {p.dtype for p in module.parameters()} == {torch.float32}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():  # a change no rounding can hide
            p.add_(torch.randn(p.shape, generator=generator))
    after = encoder.encode_documents(TEXTS)
    assert np.sum(before * after, axis=1).max() < 0.9
    assert {p.dtype for p in module.parameters()} == {torch.float32}  # converted a copy


def test_auto_measures_once_per_machine_and_caches_the_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "_CHOSEN", {})
    calls: list[int] = []

    def measure() -> dict[str, float]:
        calls.append(1)
        return {"fp32_s": 1.0, "bf16_s": 0.5, "cosine": 0.9999}

    key = {"cpu": "test", "model": "m", "threads": 2}
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    assert precision.choose_precision("cpu", key, measure) == "fp32" and not calls
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)
    assert precision.choose_precision("cuda", key, measure) == "fp32" and not calls
    assert precision.choose_precision("cpu", key, measure) == "bf16" and len(calls) == 1
    [saved] = (tmp_path / "calibration").glob("precision-*.json")
    assert json.loads(saved.read_text())["choice"] == "bf16"
    monkeypatch.setattr(precision, "_CHOSEN", {})  # as a new process would start
    assert precision.choose_precision("cpu", key, measure) == "bf16" and len(calls) == 1
    assert precision.choose_precision("cpu", key | {"threads": 1}, measure) == "bf16"
    assert len(calls) == 2  # another thread count is measured on its own


@pytest.mark.parametrize(
    ("fp32_s", "bf16_s", "cosine", "choice"),
    [
        (1.0, 0.5, 0.9999, "bf16"),
        (1.0, 0.9, 0.9999, "fp32"),  # within timing noise: not worth the change
        (1.0, 1.4, 0.9999, "fp32"),  # the flags say bf16, the kernels disagree
        (1.0, 0.5, 0.99, "fp32"),  # fast but outside the quality gate
    ],
)
def test_bf16_is_chosen_only_when_faster_and_faithful(
    fp32_s: float, bf16_s: float, cosine: float, choice: str
) -> None:
    assert precision.decide({"fp32_s": fp32_s, "bf16_s": bf16_s, "cosine": cosine}) == choice


def test_auto_on_the_real_kernels_picks_a_precision_that_keeps_the_gate(
    tiny_st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "_CHOSEN", {})
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)  # measure on any CPU
    encoder = get_encoder("sentence-transformers", model=str(tiny_st))
    [saved] = (tmp_path / "calibration").glob("precision-*.json")
    record = json.loads(saved.read_text())
    assert encoder.precision == record["choice"] == precision.decide(record)  # type: ignore[attr-defined]
    assert record["cosine"] >= precision.MIN_COSINE and record["threads"] == 1


def test_one_text_runs_on_one_thread_and_the_count_comes_back(tiny_st: Path) -> None:
    from docsearch.encoders import sentence_transformers as st

    torch.set_num_threads(2)
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision="fp32")
    seen: list[int] = []
    model = encoder._inference_model()  # type: ignore[attr-defined]
    hook = model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    encoder.encode_queries(["pump valve alarm"])
    encoder.encode_documents(TEXTS)
    hook.remove()
    assert seen == [st.SINGLE_TEXT_THREADS, 2] and torch.get_num_threads() == 2
