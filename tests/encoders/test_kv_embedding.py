"""KV-Embedding: the checks of notes/encoders.md §5 on tiny random Llama (GQA), Gemma3 and Qwen3.

- An empty layer set (or a prefix bias of -inf) gives exactly the plain model.
- The SDPA path equals a naive per-query softmax with the prefix column (fp64), and the
  explicit-attention model path in every layer, for both RoPE options.
- Batched equals unbatched with left padding and corrected position ids.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from docsearch.encoders.base import get_encoder
from docsearch.encoders.decoder_common import left_pad
from docsearch.encoders.kv_embedding import (
    KVEmbeddingEncoder,
    Reroute,
    calibrate_layers,
    rerouted_sdpa,
    rotate,
    virtual_shifts,
)
from docsearch.errors import UsageError
from tests.encoders import tiny_decoder

ROWS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [3, 4, 5], [7, 8, 9, 10, 11, 12]]
TEXTS = [
    "The lessee shall pay the rent.",
    "Tighten the bolts to 25 newton metres before use, then check them again.",
    "A placebo.",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decoders")
    return {arch: tiny_decoder.folder(arch, root) for arch in ("llama", "gemma3")}


def real(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return inputs["attention_mask"].bool()


# ---------------------------------------------------------------------------------------------
# The attention function against a naive reference


def naive(q, k, v, lengths, scaling, bias, window=None):  # type: ignore[no-untyped-def]
    """Per row, head and query: softmax over [prefix] + visible keys, written out in fp64."""
    batch, heads, n, dim = q.shape
    groups = heads // k.shape[1]
    out = torch.zeros(batch, n, heads, dim, dtype=torch.float64)
    for r in range(batch):
        first = n - int(lengths[r])
        for h in range(heads):
            kv = h // groups
            for i in range(first, n):
                lo = first if window is None else max(first, i - window + 1)
                keys = torch.cat((k[r, kv, -1:], k[r, kv, lo : i + 1]))
                values = torch.cat((v[r, kv, -1:], v[r, kv, lo : i + 1]))
                scores = keys @ q[r, h, i] * scaling
                scores[0] += bias
                w = torch.exp(scores - scores.max())
                out[r, i, h] = (w / w.sum()) @ values
    return out


def padded_mask(lengths: list[int], n: int, window: int | None = None) -> torch.Tensor:
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    allowed = (j <= i) if window is None else (j <= i) & (i - j < window)
    valid = torch.stack([torch.arange(n) >= n - length for length in lengths])  # (batch, n)
    return (allowed[None] & valid[:, None, :])[:, None]  # (batch, 1, n, n)


@pytest.mark.parametrize("bias", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_sdpa_path_equals_naive_softmax_with_prefix_column(bias: float, kv_heads: int) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 7, 8, generator=g, dtype=torch.float64)
    k = torch.randn(3, kv_heads, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(3, kv_heads, 7, 8, generator=g, dtype=torch.float64)
    scaling = 8**-0.5
    # No padding: the causal-kernel path (mask None).
    full = rerouted_sdpa(q, k, v, None, scaling, bias, None)
    torch.testing.assert_close(full, naive(q, k, v, [7, 7, 7], scaling, bias), atol=1e-10, rtol=0)
    # Left padding: the explicit-mask path; only real query rows are defined.
    lengths = [7, 3, 5]
    got = rerouted_sdpa(q, k, v, padded_mask(lengths, 7), scaling, bias, None)
    want = naive(q, k, v, lengths, scaling, bias)
    rows = padded_mask(lengths, 7)[:, 0, -1, :]  # (batch, n) real tokens
    torch.testing.assert_close(got[rows], want[rows], atol=1e-10, rtol=0)


def test_sdpa_path_with_sliding_window_mask() -> None:
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 1, 9, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 1, 9, 8, generator=g, dtype=torch.float64)
    lengths = [9, 6]
    got = rerouted_sdpa(q, k, v, padded_mask(lengths, 9, window=3), 0.3, 1.0, None)
    want = naive(q, k, v, lengths, 0.3, 1.0, window=3)
    rows = padded_mask(lengths, 9)[:, 0, -1, :]
    torch.testing.assert_close(got[rows], want[rows], atol=1e-10, rtol=0)


def test_rotate_matches_transformers_rope_and_virtual_shift_lands_at_minus_one() -> None:
    for arch in ("llama", "gemma3"):
        net = tiny_decoder.model(arch)
        raw = torch.randn(1, 1, 1, 16)  # a pre-RoPE key (batch, kv_heads, 1, dim)
        length = 9
        for layer in (0, 1):  # gemma3: a sliding (base 1e4) and a full (base 1e6) layer
            args = (net.config.layer_types[layer],) if arch == "gemma3" else ()
            cos, sin = net.rotary_emb(raw, torch.tensor([[length - 1]]), *args)
            at_last, _ = apply_rotary_pos_emb(raw, raw, cos, sin)
            torch.testing.assert_close(rotate(raw, cos, sin), at_last)
            shift = virtual_shifts(net, [layer], torch.tensor([length]), torch.float32)[layer]
            cos_m1, sin_m1 = net.rotary_emb(raw, torch.tensor([[-1]]), *args)
            torch.testing.assert_close(rotate(at_last, *shift), rotate(raw, cos_m1, sin_m1))


# ---------------------------------------------------------------------------------------------
# Whole models


@pytest.mark.parametrize("arch", tiny_decoder.ARCHS)
def test_empty_layer_set_and_minus_inf_bias_equal_the_plain_model(arch: str) -> None:
    plain = tiny_decoder.model(arch)
    kv = tiny_decoder.twin(plain, "kv_sdpa")
    inputs = left_pad(ROWS, 0)
    with torch.no_grad():
        want = plain(**inputs).last_hidden_state
        empty = kv(**inputs, reroute=Reroute(frozenset())).last_hidden_state
        closed = kv(**inputs, reroute=Reroute(frozenset({0, 1, 2}), bias=-math.inf))
    # Bit-exact on purpose: without re-routing kv_sdpa hands the same tensors and mask to
    # transformers' own SDPA function, the very computation the plain model runs.
    torch.testing.assert_close(empty[real(inputs)], want[real(inputs)], atol=0, rtol=0)
    torch.testing.assert_close(
        closed.last_hidden_state[real(inputs)], want[real(inputs)], atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("rope", ["keep", "virtual"])
@pytest.mark.parametrize("arch", tiny_decoder.ARCHS)
def test_fast_path_equals_explicit_attention_in_every_layer(arch: str, rope: str) -> None:
    plain = tiny_decoder.model(arch)
    fast, slow = tiny_decoder.twin(plain, "kv_sdpa"), tiny_decoder.twin(plain, "kv_eager")
    for rows in (ROWS, ROWS[:1]):  # left-padded batch (explicit mask) and one row (causal kernel)
        inputs = left_pad(rows, 0)
        lengths = inputs["attention_mask"].sum(-1)
        with torch.no_grad():
            base = plain(**inputs, output_hidden_states=True).hidden_states
            for layers in ([0], [1], [2], [0, 1, 2]):
                shifts = (
                    virtual_shifts(fast, layers, lengths, torch.float32)
                    if rope == "virtual"
                    else {}
                )
                route = Reroute(frozenset(layers), 1.0, shifts)
                got = fast(**inputs, reroute=route, output_hidden_states=True).hidden_states
                want = slow(**inputs, reroute=route).last_hidden_state
                mask = real(inputs)
                torch.testing.assert_close(got[-1][mask], want[mask], atol=2e-5, rtol=1e-5)
                first = min(layers)  # hidden_states[l] is the input of layer l
                torch.testing.assert_close(got[first][mask], base[first][mask])
                assert (got[first + 1] - base[first + 1])[mask].abs().max() > 1e-3


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("rope", ["keep", "virtual"])
def test_batched_equals_unbatched_with_left_padding(
    folders: dict[str, Path], arch: str, rope: str
) -> None:
    enc = KVEmbeddingEncoder(str(folders[arch]), layers=[0, 2], rope=rope, dtype="float32")
    together = enc.encode_documents(TEXTS)
    alone = np.vstack([enc.encode_documents([t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    enc.token_budget = 1  # one row per batch: same vectors, same order
    np.testing.assert_allclose(enc.encode_documents(TEXTS), together, atol=2e-5)


# ---------------------------------------------------------------------------------------------
# The encoder


def test_encoder_output_spec_round_trip_and_eager_path(folders: dict[str, Path]) -> None:
    enc = get_encoder("kv-embedding", model=str(folders["llama"]), layers=[1], dtype="float32")
    vectors = enc.encode_queries(TEXTS)
    assert vectors.shape == (3, 64) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    spec = enc.spec()
    assert spec["encoder"] == "kv-embedding"
    assert spec["options"]["layers"] == [1] and spec["options"]["bias"] == 1.0
    assert "Compress the Query" in spec["options"]["query_template"]
    again = get_encoder(spec["encoder"], **spec["options"], dtype="float32")
    np.testing.assert_allclose(again.encode_queries(TEXTS), vectors, atol=1e-6)
    eager = get_encoder(spec["encoder"], **spec["options"], dtype="float32", attn="eager")
    np.testing.assert_allclose(eager.encode_queries(TEXTS), vectors, atol=2e-5)
    assert not np.allclose(enc.encode_documents(TEXTS), vectors, atol=1e-3)  # per-side prompts


def test_no_layers_is_the_prompt_only_ablation(folders: dict[str, Path]) -> None:
    folder = str(folders["gemma3"])
    kv = KVEmbeddingEncoder(folder, layers=[], dtype="float32")
    plain = get_encoder(
        "mean",
        model=folder,
        document_template=kv.document_template,
        pooling="mean+last",
        dtype="float32",
    )
    np.testing.assert_allclose(kv.encode_documents(TEXTS), plain.encode_documents(TEXTS), atol=1e-5)
    rerouted = KVEmbeddingEncoder(folder, layers=[0], dtype="float32")
    assert not np.allclose(
        rerouted.encode_documents(TEXTS), plain.encode_documents(TEXTS), atol=1e-3
    )


def test_auto_layers_come_from_the_cached_calibration(folders: dict[str, Path]) -> None:
    found = calibrate_layers(str(folders["llama"]), dtype="float32")  # `models calibrate`
    assert len(found["dims"]) == 3
    enc = KVEmbeddingEncoder(str(folders["llama"]), dtype="float32")
    assert enc.layers == found["layers"] and all(0 <= x < 3 for x in enc.layers)
    assert enc.spec()["options"]["layers"] == enc.layers


@pytest.mark.parametrize(
    "options",
    [{"rope": "sideways"}, {"layers": [7]}, {"layers": "first"}, {"pooling": "max"}],
)
def test_bad_options_are_usage_errors(folders: dict[str, Path], options: dict) -> None:
    with pytest.raises(UsageError):
        KVEmbeddingEncoder(str(folders["llama"]), dtype="float32", **options)
