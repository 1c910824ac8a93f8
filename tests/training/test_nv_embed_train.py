"""NV-Embed training on a tiny random Llama: positive-aware mining, batching, the stage-2 loss
without in-batch negatives, the state cache, and short runs whose folders the encoder loads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModel, LlamaConfig

from docsearch.encoders.base import get_encoder
from docsearch.encoders.llm2vec import load_decoder
from docsearch.encoders.nv_embed import (
    LatentAttentionConfig,
    LatentAttentionModel,
    load_nv_tokenizer,
)
from docsearch.errors import UsageError
from docsearch.training.losses import mnrl
from docsearch.training.nv_embed_train import (
    Document,
    Example,
    StateCache,
    TrainConfig,
    batch_negatives,
    batches,
    cached_embed,
    embed_queries,
    live_embed,
    mine_negatives,
    own_negatives_loss,
    stage2_loss,
    train_nv_embed,
)
from tests.encoders.tiny_nv_embed import build_tokenizer, save_random_released

TOPICS = [
    "rent lease", "patients placebo", "bolts newton", "contract termination",
    "table results", "study drug", "first month", "written notice",
]  # fmt: skip
EXAMPLES = [
    Example(f"what about {t}?", f"The document discusses {t} in detail. {t}.", f"d{i}")
    for i, t in enumerate(TOPICS)
]
SMALL = {"latents": 16, "heads": 2, "max_length": 48, "batch_size": 4}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("llama")
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------
# Pure helpers


def test_batches_never_repeat_a_query_or_a_positive_document() -> None:
    shared = [
        Example("q1", "doc a", "a"), Example("q2", "doc a", "a"), Example("q1", "doc b", "b"),
        Example("q3", "doc c", "c"), Example("q4", "doc d", "d"), Example("q5", "doc e", "e"),
    ]  # fmt: skip
    stream = batches(shared, 3, seed=0)
    seen = []
    for _ in range(8):
        batch = next(stream)
        assert len({e.positive_id for e in batch}) == len(batch)
        assert len({e.query for e in batch}) == len(batch)
        seen += batch
    assert set(seen) == set(shared)


def test_stage2_loss_uses_only_the_rows_own_negatives() -> None:
    torch.manual_seed(0)
    q, p = torch.randn(3, 8), torch.randn(3, 8)
    negatives = torch.randn(3, 2, 8)
    present = torch.tensor([[True, True], [True, False], [True, True]])
    loss = own_negatives_loss(q, p, negatives, present, scale=20.0)
    qn, pn, nn_ = F.normalize(q, dim=-1), F.normalize(p, dim=-1), F.normalize(negatives, dim=-1)
    manual = []
    for i in range(3):
        logits = [qn[i] @ pn[i]] + [qn[i] @ nn_[i, j] for j in range(2) if present[i, j]]
        scaled = 20.0 * torch.stack(logits)
        manual.append(-(scaled[0] - torch.logsumexp(scaled, 0)))
    torch.testing.assert_close(loss, torch.stack(manual).mean())
    in_batch = mnrl(q, p, negatives.reshape(-1, 8), scale=20.0)
    assert not math.isclose(float(loss), float(in_batch), rel_tol=1e-3)


def test_stage2_batch_without_negatives_contributes_nothing() -> None:
    def embed(texts, instruction):  # type: ignore[no-untyped-def]
        return torch.nn.functional.normalize(torch.randn(len(texts), 4, requires_grad=True), dim=-1)

    batch = [Example("q1", "A", "a"), Example("q2", "B", "b")]
    loss = stage2_loss(embed, batch, TrainConfig())
    assert float(loss) == 0.0 and loss.requires_grad


def test_stage1_negatives_drop_batch_positives_and_repeats() -> None:
    batch = [
        Example("q1", "A", "a", negatives=("B", "X"), negative_ids=("b", "x")),
        Example("q2", "B", "b", negatives=("X", "Y"), negative_ids=("x", "y")),
    ]
    assert batch_negatives(batch) == [("x", "X"), ("y", "Y")]


def test_mining_with_a_teacher_follows_the_rule() -> None:
    """A fixed teacher: vectors per text; the query's own positives are never negatives."""
    table = {
        "q": [1.0, 0.0], "pos": [0.9, math.sqrt(1 - 0.81)], "twin": [0.9, math.sqrt(1 - 0.81)],
        "near": [0.88, math.sqrt(1 - 0.88**2)], "mid": [0.5, math.sqrt(0.75)], "far": [0.0, 1.0],
    }  # fmt: skip

    def teacher(texts, instruction):  # type: ignore[no-untyped-def]
        return torch.tensor([table[t] for t in texts])

    docs = [
        Document(i, t)
        for i, t in [("p", "pos"), ("p", "twin"), ("n", "near"), ("m", "mid"), ("f", "far")]
    ]
    mined = mine_negatives([Example("q", "pos", "p")], docs, teacher, TrainConfig(negatives=2))
    # positive score 0.9 -> threshold 0.855: "near" (0.88) is a likely false negative, dropped;
    # "twin" shares the positive's id, excluded
    assert mined[0].negatives == ("mid", "far") and mined[0].negative_ids == ("m", "f")


# ---------------------------------------------------------------------------------------------
# Embedding paths


