"""M2-BERT: parity with the reference fixtures, the component identities, checkpoint loading,
the padding contract and the registered `m2-bert` encoder (tiny random checkpoints, offline)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from docsearch.encoders.base import encoder_from_spec, get_encoder
from docsearch.encoders.m2_bert import (
    TINY_CONFIG,
    M2BertModel,
    M2Config,
    blockdiag_matmul,
    fft_long_conv,
    load_model,
    load_released_state_dict,
    next_power_of_two,
    read_config,
    save_checkpoint,
)
from docsearch.errors import EncoderUnavailableError, UsageError
from tests.encoders.tiny_m2 import build_tokenizer, save_random_checkpoint

FIXTURES = Path(__file__).parents[1] / "fixtures" / "m2"
ATOL = 1e-10  # float64 parity tolerance (parity/README.md section 1)


def _fixture(name: str) -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURES / f"{name}.safetensors"))


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors: a second intra-op thread only adds contention on a shared 2-core box
    (measured: 8x the CPU time of one thread for the training smoke test)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def reference_model() -> M2BertModel:
    model = M2BertModel(read_config(FIXTURES)).double()
    report = load_released_state_dict(model, _fixture("model"))
    assert report.dropped == report.filled == []
    return model.eval()


def _tiny_model(seed: int = 0, **overrides: object) -> M2BertModel:
    """Random tiny model with every parameter perturbed, so a skipped one shows up."""
    torch.manual_seed(seed)
    model = M2BertModel(M2Config(**{**TINY_CONFIG, "vocab_size": 128, **overrides}))  # type: ignore[arg-type]
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
    return model.eval()


def direct_long_conv(u: torch.Tensor, k_fwd: torch.Tensor, k_rev: torch.Tensor) -> torch.Tensor:
    """The double sum of notes/encoders.md 1.3(4), skip term excluded, written as loops."""
    length = u.shape[-1]
    y = torch.zeros_like(u)
    for t in range(length):
        for s in range(t + 1):
            y[..., t] += k_fwd[:, s] * u[..., t - s]
        for j in range(1, length - t):
            y[..., t] += k_rev[:, j - 1] * u[..., t + j]
    return y


# ---------------------------------------------------------------------------------------------
# Acceptance 0: parity with the reference outputs (float64)


@pytest.mark.parametrize("suffix", ["", "_pad64"])
def test_parity_with_reference_outputs(reference_model: M2BertModel, suffix: str) -> None:
    ids = _fixture("inputs")[f"input_ids{suffix}"]
    expected = _fixture("outputs")
    with torch.no_grad():
        hidden, pooled = reference_model(ids)
    torch.testing.assert_close(hidden, expected[f"last_hidden_state{suffix}"], atol=ATOL, rtol=0)
    torch.testing.assert_close(pooled, expected[f"pooled_output{suffix}"], atol=ATOL, rtol=0)


def test_channel_and_position_blocks_do_not_change_the_outputs(
    reference_model: M2BertModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The long-sequence blocking (mixer channels, MLP positions) splits work, never results:
    with uneven blocks (64 channels as 24 + 24 + 16, 128 positions as 48 + 48 + 32) the model
    still reproduces the reference outputs."""
    from docsearch.encoders import m2_bert

    monkeypatch.setattr(m2_bert, "CHANNEL_BLOCK", 24)
    monkeypatch.setattr(m2_bert, "ROW_BLOCK", 48)
    ids, expected = _fixture("inputs")["input_ids"], _fixture("outputs")
    with torch.no_grad():
        hidden, pooled = reference_model(ids)
    torch.testing.assert_close(hidden, expected["last_hidden_state"], atol=ATOL, rtol=0)
    torch.testing.assert_close(pooled, expected["pooled_output"], atol=ATOL, rtol=0)


