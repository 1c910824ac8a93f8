"""NV-Embed encoder: parity with the reference fixtures, the pool-mask rule, per-token latent
attention, strict loading by the released prefixes, adapter folders and the registered encoder.

Fixtures (`tests/fixtures/nv_embed/`, see its README): `reference/` is the tiny random NV-Embed-v2
of `shared/parity/nv_embed/` with the reference's float32 outputs; `mistral_tokenizer/` is the
real NV-Embed tokenizer (Mistral-7B vocabulary), for the pool-mask rule with SentencePiece.
"""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, LlamaConfig

from docsearch.encoders.base import available, encoder_from_spec, get_encoder
from docsearch.encoders.llm2vec import bidirectional_hidden_states, load_decoder, lora_config
from docsearch.encoders.nv_embed import (
    DEFAULT_QUERY_INSTRUCTION,
    LICENCE,
    RELEASED_MODELS,
    LatentAttentionConfig,
    LatentAttentionModel,
    NVEmbedEncoder,
    build_inputs,
    instruction_length,
    licence_for,
    load_nv_tokenizer,
    load_released,
    masked_mean,
    pool_hidden,
    save_adapter_folder,
)
from docsearch.errors import EncoderUnavailableError, UsageError
from tests.conftest import FIXTURES
from tests.encoders.tiny_nv_embed import build_tokenizer, save_random_released

ROOT = FIXTURES / "nv_embed"
REFERENCE = ROOT / "reference"
SIDES = ("query", "passage")
MAX_LENGTH = 64  # the fixtures' max_length
# README section 3 "Tolerances (NV-Embed)"
ATOL = {"last_hidden_state": 2e-5, "latent_tokens": 5e-5, "sentence_embeddings": 1e-5}


def released_folder(target: Path) -> Path:
    """The reference checkpoint as a model folder: config, weights and tokenizer side by side."""
    for name in ("config.json", "model.safetensors"):
        shutil.copy2(REFERENCE / name, target / name)
    shutil.copytree(REFERENCE / "tokenizer", target, dirs_exist_ok=True)
    return target


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return released_folder(tmp_path_factory.mktemp("nv_reference"))