def test_cached_states_give_the_live_decoders_vectors(llama_dir: Path) -> None:
    decoder = load_decoder(llama_dir)
    tokenizer = load_nv_tokenizer(llama_dir, None)
    torch.manual_seed(0)
    block = LatentAttentionModel(LatentAttentionConfig(8, 32, 32, 2, 16)).eval()
    cache = StateCache(decoder, tokenizer, 48, torch.float32, batch_size=2)
    texts = ["short", "a longer text about rent and notice", "mid length text"]
    with torch.no_grad():
        cached = cached_embed(cache, block)(texts, "Instruct: x\nQuery: ")
        live = live_embed(decoder, block, tokenizer, 48)(texts, "Instruct: x\nQuery: ")
    torch.testing.assert_close(cached, live, atol=1e-5, rtol=0)
    mixed = [Example("a", "p", "1", instruction="I1: "), Example("b", "p", "2", instruction="I2: ")]
    with torch.no_grad():
        together = embed_queries(cached_embed(cache, block), mixed)
        first = cached_embed(cache, block)(["a"], "I1: ")
    torch.testing.assert_close(together[0], first[0])


# ---------------------------------------------------------------------------------------------
# Runs


def test_frozen_decoder_run_learns_and_saves_a_loadable_adapter(
    llama_dir: Path, tmp_path: Path
) -> None:
    config = TrainConfig(stage1_steps=25, stage2_steps=8, lr=3e-3, **SMALL)  # type: ignore[arg-type]
    result = train_nv_embed(str(llama_dir), EXAMPLES, tmp_path / "out", config=config)
    settings = json.loads((result.out_dir / "nv_embed_config.json").read_text())
    assert settings["training"]["steps_done"] == {"stage1": 25, "stage2": 8}
    assert not (result.out_dir / "adapter_config.json").exists()  # no LoRA
    assert np.mean(result.losses[20:25]) < 0.5 * np.mean(result.losses[:3])
    state = load_file(result.out_dir / "latent_attention.safetensors")
    assert all(k.startswith("latent_attention_model.") for k in state)
    trained = get_encoder("nv-embed", adapter=str(result.out_dir))
    baseline = get_encoder("nv-embed", model=str(llama_dir), pooling="mean", max_length=48)
    docs = [e.positive for e in EXAMPLES]
    queries = [e.query for e in EXAMPLES]

    def accuracy(encoder) -> float:  # type: ignore[no-untyped-def]
        scores = encoder.encode_queries(queries) @ encoder.encode_documents(docs).T
        return float((scores.argmax(1) == np.arange(len(docs))).mean())

    assert accuracy(trained) == 1.0 and accuracy(trained) > accuracy(baseline)
    assert "nv-embed" in (result.out_dir / "README.md").read_text()


def test_lora_run_trains_the_decoder_too(llama_dir: Path, tmp_path: Path) -> None:
    config = TrainConfig(stage1_steps=3, stage2_steps=2, lora_r=4, lora_lr=1e-3, **SMALL)  # type: ignore[arg-type]
    result = train_nv_embed(str(llama_dir), EXAMPLES, tmp_path / "lora", config=config)
    adapter = load_file(result.out_dir / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)  # B starts at zero
    assert json.loads((result.out_dir / "adapter_config.json").read_text())["r"] == 4
    vectors = get_encoder("nv-embed", adapter=str(result.out_dir)).encode_documents(["rent"])
    assert np.isclose(np.linalg.norm(vectors), 1.0, atol=1e-5)


def test_time_budget_stops_both_stages(llama_dir: Path, tmp_path: Path) -> None:
    config = TrainConfig(stage1_steps=100, stage2_steps=100, max_seconds=0.0, **SMALL)  # type: ignore[arg-type]
    result = train_nv_embed(str(llama_dir), EXAMPLES, tmp_path / "none", config=config)
    assert result.losses == []
    assert get_encoder("nv-embed", adapter=str(result.out_dir)).dim == 32


def test_stage2_needs_negatives_and_training_needs_two_documents(
    llama_dir: Path, tmp_path: Path
) -> None:
    config = TrainConfig(stage1_steps=1, stage2_steps=1, negatives=0, **SMALL)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="hard negatives"):
        train_nv_embed(str(llama_dir), EXAMPLES, tmp_path / "a", config=config)
    with pytest.raises(UsageError, match="two different"):
        train_nv_embed(str(llama_dir), EXAMPLES[:1], tmp_path / "b", config=config)


def test_fine_tuning_a_released_model_starts_from_its_block(tmp_path: Path) -> None:
    released = save_random_released(
        tmp_path / "released", hidden=32, latents=8, heads=2, head_dim=16
    )
    config = TrainConfig(stage1_steps=0, stage2_steps=0, **SMALL)  # type: ignore[arg-type]
    result = train_nv_embed(str(released), EXAMPLES, tmp_path / "out", config=config)
    original = load_file(released / "model.safetensors")
    saved = load_file(result.out_dir / "latent_attention.safetensors")
    assert all(torch.equal(v, original[k]) for k, v in saved.items())
    encoder = get_encoder("nv-embed", adapter=str(result.out_dir))
    assert encoder.licence == "none: random weights written by docsearch (not NVIDIA's)"
