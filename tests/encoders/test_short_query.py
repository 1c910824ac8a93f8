"""Short single queries through ONNX Runtime fp32 (short_query.py) under precision "auto".

A tiny random BERT folder (tests/training/tiny_st.py) stands in for MiniLM. "auto" is pinned to
torch fp32 here (its timing is not what these tests check), so the torch vectors are the fp32
truth the export must match: the same fp32 arithmetic in another order, ~1e-7 a component of a
unit vector; 1e-5 leaves room for other CPUs' kernels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docsearch.encoders import get_encoder, onnx_backend, short_query
from docsearch.encoders import sentence_transformers as st

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(not onnx_backend.available(), reason="needs the onnx extra"),
]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(st, "choose_precision", lambda *_, **__: "fp32")
    return tmp_path / "cache"


def encoder(folder: Path, precision: str = "auto") -> st.SentenceTransformerEncoder:
    made = get_encoder("sentence-transformers", model=str(folder), precision=precision)
    assert isinstance(made, st.SentenceTransformerEncoder)
    return made


def test_a_short_query_runs_in_onnx_and_matches_torch_fp32(tiny_st: Path, own_cache: Path) -> None:
    auto, torch_fp32 = encoder(tiny_st), encoder(tiny_st, "fp32")
    assert auto._short is not None and torch_fp32._short is None  # a named precision is what runs
    query = "pump pressure drop"
    fast = auto.encode_queries([query])
    assert auto._short._model is not None  # the session answered (exported into the cache)
    assert (own_cache / "onnx").is_dir()
    truth = torch_fp32.encode_queries([query])
    assert fast.shape == truth.shape and fast.dtype == np.float32
    assert np.abs(fast - truth).max() < 1e-5
    assert abs(float(np.linalg.norm(fast)) - 1.0) < 1e-5


def test_long_queries_batches_and_documents_stay_on_the_model(
    tiny_st: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auto = encoder(tiny_st)
    assert auto._short is not None
    long_query = " ".join(["valve"] * (short_query.SHORT_QUERY_TOKENS + 5))
    assert auto._short.vector(long_query) is None  # over the token limit: the model encodes it
    calls: list[str] = []
    real = auto._short.vector
    monkeypatch.setattr(auto._short, "vector", lambda text: calls.append(text) or real(text))
    auto.encode_queries(["two", "rows"])
    auto.encode_documents(["one document"])
    assert calls == []
    auto.encode_queries(["pump"])
    assert calls == ["pump"]


def test_training_turns_it_off(tiny_st: Path) -> None:
    auto = encoder(tiny_st)
    before = auto.encode_queries(["pump pressure"])
    module = auto.module  # handed to training: its weights may change from here on
    assert auto._short is None
    import torch

    with torch.no_grad():
        for parameter in module.parameters():
            parameter.mul_(0.5)
    after = auto.encode_queries(["pump pressure"])
    assert np.abs(after - before).max() > 1e-3  # the tuned weights answer, not the export


def test_a_failing_export_leaves_torch_answering(
    tiny_st: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("no exporter here")

    monkeypatch.setattr(onnx_backend, "ensure_export", broken)
    auto, torch_fp32 = encoder(tiny_st), encoder(tiny_st, "fp32")
    got = auto.encode_queries(["pump pressure"])
    assert np.abs(got - torch_fp32.encode_queries(["pump pressure"])).max() < 1e-6
    assert "short queries stay on torch" in caplog.text