def test_parity_of_layer_zero_intermediates(reference_model: M2BertModel) -> None:
    ids, inter = _fixture("inputs")["input_ids"], _fixture("intermediates")
    with torch.no_grad():
        emb = reference_model.embeddings(ids)
        mixed = reference_model.encoder.layer[0].attention(emb)
        out = reference_model.encoder.layer[0].mlp(mixed)
    torch.testing.assert_close(emb, inter["embeddings"], atol=ATOL, rtol=0)
    torch.testing.assert_close(mixed, inter["mixer_out.layer_0"], atol=ATOL, rtol=0)
    torch.testing.assert_close(out, inter["layer_out.layer_0"], atol=ATOL, rtol=0)


def test_state_dict_keys_are_the_released_names() -> None:
    spec = json.loads((FIXTURES / "state_dict_keys.json").read_text())
    ours = M2BertModel(read_config(FIXTURES)).double().state_dict()
    expected = {row["key"]: row["shape"] for row in spec["keys"]}
    assert {f"bert.{k}": list(v.shape) for k, v in ours.items()} == expected


def _reorder_tolerance(kernel: torch.Tensor, order: int) -> float:
    """How far two evaluations of the filter MLP may drift when BLAS sums in another order.

    The length is the row count of every filter linear, so it may change the kernel the BLAS
    picks and the order in which sums of up to `order` products are added (about `order` ulps
    each). The sin(w x) layers (w = 10) amplify that: 2-ulp perturbations of every linear
    output moved the kernels by up to 240 ulps of max|k| on the fixture, hence `order` x 256
    ulps of the kernel's scale (about 1e-12 in float64). A real prefix error (a renormalised
    time grid, features re-sampled for the length) is of order 1e-2.
    """
    return order * 256 * torch.finfo(kernel.dtype).eps * kernel.abs().max().item()


def test_filters_match_fixture_and_shorter_length_is_a_prefix(reference_model: M2BertModel) -> None:
    comp = _fixture("components")
    mixer = reference_model.encoder.layer[0].attention
    with torch.no_grad():
        for name in ("filter_fn", "filter_fn2"):
            k_fwd, k_rev = getattr(mixer, name).kernels(128)
            torch.testing.assert_close(
                k_fwd, comp[f"filters.layer_0.{name}.k_fwd"], atol=ATOL, rtol=0
            )
            torch.testing.assert_close(
                k_rev, comp[f"filters.layer_0.{name}.k_rev"], atol=ATOL, rtol=0
            )
            short_fwd, short_rev = getattr(mixer, name).kernels(40)
            for short, full in ((short_fwd, k_fwd), (short_rev, k_rev)):
                tol = _reorder_tolerance(full, reference_model.config.hyena_filter_order)
                torch.testing.assert_close(short, full[:, :40], atol=tol, rtol=0)


def test_one_freq_tensor_serves_all_six_sin_slots() -> None:
    fn = _tiny_model().encoder.layer[0].attention.filter_fn
    slots = [mlp[i] for mlp in (fn.implicit_filter, fn.implicit_filter_rev) for i in (1, 3, 5)]
    assert all(s.freq is slots[0].freq for s in slots)
    assert sum(1 for n, _ in fn.named_parameters() if n.endswith("freq")) == 1
    freq_keys = [k for k in fn.state_dict() if k.endswith("freq")]
    assert len(freq_keys) == 6


# ---------------------------------------------------------------------------------------------
# Acceptance 1: component identities


@pytest.mark.parametrize("length", [1, 16, 37])
def test_fft_conv_equals_direct_double_sum(length: int) -> None:
    gen = torch.Generator().manual_seed(length)
    u = torch.randn(2, 3, length, generator=gen, dtype=torch.float64)
    k_fwd = torch.randn(3, length, generator=gen, dtype=torch.float64)
    k_rev = torch.randn(3, length, generator=gen, dtype=torch.float64)
    expected = direct_long_conv(u, k_fwd, k_rev)
    torch.testing.assert_close(fft_long_conv(u, k_fwd, k_rev), expected, atol=1e-12, rtol=0)


def test_fft_conv_matches_reference_component_fixture() -> None:
    comp = _fixture("components")
    u, d = comp["conv.u"], comp["conv.D"]
    y = fft_long_conv(u, comp["conv.k_fwd"], comp["conv.k_rev"]) + u * d[:, None]
    torch.testing.assert_close(y, comp["conv.y"], atol=ATOL, rtol=0)