@pytest.fixture(scope="module")
def reference_io() -> tuple[dict, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    meta = json.loads((REFERENCE / "inputs.json").read_text())
    return (
        meta,
        load_file(REFERENCE / "inputs.safetensors"),
        load_file(REFERENCE / "outputs.safetensors"),
    )


@pytest.fixture(scope="module")
def tiny_released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_random_released(tmp_path_factory.mktemp("nv_tiny"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------
# Parity with the reference fixtures


def test_inputs_and_pool_masks_match_reference_exactly(
    reference_dir: Path, reference_io: tuple
) -> None:
    meta, inputs, _ = reference_io
    tokenizer = load_nv_tokenizer(reference_dir, None)
    for side in SIDES:
        assert (
            instruction_length(tokenizer, meta[side]["instruction"])
            == meta[side]["instruction_lens=len(tokenizer.tokenize(instruction))"]
        )
        batch = build_inputs(
            tokenizer, meta[side]["prompts"], meta[side]["instruction"], MAX_LENGTH
        )
        for key in ("input_ids", "attention_mask", "pool_mask"):
            assert torch.equal(batch[key], inputs[f"{side}.{key}"]), (side, key)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_decoder_latent_tokens_and_embeddings_match_reference(
    reference_dir: Path, reference_io: tuple, impl: str
) -> None:
    _, inputs, outputs = reference_io
    decoder, latent = load_released(reference_dir, attn_implementation=impl)
    for side in SIDES:
        with torch.no_grad():
            hidden = bidirectional_hidden_states(
                decoder, inputs[f"{side}.input_ids"], inputs[f"{side}.attention_mask"]
            )
            tokens = latent.tokens(hidden)
            pooled = latent(hidden, inputs[f"{side}.pool_mask"])
        got = {"last_hidden_state": hidden, "latent_tokens": tokens, "sentence_embeddings": pooled}
        for key, value in got.items():
            torch.testing.assert_close(value, outputs[f"{side}.{key}"], atol=ATOL[key], rtol=0)


def test_encoder_matches_reference_embeddings(reference_dir: Path, reference_io: tuple) -> None:
    meta, _, outputs = reference_io
    assert meta["query"]["instruction"] == DEFAULT_QUERY_INSTRUCTION  # the model card's default
    encoder = get_encoder("nv-embed", model=str(reference_dir), max_length=MAX_LENGTH)
    queries = encoder.encode_queries(meta["query"]["prompts"])
    passages = encoder.encode_documents(meta["passage"]["prompts"])
    assert queries.dtype == np.float32
    np.testing.assert_allclose(
        queries, outputs["query.sentence_embeddings"].numpy(), atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(
        passages, outputs["passage.sentence_embeddings"].numpy(), atol=1e-5, rtol=0
    )


def test_real_tokenizer_pool_masks_match_reference(tmp_path: Path) -> None:
    """Mistral's SentencePiece: 18 instruction pieces, BOS + instruction masked out exactly."""
    folder = ROOT / "mistral_tokenizer"
    shutil.copy2(folder / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    (tmp_path / "tokenizer.json").write_bytes(
        lzma.decompress((folder / "tokenizer.json.xz").read_bytes())
    )
    tokenizer = load_nv_tokenizer(tmp_path, None)
    ref = json.loads((REFERENCE / "real_tokenizer_pool_mask.json").read_text())
    instruction = ref["instruction"]
    assert tokenizer.tokenize(instruction) == ref["tokenize(instruction)"]
    assert instruction_length(tokenizer, instruction) == 18
    texts = [r["text"].removeprefix(instruction).removesuffix("</s>") for r in ref["rows"]]
    batch = build_inputs(tokenizer, texts, instruction, MAX_LENGTH)
    for row, expected in enumerate(ref["rows"]):
        for key in ("input_ids", "attention_mask", "pool_mask"):
            assert batch[key][row].tolist() == expected[key], (row, key)
        first_pooled = int(batch["pool_mask"][row].argmax())
        assert (
            tokenizer.convert_ids_to_tokens(expected["input_ids"][first_pooled])
            == expected["first_pooled_token"]
        )


# ---------------------------------------------------------------------------------------------
# The pool-mask rule, EOS and padding


def test_pool_mask_zeroes_exactly_the_tokenize_count(reference_dir: Path) -> None:
    """The literal rule: BOS takes one zeroed slot, so the last instruction token stays pooled."""
    tokenizer = load_nv_tokenizer(reference_dir, None)
    instruction = DEFAULT_QUERY_INSTRUCTION
    n = instruction_length(tokenizer, instruction)
    batch = build_inputs(
        tokenizer, ["are judo throws allowed in wrestling ?", "how"], instruction, MAX_LENGTH
    )
    assert n == len(tokenizer.tokenize(instruction)) == 14
    assert batch["pool_mask"][:, :n].sum() == 0
    assert torch.equal(batch["pool_mask"][:, n:], batch["attention_mask"][:, n:])
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    assert tokens[0] == "<s>" and tokens[n] == ":"  # the instruction's last token is pooled


def test_no_instruction_pools_every_token_eos_appended_right_padded(reference_dir: Path) -> None:
    tokenizer = load_nv_tokenizer(reference_dir, None)
    batch = build_inputs(
        tokenizer, ["judo throws are allowed in freestyle wrestling .", "to become"], "", MAX_LENGTH
    )
    assert torch.equal(batch["pool_mask"], batch["attention_mask"])
    lengths = batch["attention_mask"].sum(1)
    for row, n in enumerate(lengths.tolist()):
        assert batch["input_ids"][row, 0] == tokenizer.bos_token_id
        assert batch["input_ids"][row, n - 1] == tokenizer.eos_token_id  # EOS appended
        assert batch["attention_mask"][row, :n].all() and not batch["attention_mask"][row, n:].any()


def test_truncation_can_cut_the_eos(reference_dir: Path) -> None:
    tokenizer = load_nv_tokenizer(reference_dir, None)
    batch = build_inputs(tokenizer, ["judo throws are allowed in freestyle wrestling ."], "", 5)
    assert batch["input_ids"].shape[1] == 5
    assert tokenizer.eos_token_id not in batch["input_ids"][0].tolist()


# ---------------------------------------------------------------------------------------------
# The latent block is per token


def small_block(seed: int = 0) -> LatentAttentionModel:
    torch.manual_seed(seed)
    return LatentAttentionModel(LatentAttentionConfig(16, 32, 32, 4, 8)).eval()


def test_latent_block_is_per_token_permutation_and_padding() -> None:
    block = small_block()
    hidden = torch.randn(2, 7, 32)
    with torch.no_grad():
        out = block.tokens(hidden)
        perm = torch.randperm(7)
        permuted = block.tokens(hidden[:, perm])
        padded = block.tokens(torch.cat([hidden, 5 * torch.randn(2, 4, 32)], dim=1))
        alone = block.tokens(hidden[1:])
    torch.testing.assert_close(permuted, out[:, perm], atol=1e-6, rtol=0)
    torch.testing.assert_close(padded[:, :7], out, atol=1e-6, rtol=0)
    torch.testing.assert_close(alone, out[1:], atol=1e-6, rtol=0)
    assert (out - hidden).abs().max() > 1e-2  # the block does change the tokens


def test_pooling_ignores_pad_positions_and_identity_start_is_mean_pooling() -> None:
    block = small_block()
    hidden = torch.randn(1, 5, 32)
    mask = torch.tensor([[0, 1, 1, 1, 0]])
    padded = torch.cat([hidden, torch.randn(1, 3, 32)], dim=1)
    with torch.no_grad():
        a = pool_hidden(block, hidden, mask)
        b = pool_hidden(
            block, padded, torch.cat([mask, torch.zeros(1, 3, dtype=torch.long)], dim=1)
        )
        block.start_as_identity()
        identity = pool_hidden(block, hidden, mask)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    torch.testing.assert_close(block.tokens(hidden), hidden)
    expected = torch.nn.functional.normalize(hidden[:, 1:4].mean(1), dim=-1)
    torch.testing.assert_close(identity, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(pool_hidden(None, hidden, mask), expected, atol=1e-6, rtol=0)
    assert masked_mean(hidden, torch.zeros(1, 5)).abs().sum() == 0  # empty mask: zeros, no NaN


def test_batched_embeddings_equal_single_ones(tiny_released: Path) -> None:
    encoder = NVEmbedEncoder(str(tiny_released), batch_size=3)
    texts = ["short text", "a much longer text about notice periods and termination clauses", "x"]
    together = encoder.encode_documents(texts)
    single = np.concatenate([encoder.encode_documents([t]) for t in texts])
    np.testing.assert_allclose(together, single, atol=2e-6, rtol=0)


# ---------------------------------------------------------------------------------------------
# Strict loading by the released prefixes


def rewrite(folder: Path, target: Path, change) -> Path:  # type: ignore[no-untyped-def]
    shutil.copytree(folder, target)
    state = load_file(target / "model.safetensors")
    change(state)
    save_file(state, str(target / "model.safetensors"))
    return target


def test_released_prefixes_load_strictly(tiny_released: Path) -> None:
    state = load_file(tiny_released / "model.safetensors")
    assert {k.split(".", 1)[0] for k in state} == {"embedding_model", "latent_attention_model"}
    assert "latent_attention_model.cross_attend_blocks.1.fn.net.2.bias" in state
    decoder, latent = load_released(tiny_released)
    for key, value in latent.state_dict().items():
        assert torch.equal(value, state[f"latent_attention_model.{key}"]), key
    for key, value in decoder.state_dict().items():
        assert torch.equal(value, state[f"embedding_model.{key}"]), key


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.pop("latent_attention_model.latents"),
        lambda s: s.pop("embedding_model.norm.weight"),
        lambda s: s.update({"latent_attention_model.extra.weight": torch.zeros(2)}),
        lambda s: s.update({"embedding_model.layers.9.mlp.up_proj.weight": torch.zeros(2)}),
        lambda s: s.update({"lm_head.weight": torch.zeros(2)}),
        lambda s: s.update({"latent_attention_model.latents": torch.zeros(3, 64)}),
    ],
    ids=[
        "missing-latent",
        "missing-decoder",
        "extra-latent",
        "extra-decoder",
        "no-prefix",
        "shape",
    ],
)
def test_mismatched_checkpoints_are_refused(tiny_released: Path, tmp_path: Path, change) -> None:  # type: ignore[no-untyped-def]
    folder = rewrite(tiny_released, tmp_path / "bad", change)
    with pytest.raises(EncoderUnavailableError):
        load_released(folder)


def test_sharded_checkpoint_loads_like_a_single_file(tiny_released: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    shutil.copytree(tiny_released, folder)
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = sorted(state)
    shards = {
        "model-00001-of-00002.safetensors": keys[::2],
        "model-00002-of-00002.safetensors": keys[1::2],
    }
    for name, names in shards.items():
        save_file({k: state[k] for k in names}, str(folder / name))
    weight_map = {k: name for name, names in shards.items() for k in names}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    a = NVEmbedEncoder(str(tiny_released)).encode_documents(["the rent is due monthly"])
    b = NVEmbedEncoder(str(folder)).encode_documents(["the rent is due monthly"])
    np.testing.assert_array_equal(a, b)


def test_latent_width_must_match_the_decoder(tiny_released: Path, tmp_path: Path) -> None:
    folder = tmp_path / "wide"
    shutil.copytree(tiny_released, folder)
    config = json.loads((folder / "config.json").read_text())
    config["latent_attention_config"]["latent_dim"] = 128
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(EncoderUnavailableError, match="hidden size"):
        load_released(folder)


# ---------------------------------------------------------------------------------------------
# Adapter folders (what training writes)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama decoder folder with the tiny byte-level tokenizer."""
    folder = tmp_path_factory.mktemp("llama")
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(1)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_adapter_folder_with_lora_loads_and_matches_manual_merge(
    llama_dir: Path, tmp_path: Path
) -> None:
    from peft import get_peft_model

    decoder = load_decoder(llama_dir)
    peft_model = get_peft_model(decoder, lora_config(r=4, alpha=8))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)  # a LoRA that changes the outputs
    block = small_block(seed=3)
    tokenizer = load_nv_tokenizer(llama_dir, None)
    settings = {
        "max_length": 48,
        "query_instruction": "Instruct: find it\nQuery: ",
        "document_instruction": "",
    }
    out = save_adapter_folder(
        tmp_path / "adapter",
        base=str(llama_dir),
        latent=block,
        tokenizer=tokenizer,
        settings=settings,
        lora_model=peft_model,
    )
    encoder = get_encoder("nv-embed", adapter=str(out))  # the base comes from the adapter
    assert encoder.spec()["options"]["model"] == str(llama_dir)
    assert encoder.max_length == 48 and encoder.query_instruction == "Instruct: find it\nQuery: "
    texts = ["the rent is due monthly", "notice"]
    merged = peft_model.merge_and_unload().eval()
    batch = build_inputs(tokenizer, texts, "", 48)
    with torch.no_grad():
        hidden = bidirectional_hidden_states(merged, batch["input_ids"], batch["attention_mask"])
        expected = pool_hidden(block, hidden, batch["pool_mask"]).numpy()
    np.testing.assert_allclose(encoder.encode_documents(texts), expected, atol=1e-5, rtol=0)
    plain = get_encoder("nv-embed", model=str(llama_dir), pooling="mean").encode_documents(texts)
    assert np.abs(plain - expected).max() > 1e-3  # LoRA and block both changed the vectors


def test_plain_decoder_needs_an_adapter_or_mean_pooling(llama_dir: Path) -> None:
    with pytest.raises(EncoderUnavailableError, match="latent-attention block"):
        get_encoder("nv-embed", model=str(llama_dir))
    encoder = get_encoder("nv-embed", model=str(llama_dir), pooling="mean", max_length=32)
    tokenizer = load_nv_tokenizer(llama_dir, None)
    batch = build_inputs(tokenizer, ["the rent"], DEFAULT_QUERY_INSTRUCTION, 32)
    decoder = load_decoder(llama_dir)
    with torch.no_grad():
        hidden = bidirectional_hidden_states(decoder, batch["input_ids"], batch["attention_mask"])
    expected = torch.nn.functional.normalize(masked_mean(hidden, batch["pool_mask"]), dim=-1)
    np.testing.assert_allclose(
        encoder.encode_queries(["the rent"]), expected.numpy(), atol=1e-5, rtol=0
    )


def test_adapter_option_refuses_other_folders(llama_dir: Path) -> None:
    with pytest.raises(EncoderUnavailableError, match="not an NV-Embed adapter"):
        get_encoder("nv-embed", model=str(llama_dir), adapter=str(llama_dir))


# ---------------------------------------------------------------------------------------------
# The registered encoder


def test_registered_spec_round_trip_and_unit_vectors(tiny_released: Path) -> None:
    assert "nv-embed" in available()
    encoder = get_encoder("nv-embed", model=str(tiny_released), max_length=40, batch_size=2)
    spec = encoder.spec()
    assert spec["encoder"] == "nv-embed" and spec["dim"] == 64
    assert "batch_size" not in spec["options"] and spec["options"]["pooling"] == "latent"
    vectors = encoder.encode_documents(["first text", "second, longer text about rent", ""])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    rebuilt = encoder_from_spec(spec)
    np.testing.assert_allclose(rebuilt.encode_documents(["first text"]), vectors[:1], atol=1e-6)
    assert encoder.encode_queries([]).shape == (0, 64)
    # max_length 40 = BOS + text + EOS: 38 text tokens
    assert encoder.max_tokens == 38
    assert encoder.count_tokens(["first text"])[0] == len(encoder.token_spans("first text"))


def test_queries_and_documents_differ_by_instruction(tiny_released: Path) -> None:
    encoder = get_encoder("nv-embed", model=str(tiny_released))
    q = encoder.encode_queries(["termination notice"])
    d = encoder.encode_documents(["termination notice"])
    assert np.abs(q - d).max() > 1e-4
    same = get_encoder("nv-embed", model=str(tiny_released), query_instruction="")
    np.testing.assert_allclose(same.encode_queries(["termination notice"]), d, atol=1e-6)


def test_licence_is_surfaced() -> None:
    assert LICENCE == "CC-BY-NC-4.0"
    assert {row[0] for row in RELEASED_MODELS} == {"nvidia/NV-Embed-v1", "nvidia/NV-Embed-v2"}
    assert all(row[1] == LICENCE for row in RELEASED_MODELS)
    assert licence_for("nvidia/NV-Embed-v2") == licence_for("nvidia/NV-Embed-v1@main") == LICENCE
    assert licence_for("./my-folder", {"model_type": "nvembed"}) == LICENCE
    assert licence_for("smollm2-135m", {"model_type": "llama"}) is None


def test_released_model_warns_about_the_licence(
    reference_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="docsearch.encoders.nv_embed"):
        encoder = NVEmbedEncoder(str(reference_dir), max_length=MAX_LENGTH)
    assert encoder.licence == LICENCE
    assert "non-commercial" in caplog.text


def test_bad_options_are_usage_errors(tiny_released: Path) -> None:
    with pytest.raises(UsageError, match="pooling"):
        NVEmbedEncoder(str(tiny_released), pooling="cls")
    with pytest.raises(UsageError, match="dtype"):
        NVEmbedEncoder(str(tiny_released), dtype="int8")
    with pytest.raises(UsageError, match="max_length"):
        NVEmbedEncoder(str(tiny_released), max_length=8)  # the query instruction alone is longer


def test_missing_hub_model_is_a_clear_error() -> None:
    with pytest.raises(EncoderUnavailableError, match="HF_HUB_OFFLINE"):
        get_encoder("nv-embed")  # nvidia/NV-Embed-v2 is not cached here


def test_cli_indexes_and_searches_with_the_tiny_released_folder(
    tiny_released: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from docsearch.app.cli import app

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "lease.txt").write_text("The lessee shall pay the rent on the first day of each month.")
    (docs / "trial.txt").write_text("Patients were randomised to the study drug or a placebo.")
    db = str(tmp_path / "db")
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["index", str(docs), "--encoder", "nv-embed", "--model", str(tiny_released), "--db", db],
    )
    assert result.exit_code == 0, result.output
    found = runner.invoke(app, ["search", "rent", "--json", "--mode", "vector", "--db", db])
    assert found.exit_code == 0, found.output
    assert len(json.loads(found.stdout)) == 2
