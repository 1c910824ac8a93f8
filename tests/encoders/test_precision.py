"""Inference precision of the sentence-transformers encoder: fp32, bf16, int8 and "auto".

The int8 layers themselves are tested in test_int8.py.

A tiny random BERT built in code (tests/training/tiny_st.py) stands in for MiniLM: what is
checked is how the precisions relate to fp32 on the same weights, not MiniLM's numbers (those
are in benchmarks/results/speed.md).
"""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from docsearch.encoders import encoder_from_spec, get_encoder, int8, precision
from docsearch.errors import UsageError
from tests.training.tiny_st import TOPICS, topic_text

TEXTS = [topic_text(topic, 2, i) for i, topic in enumerate(TOPICS)] + ["pump", "blood pressure"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def encode(folder: Path, how: str) -> np.ndarray:
    encoder = get_encoder("sentence-transformers", model=str(folder), precision=how)
    assert encoder.precision == how  # type: ignore[attr-defined]
    return encoder.encode_documents(TEXTS)


needs_int8_dot = pytest.mark.skipif(
    not precision.int8_available(), reason="int8 needs int8 dot products or fbgemm (x86)"
)


def test_bf16_vectors_stay_close_to_fp32(tiny_st: Path) -> None:
    """bf16 keeps 8 mantissa bits (relative error ~0.4% per product): unit vectors stay nearly
    parallel. The bound leaves a wide margin over what it measures here, and fails for a broken
    conversion (a random vector's cosine to another is ~0)."""
    fp32 = encode(tiny_st, "fp32")
    other = encode(tiny_st, "bf16")
    assert other.dtype == np.float32 and other.shape == fp32.shape
    assert np.allclose(np.linalg.norm(other, axis=1), 1.0, atol=1e-5)
    assert np.sum(fp32 * other, axis=1).min() >= 0.999
    assert not np.array_equal(other, fp32)  # it did run in the other precision


@needs_int8_dot
def test_int8_vectors_keep_the_gate(tiny_st: Path) -> None:
    """int8 (int8.py) keeps the same gate as bf16 here: per-token activations and per-channel
    weights are each within 1/254 of their range, and the outlier channels stay in fp32."""
    fp32 = encode(tiny_st, "fp32")
    other = encode(tiny_st, "int8")
    assert np.allclose(np.linalg.norm(other, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(fp32 * other, axis=1)
    assert cosine.mean() >= precision.MIN_COSINE and cosine.min() >= 0.998, cosine
    assert not np.array_equal(other, fp32)


@needs_int8_dot
def test_int8_forwards_fewer_rows_at_a_time_unless_told(tiny_st: Path) -> None:
    from docsearch.encoders import sentence_transformers as st

    def rows(**options: object) -> int:
        encoder = get_encoder("sentence-transformers", model=str(tiny_st), **options)
        return int(encoder.batch_size)  # type: ignore[attr-defined]

    assert rows(precision="int8") == st.INT8_BATCH < st.DEFAULT_BATCH == rows(precision="fp32")
    assert rows(precision="int8", batch_size=32) == 32


def test_int8_is_refused_where_no_exact_int8_kernel_runs(
    tiny_st: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(int8, "kernel_here", lambda: None)
    with pytest.raises(UsageError, match="int8 needs int8 dot-product instructions"):
        get_encoder("sentence-transformers", model=str(tiny_st), precision="int8")
    assert precision.candidates("cpu") == (["bf16"] if precision.cpu_has_fast_bf16() else [])


@pytest.mark.skipif(
    "fbgemm" not in torch.backends.quantized.supported_engines, reason="fbgemm is x86 only"
)
def test_without_int8_dot_products_int8_runs_fbgemm_and_keeps_the_gate(
    tiny_st: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oneDNN held to AVX2 (as on a CPU without VNNI): int8 takes fbgemm's 7-bit kernel."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert int8.kernel_here() == "fbgemm" and "int8" in precision.candidates("cpu")
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision="int8")
    model = encoder._inference_model()  # type: ignore[attr-defined]
    assert {m.kernel for m in model.modules() if isinstance(m, int8.Int8Linear)} == {"fbgemm"}
    # query, key and value share their input: one product for the three in each block
    blocks = [m for m in model.modules() if hasattr(m, "fused") and hasattr(m, "query")]
    assert blocks and all(isinstance(m.fused, int8.Int8Linear) for m in blocks)
    assert {m.fused.out_features for m in blocks} == {3 * blocks[0].query.in_features}
    cosine = np.sum(encode(tiny_st, "fp32") * encoder.encode_documents(TEXTS), axis=1)
    assert cosine.min() > 0.999


def test_no_precision_is_part_of_the_spec(tiny_st: Path) -> None:
    """Every precision keeps the quality gate, so like the device it is a run-time choice: an
    index built in one is searched in whatever precision the searching machine picks."""
    fp32 = get_encoder("sentence-transformers", model=str(tiny_st), precision="fp32")
    for how in ("bfloat16",) + (("int8",) if precision.int8_available() else ()):
        other = get_encoder("sentence-transformers", model=str(tiny_st), precision=how)
        assert other.spec() == fp32.spec() and "precision" not in other.spec()["options"]
    again = encoder_from_spec(fp32.spec(), precision="bf16")
    assert again.precision == "bf16"  # type: ignore[attr-defined]


def test_an_unknown_precision_is_a_usage_error(tiny_st: Path) -> None:
    with pytest.raises(UsageError, match="unknown precision 'fp8'; use one of: auto, fp32"):
        get_encoder("sentence-transformers", model=str(tiny_st), precision="fp8")


needs_onnx = pytest.mark.skipif(not precision.onnx_available(), reason="needs the onnx extra")


@pytest.mark.parametrize(
    "how",
    [
        "bf16",
        pytest.param("int8", marks=needs_int8_dot),
        pytest.param("onnx-fp32", marks=needs_onnx),
    ],
    ids=["bf16", "int8", "onnx-fp32"],
)
def test_training_gets_fp32_weights_and_encoding_follows_them(tiny_st: Path, how: str) -> None:
    """The bf16 or int8 model was converted in place (or exported: onnx); `module` hands out
    fp32 weights again, and what training does to them shows in the next encoding (an ONNX
    export is of the folder's weights: encoding falls back to torch fp32)."""
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision=how)
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
    asked: list[list[str]] = []

    def measure(names: Sequence[str]) -> dict[str, dict[str, float]]:
        asked.append(list(names))
        timings = {"fp32": 1.0, "bf16": 0.5, "int8": 0.6}
        return {n: {"seconds": timings[n], "cosine": 0.9999} for n in ["fp32", *names]}

    key = {"cpu": "test", "model": "m", "threads": 2}
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.setattr(int8, "kernel_here", lambda: None)
    assert precision.choose_precision("cpu", key, measure) == "fp32" and not asked
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)
    assert precision.choose_precision("cuda", key, measure) == "fp32" and not asked
    assert precision.choose_precision("cpu", key, measure) == "bf16" and asked == [["bf16"]]
    [saved] = (tmp_path / "calibration").glob("precision-*.json")
    assert json.loads(saved.read_text())["choice"] == "bf16"
    monkeypatch.setattr(precision, "_CHOSEN", {})  # as a new process would start
    assert precision.choose_precision("cpu", key, measure) == "bf16" and len(asked) == 1
    assert precision.choose_precision("cpu", key | {"threads": 1}, measure) == "bf16"
    assert len(asked) == 2  # another thread count is measured on its own
    monkeypatch.setattr(int8, "kernel_here", lambda: "dot")
    assert precision.choose_precision("cpu", key, measure) == "bf16"  # int8 joins: measured again
    assert asked[-1] == ["int8", "bf16"] and len(asked) == 3


@pytest.mark.parametrize(
    ("measured", "choice"),
    [
        ({"bf16": (0.5, 0.9999)}, "bf16"),
        ({"bf16": (0.9, 0.9999)}, "fp32"),  # within timing noise: not worth the change
        ({"bf16": (1.4, 0.9999)}, "fp32"),  # the flags say bf16, the kernels disagree
        ({"bf16": (0.5, 0.99)}, "fp32"),  # fast but outside the quality gate
        ({"int8": (0.6, 0.9995), "bf16": (0.5, 0.9999)}, "bf16"),  # faster and more faithful
        ({"int8": (0.4, 0.9995), "bf16": (0.5, 0.9999)}, "int8"),  # 1.25x faster than bf16
        ({"int8": (0.45, 0.9995), "bf16": (0.5, 0.9999)}, "bf16"),  # only 1.11x: the faithful
        ({"int8": (0.4, 0.998), "bf16": (0.5, 0.9999)}, "bf16"),  # int8 fails the gate
        ({"int8": (0.6, 0.9995)}, "int8"),
    ],
)
def test_the_fastest_faithful_precision_is_chosen(
    measured: dict[str, tuple[float, float]], choice: str
) -> None:
    found = {n: {"seconds": s, "cosine": c} for n, (s, c) in measured.items()}
    assert precision.decide({"fp32": {"seconds": 1.0, "cosine": 1.0}, **found}) == choice


def test_auto_on_the_real_kernels_picks_a_precision_that_keeps_the_gate(
    tiny_st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docsearch.encoders import sentence_transformers as st

    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "_CHOSEN", {})
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)  # measure on any CPU
    encoder = get_encoder("sentence-transformers", model=str(tiny_st))
    chosen = encoder.precision  # type: ignore[attr-defined]
    [saved] = (tmp_path / "calibration").glob("precision-*.json")
    record = json.loads(saved.read_text())
    measured = record["measured"]
    assert chosen == record["choice"] == precision.decide(measured)
    assert set(measured) == {"fp32", *precision.candidates("cpu", onnx=True)}
    assert record["threads"] == 1
    assert record["batches"] == {"fp32": st.DEFAULT_BATCH, "int8": st.INT8_BATCH}  # as indexing
    assert measured[record["choice"]]["cosine"] >= precision.MIN_COSINE


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


def test_auto_chooses_when_a_batch_needs_it_never_for_one_query(
    tiny_st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timing every precision takes a minute or two on 2 cores: a search of one query on a
    machine that never chose runs fp32 instead; the first batch (an index run) chooses, and a
    later encoder of the same model reads the choice from the cache at once."""
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "_CHOSEN", {})
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)  # a candidate on any CPU
    timed: list[list[str]] = []

    def measure(names: Sequence[str]) -> dict[str, dict[str, float]]:
        timed.append(list(names))
        return {
            n: {"seconds": 0.5 if n == "bf16" else 1.0, "cosine": 0.9999} for n in ["fp32", *names]
        }

    real = precision.choose_precision
    monkeypatch.setattr(
        "docsearch.encoders.sentence_transformers.choose_precision",
        lambda device, key, _timings, **kw: real(device, key, measure, **kw),
    )
    fp32 = get_encoder("sentence-transformers", model=str(tiny_st), precision="fp32")
    encoder = get_encoder("sentence-transformers", model=str(tiny_st))
    # a short query (ONNX Runtime fp32 under "auto") and one past its 32 tokens (torch)
    for query in ["pump valve alarm", " ".join(TEXTS)]:
        vector = encoder.encode_queries([query])
        # fp32 both ways (ONNX Runtime's matches torch's to ~1e-7 a component)
        np.testing.assert_allclose(vector, fp32.encode_queries([query]), atol=1e-5)
    assert timed == [] and not list(tmp_path.glob("calibration/*.json"))
    held = encoder._inference_model(1)  # type: ignore[attr-defined]  # as a search thread holds it
    encoder.encode_documents(TEXTS)
    assert len(timed) == 1 and encoder.precision == "bf16"  # type: ignore[attr-defined]
    # bf16 was made from a copy: a query running on the fp32 model meanwhile is not changed
    assert {p.dtype for p in held.parameters()} == {torch.float32}
    assert encoder._inference_model(1) is not held  # type: ignore[attr-defined]
    released = weakref.ref(held)
    del held
    gc.collect()
    assert released() is None  # nothing keeps the fp32 copy (the short-query engine did)
    monkeypatch.setattr(precision, "_CHOSEN", {})  # as a new process would start
    again = get_encoder("sentence-transformers", model=str(tiny_st))
    assert again._precision == "bf16" and len(timed) == 1  # type: ignore[attr-defined]