def test_blockdiag_linear_equals_dense_block_diag() -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 6, 5, generator=gen, dtype=torch.float64)  # 4 blocks, 20 -> 24
    x = torch.randn(3, 7, 20, generator=gen, dtype=torch.float64)
    dense = torch.block_diag(*weight)  # (24, 20)
    torch.testing.assert_close(blockdiag_matmul(x, weight), x @ dense.T, atol=1e-12, rtol=0)


def test_blockdiag_linears_match_reference_component_fixture(reference_model: M2BertModel) -> None:
    comp, mlp = _fixture("components"), reference_model.encoder.layer[0].mlp
    with torch.no_grad():
        gated = mlp.gated_layers(comp["blockdiag.gated_layers.x"])
        out = mlp.wo(comp["blockdiag.wo.x"])
    torch.testing.assert_close(gated, comp["blockdiag.gated_layers.y"], atol=ATOL, rtol=0)
    torch.testing.assert_close(out, comp["blockdiag.wo.y"], atol=ATOL, rtol=0)
    # The gate half only sees input channels of its blocks (no permutation, one factor).
    assert mlp.gated_layers.weight.shape == (4, 2 * 256 // 4, 64 // 4)


# ---------------------------------------------------------------------------------------------
# Acceptance 1: loading the released key layout


def _released_state(model: M2BertModel) -> dict[str, torch.Tensor]:
    """The model's tensors as a released checkpoint would carry them, plus keys to drop."""
    state = {f"model.bert.{k}": v.clone() for k, v in model.state_dict().items()}
    state["model.bert.encoder.layer.0.attention.flashfft.f_32_fft"] = torch.randn(4, 4).bfloat16()
    state["model.bert.encoder.layer.1.attention.flashfft.twiddle_factors"] = torch.randn(8)
    state["model.classifier.weight"] = torch.randn(10, 64)
    state["model.cls.predictions.decoder.bias"] = torch.randn(128)
    return state


def test_released_layout_loads_with_no_missing_or_unexpected_keys() -> None:
    source = _tiny_model(seed=1)
    state = _released_state(source)
    assert sum(k.endswith(".freq") for k in state) == 2 * 2 * 6  # layers x filters x aliases
    target = _tiny_model(seed=2)
    report = load_released_state_dict(target, state)
    assert report.filled == []
    assert report.dropped == sorted(k for k in state if "flashfft" in k or ".cl" in k)
    ids = torch.randint(5, 128, (2, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first, again, expected = target(ids)[1], target(ids)[1], source(ids)[1]
    assert torch.equal(first, again)  # deterministic
    assert torch.equal(first, expected)  # every tensor arrived


def test_a_single_freq_alias_is_enough_and_unequal_aliases_are_refused() -> None:
    source = _tiny_model(seed=1)
    state = {
        k: v
        for k, v in source.state_dict().items()
        if not k.endswith(("3.freq", "5.freq", "rev.1.freq"))
    }
    state.pop("embeddings.position_ids")
    report = load_released_state_dict(_tiny_model(seed=2), state)
    assert len(report.filled) == 2 * 2 * 5 + 1  # five aliases per filter, and position_ids
    state["encoder.layer.0.attention.filter_fn.implicit_filter_rev.1.freq"] = torch.zeros(1, 16)
    with pytest.raises(EncoderUnavailableError, match="freq aliases"):
        load_released_state_dict(_tiny_model(seed=2), state)


def test_a_checkpoint_for_another_shape_is_refused_with_a_clear_message() -> None:
    state = _released_state(_tiny_model())
    del state["model.bert.pooler.dense.weight"]
    with pytest.raises(EncoderUnavailableError, match="1 missing keys"):
        load_released_state_dict(_tiny_model(), state)
    with pytest.raises(EncoderUnavailableError, match="does not match"):
        load_released_state_dict(_tiny_model(hidden_size=32), _released_state(_tiny_model()))


def test_pytorch_model_bin_with_released_keys_loads(tmp_path: Path) -> None:
    source = _tiny_model(seed=3)
    save_checkpoint(source, tmp_path, tokenizer=build_tokenizer())
    state = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").unlink()
    torch.save(_released_state(source) | state, tmp_path / "pytorch_model.bin")
    loaded = load_model(tmp_path, dtype=torch.float32)
    ids = torch.randint(5, 128, (1, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        # Bit-exact on purpose: the same float32 weights through the same code and shapes.
        torch.testing.assert_close(loaded(ids)[1], source(ids)[1], atol=0, rtol=0)


def _float64_checkpoint(folder: Path) -> dict[str, torch.Tensor]:
    """Write a tiny released-layout folder whose weights need all 53 bits of float64."""
    torch.manual_seed(4)
    source = M2BertModel(M2Config(**{**TINY_CONFIG, "vocab_size": 128})).to(torch.float64)
    with torch.no_grad():
        for param in source.parameters():
            param.add_(0.1 * torch.randn_like(param))  # float64 noise: not float32 values
    save_checkpoint(source, folder)
    state = load_file(str(folder / "model.safetensors"))
    assert state["bert.pooler.dense.weight"].dtype == torch.float64
    assert not torch.equal(
        state["bert.pooler.dense.weight"].float().double(), state["bert.pooler.dense.weight"]
    )
    return state


def test_float64_checkpoint_loads_exactly_in_float64(tmp_path: Path) -> None:
    state = _float64_checkpoint(tmp_path)
    loaded = load_model(tmp_path, dtype=torch.float64)
    for key, value in loaded.state_dict().items():
        assert value.dtype == state[f"bert.{key}"].dtype, key
        torch.testing.assert_close(
            value, state[f"bert.{key}"], atol=1e-10, rtol=0, msg=lambda m, k=key: f"{k}: {m}"
        )
    # The same checkpoint put into a model built in float64 by hand: the expected outputs.
    expected = M2BertModel(read_config(tmp_path)).to(torch.float64)
    load_released_state_dict(expected, state)
    ids = torch.randint(5, 128, (2, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for got, want in zip(loaded.eval()(ids), expected.eval()(ids), strict=True):
            assert got.dtype == torch.float64
            torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def test_reference_fixture_loads_through_load_model_to_float64_parity() -> None:
    """The golden float64 checkpoint, loaded the way the encoder loads it (no hand cast)."""
    model = load_model(FIXTURES, dtype=torch.float64)
    inputs, expected = _fixture("inputs"), _fixture("outputs")
    with torch.no_grad():
        hidden, pooled = model(inputs["input_ids"])
    torch.testing.assert_close(hidden, expected["last_hidden_state"], atol=ATOL, rtol=0)
    torch.testing.assert_close(pooled, expected["pooled_output"], atol=ATOL, rtol=0)


def test_bfloat16_model_keeps_float32_filter_weights(tmp_path: Path) -> None:
    """The filter MLPs stay float32 in a 16-bit model; their weights must not pass through 16 bits."""
    state = _float64_checkpoint(tmp_path)
    loaded = load_model(tmp_path, dtype=torch.bfloat16)
    key = "encoder.layer.0.attention.filter_fn.implicit_filter.2.weight"
    weight = loaded.state_dict()[key]
    assert weight.dtype == torch.float32
    eps = torch.finfo(torch.float32).eps  # one float32 rounding of the checkpoint value
    want = state[f"bert.{key}"]
    assert ((weight.double() - want).abs() <= eps * want.abs()).all()
    assert loaded.state_dict()["pooler.dense.weight"].dtype == torch.bfloat16


def test_unsupported_variants_are_refused() -> None:
    with pytest.raises(EncoderUnavailableError, match="residual_long_conv"):
        M2Config.from_dict({"hyena_filter_order": 16, "residual_long_conv": False})
    with pytest.raises(EncoderUnavailableError, match="no M2 fields"):
        M2Config.from_dict({"model_type": "bert", "hidden_size": 768})


# ---------------------------------------------------------------------------------------------
# Padding contract


def test_output_depends_on_the_padded_length(reference_model: M2BertModel) -> None:
    """Documented behaviour of the reference: pads take part in every convolution."""
    inputs = _fixture("inputs")
    with torch.no_grad():
        pooled_128 = reference_model(inputs["input_ids"])[1]
        pooled_64 = reference_model(inputs["input_ids_pad64"])[1]
    assert (pooled_128 - pooled_64).abs().max() > 0.1


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_random_checkpoint(tmp_path_factory.mktemp("m2") / "tiny", words=["lease", "tenant"])


def _manual_pooled(folder: Path, ids: list[int], length: int) -> np.ndarray:
    model = load_model(folder)
    padded = torch.zeros(1, length, dtype=torch.long)
    padded[0, : len(ids)] = torch.tensor(ids)
    with torch.no_grad():
        pooled = model(padded)[1][0].numpy()
    return pooled / np.linalg.norm(pooled)


def test_encoder_pads_with_zero_to_the_configured_length(tiny_folder: Path) -> None:
    encoder = get_encoder("m2-bert", model=str(tiny_folder))
    text = "The tenant pays the lease."
    ids = encoder.input_ids(text)  # type: ignore[attr-defined]
    assert ids[0] == 2 and ids[-1] == 3  # [CLS] ... [SEP] of the test tokenizer
    vector = encoder.encode_documents([text])[0]
    np.testing.assert_allclose(vector, _manual_pooled(tiny_folder, ids, 128), atol=1e-6)
    assert not np.allclose(vector, _manual_pooled(tiny_folder, ids, 16), atol=1e-3)


def test_pow2_padding_is_an_option_recorded_in_the_spec(tiny_folder: Path) -> None:
    encoder = get_encoder("m2-bert", model=str(tiny_folder), padding="pow2")
    text = "the tenant and the lease"
    ids = encoder.input_ids(text)  # type: ignore[attr-defined]
    assert encoder.padded_length(len(ids)) == next_power_of_two(len(ids)) == 8  # type: ignore[attr-defined]
    np.testing.assert_allclose(
        encoder.encode_documents([text])[0], _manual_pooled(tiny_folder, ids, 8), atol=1e-6
    )
    assert encoder.spec()["options"]["padding"] == "pow2"
    assert "padding" not in get_encoder("m2-bert", model=str(tiny_folder)).spec()["options"]


# ---------------------------------------------------------------------------------------------
# The registered encoder


def test_encoder_end_to_end_from_a_released_layout_folder(tiny_folder: Path) -> None:
    assert {p.name for p in tiny_folder.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    assert json.loads((tiny_folder / "config.json").read_text())["model_type"] == "m2_bert"
    encoder = get_encoder("m2-bert", model=str(tiny_folder))
    assert (encoder.dim, encoder.max_tokens) == (64, 126)
    texts = ["The tenant pays the lease.", "A clause about the court.", ""]
    docs = encoder.encode_documents(texts)
    assert docs.dtype == np.float32 and docs.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(encoder.encode_queries(texts), docs)  # no prompts in M2
    np.testing.assert_allclose(encoder.encode_documents(texts[1:2])[0], docs[1], atol=1e-6)
    assert not np.allclose(docs[0], docs[1], atol=1e-3)
    assert encoder.spec()["options"] == {"model": str(tiny_folder.resolve())}
    rebuilt = encoder_from_spec(encoder.spec())
    np.testing.assert_array_equal(rebuilt.encode_documents(texts), docs)
    assert encoder.encode_documents([]).shape == (0, 64)


def test_longer_text_is_truncated_with_a_warning_and_counted(
    tiny_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    encoder = get_encoder("m2-bert", model=str(tiny_folder))
    long_text = " ".join(["lease"] * 300)
    assert encoder.count_tokens([long_text]) == [300]
    with caplog.at_level(logging.WARNING, logger="docsearch.encoders.m2_bert"):
        vector = encoder.encode_documents([long_text])[0]
    assert "truncated to max_tokens=126" in caplog.text
    assert encoder.truncated == 1  # type: ignore[attr-defined]
    cut = encoder.input_ids(" ".join(["lease"] * 126))  # type: ignore[attr-defined]
    np.testing.assert_allclose(vector, _manual_pooled(tiny_folder, cut, 128), atol=1e-6)


def test_token_spans_map_back_to_the_text(tiny_folder: Path) -> None:
    encoder = get_encoder("m2-bert", model=str(tiny_folder))
    text = "Tenant: lease 12"
    spans = encoder.token_spans(text)
    assert len(spans) == encoder.count_tokens([text])[0]
    assert text[spans[0][0] : spans[0][1]].lower() == "tenant"


def test_bfloat16_stays_close_to_float32(tiny_folder: Path) -> None:
    texts = ["The tenant pays the lease.", "A clause about the court."]
    fp32 = get_encoder("m2-bert", model=str(tiny_folder)).encode_documents(texts)
    bf16_encoder = get_encoder("m2-bert", model=str(tiny_folder), dtype="bfloat16")
    assert bf16_encoder.spec()["options"]["dtype"] == "bfloat16"
    cosines = (fp32 * bf16_encoder.encode_documents(texts)).sum(axis=1)
    assert cosines.min() > 0.99


def test_bad_options_and_missing_tokenizer_raise_domain_errors(
    tiny_folder: Path, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="padding must be one of"):
        get_encoder("m2-bert", model=str(tiny_folder), padding="longest")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((tiny_folder / name).read_bytes())
    with pytest.raises(EncoderUnavailableError, match="bert-base-uncased tokenizer files"):
        get_encoder("m2-bert", model=str(bare))  # HF_HUB_OFFLINE: no download
    encoder = get_encoder("m2-bert", model=str(bare), tokenizer=str(tiny_folder))
    assert encoder.spec()["options"]["tokenizer"] == str(tiny_folder)


def test_uncased_vocab_with_do_lower_case_false_still_lowercases(
    tiny_folder: Path, tmp_path: Path
) -> None:
    """The released repos ship `do_lower_case: false` beside the uncased vocab.txt; transformers 5
    would then map every capitalised word to [UNK]."""
    vocab = build_tokenizer(["lease", "tenant"]).get_vocab()
    folder = tmp_path / "vocab_only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((tiny_folder / name).read_bytes())
    (folder / "vocab.txt").write_text("\n".join(sorted(vocab, key=vocab.__getitem__)) + "\n")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": False})
    )
    encoder = get_encoder("m2-bert", model=str(folder))
    ids = encoder.input_ids("Tenant LEASE")  # type: ignore[attr-defined]
    assert ids == [vocab["[CLS]"], vocab["tenant"], vocab["lease"], vocab["[SEP]"]]


def test_saved_checkpoint_round_trips_exactly(tmp_path: Path) -> None:
    source = _tiny_model(seed=4)
    save_checkpoint(source, tmp_path)
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert all(k.startswith("bert.") for k in saved)
    saved["bert.pooler.dense.bias"] += 1  # the file, not the model, is what gets loaded
    save_file(saved, str(tmp_path / "model.safetensors"))
    loaded = load_model(tmp_path)
    torch.testing.assert_close(loaded.pooler.dense.bias, source.pooler.dense.bias + 1)


def test_cli_indexes_a_folder_with_a_local_m2_checkpoint(tiny_folder: Path, tmp_path: Path) -> None:
    from tests.helpers import SAMPLES, run_cli

    db = str(tmp_path / "db")
    built = run_cli("index", str(SAMPLES), "--encoder", "m2-bert", "--model", str(tiny_folder),
                    "--collection", "m2", "--db", db)  # fmt: skip
    assert built.returncode == 0, built.stderr
    info = json.loads(run_cli("collections", "info", "m2", "--db", db).stdout)
    assert info["encoder_spec"]["encoder"] == "m2-bert" and info["files"] >= 5
    assert info["encoder_spec"]["options"]["model"] == str(tiny_folder.resolve())
    found = run_cli("search", "tenant lease", "--collection", "m2", "--mode", "vector",
                    "--db", db, "--json")  # fmt: skip
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits and all(set(h["scores"]) == {"dense", "fused"} for h in hits)
