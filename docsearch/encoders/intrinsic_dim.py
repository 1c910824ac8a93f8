"""TwoNN intrinsic dimension (Facco et al., 2017) and KV-Embedding's layer selection by it.

`two_nn(points)` estimates the intrinsic dimension of a point cloud from the ratio of each
point's second- to first-nearest-neighbour distance. `layer_dimensions` measures it per decoder
layer on the last-token hidden states of prompted calibration texts; `select_layers` takes the
minimum (after skipping the earliest layers) and the following ⌊0.1·N⌋ layers, as the paper
describes. `calibrate` runs this once per model and template and caches the result as JSON
beside the converted weights (or in the docsearch cache for folders we do not own).
Not here: the re-routing itself (`kv_embedding.py`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from docsearch.encoders.batching import token_batches
from docsearch.encoders.sample_texts import SENTENCES
from docsearch.encoders.weights import cache_dir

log = logging.getLogger(__name__)

METHODS = ("fit", "mle")


# ---------------------------------------------------------------------------------------------
# TwoNN


def neighbour_ratios(points: np.ndarray) -> np.ndarray:
    """μ = r2 / r1 for every point with a non-zero nearest-neighbour distance. (n,) float64.

    Distances are computed from differences, not from |x|² + |y|² - 2x·y: hidden states have a
    few huge coordinates, and the expanded form cancels nearby points to zero.
    """
    x = torch.as_tensor(np.asarray(points, dtype=np.float64))  # (n, dim)
    dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")  # (n, n)
    dist.fill_diagonal_(float("inf"))
    two = torch.topk(dist, 2, dim=1, largest=False).values.numpy()  # (n, 2): r1 <= r2
    keep = two[:, 0] > 0  # exact duplicates carry no information
    return np.asarray(two[keep, 1] / two[keep, 0])


def two_nn(points: np.ndarray, *, method: str = "fit", discard: float = 0.1) -> float:
    """Intrinsic dimension of `points` (n, dim) by TwoNN.

    `fit` (Facco et al.): μ follows a Pareto law, 1 - F(μ) = μ^-d, so -ln(1 - F(μ)) against ln μ
    is a line through the origin with slope d; fitted by least squares after discarding the
    largest `discard` fraction of μ (the noisy tail). `mle`: d = n / Σ ln μ.
    """
    if method not in METHODS:
        raise ValueError(f"unknown TwoNN method {method!r}; use one of {METHODS}")
    mu = np.sort(neighbour_ratios(points))
    if len(mu) < 3:
        raise ValueError("TwoNN needs at least 3 distinct points")
    if method == "mle":
        return float(len(mu) / np.log(mu).sum())
    n = len(mu)
    keep = max(2, int(math.floor(n * (1.0 - discard))))
    x = np.log(mu[:keep])
    y = -np.log(1.0 - np.arange(1, keep + 1) / n)  # empirical F at the i-th smallest μ is i / n
    return float((x * y).sum() / (x * x).sum())


def select_layers(dims: Sequence[float], *, skip: float = 0.2, span: float = 0.1) -> list[int]:
    """Layers to re-route: l* = argmin of `dims` over layers ≥ ⌊skip·N⌋, then ⌊span·N⌋ more.

    `dims[l]` is the intrinsic dimension after decoder layer l (0-indexed), N = len(dims).
    `select_layers([9, 3, 5, 4, 8, 7, 6, 9, 9, 9], skip=0.2) -> [3, 4]`.
    """
    n = len(dims)
    first = min(int(math.floor(skip * n)), n - 1)
    best = first + int(np.argmin(np.asarray(dims[first:], dtype=np.float64)))
    return list(range(best, min(n, best + int(math.floor(span * n)) + 1)))


# ---------------------------------------------------------------------------------------------
# Per-layer profile of a decoder


def calibration_sample(texts: Sequence[str] | None = None) -> list[str]:
    """The texts to calibrate on: the given ones, or the built-in sample with half-texts."""
    if texts is not None:
        return [t for t in texts if t.strip()]
    halves = [" ".join(t.split()[: max(1, len(t.split()) // 2)]) for t in SENTENCES]
    return list(SENTENCES) + halves


def last_token_states(model: Any, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Last-token hidden state after each decoder layer, [(batch, dim)] * N_layers."""
    out = model(**inputs, output_hidden_states=True)
    return [h[:, -1].float().cpu() for h in out.hidden_states[1:]]  # [0] is the embedding output


def layer_dimensions(
    model: Any, tokenizer: Any, texts: Sequence[str], template: str, *, method: str = "fit"
) -> list[float]:
    """TwoNN dimension per decoder layer of the last-token states of `template`-wrapped texts."""
    from docsearch.encoders.decoder_common import left_pad, tokenize

    items = [tokenize(tokenizer, template, t).ids for t in texts]
    per_batch: list[list[torch.Tensor]] = []  # [batch][layer] -> (rows, dim)
    device = next(model.parameters()).device
    for batch in token_batches([len(i) for i in items], 8192):
        inputs = left_pad([items[i] for i in batch], int(tokenizer.pad_token_id))
        with torch.inference_mode():
            per_batch.append(last_token_states(model, {k: v.to(device) for k, v in inputs.items()}))
    return [
        two_nn(torch.cat(layer).numpy(), method=method) for layer in zip(*per_batch, strict=True)
    ]


# ---------------------------------------------------------------------------------------------
# Cached calibration


def cache_file(folder: Path, key: dict[str, Any]) -> Path:
    """Where a calibration for weights `folder` and settings `key` is stored: inside the folder
    when docsearch made it (a converted GGUF), else under the docsearch cache."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    folder = folder.resolve()
    root = cache_dir().resolve()
    if folder.is_relative_to(root):
        return folder / f"docsearch-layers-{digest}.json"
    where = hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    return root / "calibration" / f"{folder.name}-{where}-{digest}.json"


def calibrate(
    model: Any,
    tokenizer: Any,
    folder: Path,
    template: str,
    *,
    texts: Sequence[str] | None = None,
    method: str = "fit",
    skip: float = 0.2,
    refresh: bool = False,
) -> dict[str, Any]:
    """Per-layer intrinsic dimensions and the selected layers, computed once and cached.

    Returns `{"layers": [...], "dims": [...], "n_texts": ..., ...}`.
    """
    sample = calibration_sample(texts)
    key = {"template": template, "method": method, "skip": skip, "texts": _digest(sample)}
    path = cache_file(folder, key)
    if path.exists() and not refresh:
        return dict(json.loads(path.read_text()))
    started = time.monotonic()
    log.info("choosing KV-Embedding layers of %s on %d texts (once)", folder.name, len(sample))
    dims = layer_dimensions(model, tokenizer, sample, template, method=method)
    result = {**key, "n_texts": len(sample), "dims": dims, "layers": select_layers(dims, skip=skip)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)
    log.info("layers %s (%.0f s)", result["layers"], time.monotonic() - started)
    return result


def _digest(texts: Sequence[str]) -> str:
    return hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
