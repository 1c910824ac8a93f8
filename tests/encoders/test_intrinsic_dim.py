"""TwoNN on synthetic data of known dimension, the layer rule, and the cached calibration."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from docsearch.encoders import intrinsic_dim
from docsearch.encoders.decoder_common import load_decoder
from docsearch.encoders.intrinsic_dim import (
    cache_file,
    calibrate,
    calibration_sample,
    neighbour_ratios,
    select_layers,
    two_nn,
)
from docsearch.encoders.sample_texts import SENTENCES
from tests.encoders import tiny_decoder


def embedded_gaussian(n: int, d: int, ambient: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) @ rng.standard_normal((d, ambient))


@pytest.mark.parametrize("method", ["fit", "mle"])
def test_two_nn_recovers_a_5d_gaussian_in_r100(method: str) -> None:
    assert two_nn(embedded_gaussian(1000, 5, 100), method=method) == pytest.approx(5.0, abs=0.5)


def test_two_nn_tracks_the_dimension_not_the_ambient_space() -> None:
    low = two_nn(embedded_gaussian(600, 2, 50))
    high = two_nn(embedded_gaussian(600, 12, 50))
    assert low == pytest.approx(2.0, abs=0.3) and high > 8.0


def test_neighbour_ratios_survive_large_offsets_and_duplicates() -> None:
    x = embedded_gaussian(200, 3, 20) * 1e-3 + 1e4  # tiny spread far from the origin
    x = np.vstack([x, x[:5]])  # exact duplicates are dropped, not divided by zero
    mu = neighbour_ratios(x)
    assert len(mu) == 195 and np.all(np.isfinite(mu)) and np.all(mu >= 1.0)
    assert two_nn(x) == pytest.approx(3.0, abs=0.6)


def test_select_layers_takes_the_minimum_and_the_next_tenth() -> None:
    dims = [9, 3, 5, 4, 8, 7, 6, 9, 9, 9]
    assert select_layers(dims, skip=0.2) == [3, 4]  # layer 1 is skipped (first 20%)
    assert select_layers(dims, skip=0.0) == [1, 2]
    assert select_layers([5] * 29 + [1]) == [29]  # clipped at the last layer
    assert select_layers([9] * 10 + [1] + [9] * 19) == [10, 11, 12, 13]  # N=30: 3 more


def test_calibration_runs_once_and_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tiny_decoder.folder("llama", tmp_path)
    model, tok, _ = load_decoder(
        str(folder), dtype=torch.float32, device="cpu", attn_implementation="sdpa"
    )
    first = calibrate(model, tok, folder, "Context: {text} in one word:")
    assert len(first["dims"]) == 3 and first["layers"] == select_layers(first["dims"])
    assert first["n_texts"] == len(calibration_sample()) == 2 * len(SENTENCES)
    monkeypatch.setattr(intrinsic_dim, "layer_dimensions", _refuse)
    assert calibrate(model, tok, folder, "Context: {text} in one word:") == first
    with pytest.raises(AssertionError):  # another template is another calibration
        calibrate(model, tok, folder, "Other: {text}")
    stored = list((Path(intrinsic_dim.cache_dir()) / "calibration").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["layers"] == first["layers"]


def test_cache_file_lives_inside_folders_docsearch_owns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path / "cache"))
    owned = tmp_path / "cache" / "models" / "smol"
    assert cache_file(owned, {"a": 1}).parent == owned.resolve()
    elsewhere = cache_file(tmp_path / "mine", {"a": 1})
    assert elsewhere.parent == (tmp_path / "cache" / "calibration").resolve()
    assert cache_file(owned, {"a": 1}) != cache_file(owned, {"a": 2})


def _refuse(*_: object, **__: object) -> list[float]:
    raise AssertionError("calibrated twice")
