"""ONNX Runtime inference of a BERT folder (onnx_backend.py) against the torch forward.

A tiny random BERT folder built in code (tests/training/tiny_st.py) stands in for MiniLM. Bounds
follow from the dtype: the fp32 export runs the same fp32 arithmetic in another order (~1e-7 per
component of a unit vector; 1e-5 leaves room for other CPUs' kernels); int8 rounds each weight
to 1/254 of its output channel's range and each activation to 1/255 of its tensor's, so unit
vectors stay near parallel (cosine >= 0.99 here) but not equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docsearch.encoders import get_encoder, onnx_backend, precision
from docsearch.encoders.bert_folder import load_bert_folder
from docsearch.errors import UsageError
from tests.training.tiny_st import TOPICS, topic_text

TEXTS = [topic_text(topic, 2, i) for i, topic in enumerate(TOPICS)] + ["pump", "", "a " * 200]

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(not onnx_backend.available(), reason="needs the onnx extra"),
]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DOCSEARCH_CACHE", str(cache))
    monkeypatch.setattr(precision, "_CHOSEN", {})
    return cache


def vectors(folder: Path, how: str) -> np.ndarray:
    encoder = get_encoder("sentence-transformers", model=str(folder), precision=how)
    assert encoder.precision == how  # type: ignore[attr-defined]
    return encoder.encode_documents(TEXTS)


def test_onnx_fp32_matches_torch_fp32(tiny_st: Path) -> None:
    torch_fp32 = vectors(tiny_st, "fp32")
    onnx_fp32 = vectors(tiny_st, "onnx-fp32")
    assert onnx_fp32.shape == torch_fp32.shape and onnx_fp32.dtype == np.float32
    assert np.abs(onnx_fp32 - torch_fp32).max() < 1e-5


def test_onnx_int8_stays_close_and_runs_integer_products(tiny_st: Path) -> None:
    import onnx

    torch_fp32 = vectors(tiny_st, "fp32")
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision="onnx-int8")
    int8 = encoder.encode_documents(TEXTS)
    assert encoder.engine == "onnxruntime int8"  # type: ignore[attr-defined]
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    assert np.sum(int8 * torch_fp32, axis=1).min() >= 0.99
    assert not np.allclose(int8, torch_fp32, atol=1e-6)  # it did run in int8
    path = encoder._inference_model().path  # type: ignore[attr-defined]
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops


def test_one_query_and_batches_agree(tiny_st: Path) -> None:
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision="onnx-fp32")
    alone = np.vstack([encoder.encode_queries([t]) for t in TEXTS[:3]])
    together = encoder.encode_queries(TEXTS[:3])
    assert np.abs(alone - together).max() < 1e-5


def test_the_export_is_made_once_and_rebuilt_for_another_model(
    tiny_st: Path, tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors(tiny_st, "onnx-fp32")
    [first] = (own_cache / "onnx").iterdir()

    def no_second_export(*_: object) -> None:
        raise AssertionError("exported again")

    with monkeypatch.context() as patch:
        patch.setattr(onnx_backend, "_export_fp32", no_second_export)
        vectors(tiny_st, "onnx-int8")  # the cached export serves
    other = tmp_path / "other"
    other.mkdir()
    for path in tiny_st.rglob("*"):
        if path.is_file():
            target = other / path.relative_to(tiny_st)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}))
    assert onnx_backend.export_key(other) != first.name
    vectors(other, "onnx-fp32")
    assert {p.name for p in (own_cache / "onnx").iterdir()} == {
        first.name,
        onnx_backend.export_key(other),
    }
    monkeypatch.setattr(onnx_backend, "EXPORTER_VERSION", onnx_backend.EXPORTER_VERSION + 1)
    assert onnx_backend.export_key(tiny_st) != first.name  # a new exporter: exported afresh


def test_a_race_lost_to_another_process_keeps_its_export(
    tiny_st: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's export lands while this one quantises: its rename wins, this copy is
    dropped, and no temporary folder stays behind."""
    model = load_bert_folder(tiny_st)
    final = onnx_backend.export_root() / onnx_backend.export_key(tiny_st)
    quantise = onnx_backend._quantise

    def quantise_while_another_finishes(source: Path, target: Path) -> None:
        quantise(source, target)
        final.mkdir(parents=True)
        (final / "export.json").write_text("{}")
        (final / "marker").write_text("the other process's")

    monkeypatch.setattr(onnx_backend, "_quantise", quantise_while_another_finishes)
    assert onnx_backend.ensure_export(model, tiny_st) == final
    assert (final / "marker").is_file()
    assert [p.name for p in final.parent.iterdir()] == [final.name]


def test_a_failed_export_leaves_nothing(
    tiny_st: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(source: Path, target: Path) -> None:
        raise RuntimeError("quantiser failed")

    monkeypatch.setattr(onnx_backend, "_quantise", broken)
    with pytest.raises(RuntimeError, match="quantiser failed"):
        onnx_backend.ensure_export(load_bert_folder(tiny_st), tiny_st)
    assert list((own_cache / "onnx").iterdir()) == []


def test_onnx_is_a_candidate_only_for_a_folder_it_can_run(tiny_st: Path) -> None:
    assert set(precision.ONNX_PRECISIONS) <= set(precision.candidates("cpu", onnx=True))
    assert not set(precision.ONNX_PRECISIONS) & set(precision.candidates("cpu"))
    assert precision.candidates("cuda", onnx=True) == []


def test_without_the_extra_onnx_is_refused_with_the_fix(
    tiny_st: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_backend, "available", lambda: False)
    with pytest.raises(UsageError, match=r"needs the onnx extra: pip install 'docsearch\[onnx\]'"):
        get_encoder("sentence-transformers", model=str(tiny_st), precision="onnx-int8")
    assert not set(precision.ONNX_PRECISIONS) & set(precision.candidates("cpu", onnx=True))


def test_auto_times_onnx_beside_torch_and_keeps_the_gate(tiny_st: Path, own_cache: Path) -> None:
    chosen = get_encoder("sentence-transformers", model=str(tiny_st)).precision  # type: ignore[attr-defined]
    [saved] = (own_cache / "calibration").glob("precision-*.json")
    record = json.loads(saved.read_text())
    assert set(precision.ONNX_PRECISIONS) <= set(record["measured"])
    assert chosen == record["choice"] == precision.decide(record["measured"])
    assert record["measured"][record["choice"]]["cosine"] >= precision.MIN_COSINE
    assert record["measured"]["onnx-fp32"]["cosine"] > 0.99999


def test_auto_falls_back_to_torch_when_the_export_fails(
    tiny_st: Path,
    own_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("exporter broke")

    monkeypatch.setattr(onnx_backend, "_export_fp32", broken)
    encoder = get_encoder("sentence-transformers", model=str(tiny_st))
    assert encoder.precision not in precision.ONNX_PRECISIONS  # type: ignore[attr-defined]
    assert "onnx-fp32 left out of precision=auto: exporter broke" in caplog.text
    [saved] = (own_cache / "calibration").glob("precision-*.json")
    assert not set(precision.ONNX_PRECISIONS) & set(json.loads(saved.read_text())["measured"])


def test_exports_of_one_process_take_turns_and_the_second_finds_the_first(
    tiny_st: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads ask for the same export at once (a search's short query and an encoder's
    calibration): one exports, the other waits and gets it; none exports beside another
    (torch's exporter fails when two run at once)."""
    import threading
    import time

    export = onnx_backend._export_fp32
    running, exports = [0], []

    def one_at_a_time(model: Any, path: Path) -> None:
        running[0] += 1
        exports.append(running[0])  # how many were exporting as this one started
        time.sleep(0.3)  # long enough for the other thread to arrive
        export(model, path)
        running[0] -= 1

    monkeypatch.setattr(onnx_backend, "_export_fp32", one_at_a_time)
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda: found.append(onnx_backend.ensure_export(None, tiny_st)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = onnx_backend.export_root() / onnx_backend.export_key(tiny_st)
    assert found == [final, final] and exports == [1]
    assert (final / "model-fp32.onnx").is_file() and (final / "model-int8.onnx").is_file()
