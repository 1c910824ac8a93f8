"""M2-BERT pretraining recipe: positional warm start, masking, mixed-length samples, the MLM
model and its checkpoints, and (slow) a short run that beats the random initialisation."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from docsearch.encoders.base import get_encoder
from docsearch.encoders.m2_bert import TINY_CONFIG, M2Config, save_checkpoint
from docsearch.training.m2_pretrain import (
    IGNORE,
    M2ForMaskedLM,
    MixedLengthSampler,
    PretrainConfig,
    TokenIds,
    extend_position_table,
    load_masked_lm,
    main,
    make_eval_set,
    mask_tokens,
    masked_accuracy,
    pretrain,
    warm_start_state_dict,
)
from tests.encoders.tiny_m2 import build_tokenizer

# Generated text with structure a model can learn: each document keeps to one topic, whose
# nouns and verbs fill a fixed sentence pattern.
TOPICS = {
    "lease": (
        ["tenant", "landlord", "premises", "rent", "deposit"],
        ["pays", "inspects", "repairs", "returns"],
    ),
    "trial": (
        ["patient", "dose", "placebo", "cohort", "nurse"],
        ["receives", "reports", "completes", "enrolls"],
    ),
    "court": (
        ["judge", "appellant", "verdict", "motion", "witness"],
        ["grants", "denies", "hears", "reviews"],
    ),
    "engine": (
        ["pump", "valve", "sensor", "engine", "filter"],
        ["controls", "measures", "cools", "replaces"],
    ),
}
ADVERBS = ["daily", "today", "again", "promptly"]
WORDS = sorted({w for nouns, verbs in TOPICS.values() for w in nouns + verbs} | set(ADVERBS))


def generated_documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        nouns, verbs = TOPICS[rng.choice(sorted(TOPICS))]
        sentences = (
            f"the {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)} {rng.choice(ADVERBS)} ."
            for _ in range(rng.randint(2, 12))
        )
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors: a second intra-op thread only adds contention on a shared 2-core box
    (measured: 8x the CPU time of one thread for the training smoke test)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return build_tokenizer(WORDS)


@pytest.fixture(scope="module")
def tokens(tokenizer) -> TokenIds:  # type: ignore[no-untyped-def]
    return TokenIds.from_tokenizer(tokenizer)


def _ids(tokenizer, texts: list[str]) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def _tiny_mlm(tokenizer, seed: int = 0, **overrides: int) -> M2ForMaskedLM:  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    vocab = -(-len(tokenizer) // 8) * 8
    return M2ForMaskedLM(M2Config(**{**TINY_CONFIG, "vocab_size": vocab, **overrides}))


# ---------------------------------------------------------------------------------------------
# Positional warm start


def test_position_table_extends_8k_to_32k_by_replication() -> None:
    table = torch.randn(8192, 4)
    extended = extend_position_table(table, 32768)
    assert extended.shape == (32768, 4)
    for p in (0, 5, 8191, 8192, 8192 + 5, 20000, 32767):
        assert torch.equal(extended[p], table[p % 8192])


def test_warm_started_checkpoint_loads_into_the_longer_config(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    short = _tiny_mlm(tokenizer, max_position_embeddings=64, long_conv_l_max=64)
    save_checkpoint(short.bert, tmp_path / "short", tokenizer=tokenizer, extra=short.head_state())
    long = load_masked_lm(tmp_path / "short", max_len=256)
    assert long.bert.config.max_position_embeddings == long.bert.config.long_conv_l_max == 256
    old_pos = short.bert.embeddings.position_embeddings.weight
    new_pos = long.bert.embeddings.position_embeddings.weight
    assert torch.equal(new_pos[64 + 7], old_pos[7]) and torch.equal(new_pos[255], old_pos[63])
    old_fn = short.bert.encoder.layer[1].attention.filter_fn2.pos_emb
    new_fn = long.bert.encoder.layer[1].attention.filter_fn2.pos_emb
    torch.testing.assert_close(new_fn.t[0, :, 0], torch.linspace(0, 1, 256))  # still the unit grid
    torch.testing.assert_close(new_fn.z[0, [0, -1]], old_fn.z[0, [0, -1]])  # end points kept
    torch.testing.assert_close(
        new_fn.z[0, 85], old_fn.z[0, 21], atol=1e-6, rtol=0
    )  # 85/255 = 21/63
    assert torch.equal(long.cls.predictions.decoder.bias, short.cls.predictions.decoder.bias)
    ids = torch.randint(5, len(tokenizer), (1, 256))
    assert long.bert(ids)[0].shape == (1, 256, 64)


def test_warm_start_keeps_other_tensors_and_prefixes() -> None:
    state = {
        "model.bert.embeddings.position_embeddings.weight": torch.randn(8, 2),
        "model.bert.embeddings.position_ids": torch.arange(8)[None],
        "model.bert.pooler.dense.bias": torch.randn(2),
    }
    out = warm_start_state_dict(state, 32)
    assert out["model.bert.embeddings.position_embeddings.weight"].shape == (32, 2)
    assert torch.equal(out["model.bert.embeddings.position_ids"], torch.arange(32)[None])
    assert out["model.bert.pooler.dense.bias"] is state["model.bert.pooler.dense.bias"]


# ---------------------------------------------------------------------------------------------
# Masking and mixed-length samples


def test_masking_rate_split_and_specials(tokens: TokenIds) -> None:
    ids = torch.randint(tokens.mask + 1, tokens.vocab_size, (64, 256))
    ids[:, 0], ids[:, -1], ids[:, 100:120] = tokens.cls, tokens.sep, tokens.pad
    inputs, labels = mask_tokens(ids, tokens, 0.30, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE
    eligible = ~torch.isin(ids, torch.tensor(tokens.specials))
    assert not chosen[~eligible].any()  # specials and pads are never masked
    assert abs(chosen.sum() / eligible.sum() - 0.30) < 0.01
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    as_mask = (inputs[chosen] == tokens.mask).float().mean()
    kept = (inputs[chosen] == ids[chosen]).float().mean()
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.02


def test_mixed_length_sampler_follows_the_recipe(tokens: TokenIds) -> None:
    docs = [[100 + d] * (3 + 3 * d) for d in range(12)]  # lengths 3..36, each doc one value
    sampler = MixedLengthSampler(docs, tokens, max_len=64, short_fraction=0.3, seed=0)
    samples = [sampler.sample() for _ in range(3000)]
    shorts = [ids for ids, short in samples if short]
    assert abs(len(shorts) / len(samples) - 0.3) < 0.03
    for ids in shorts[:50]:  # one document at its natural length (cut to max_len)
        body = ids[1:-1]
        assert ids[0] == tokens.cls and ids[-1] == tokens.sep and len(set(body)) == 1
        assert len(body) == len(docs[body[0] - 100])
    longs = [ids for ids, short in samples if not short]
    assert all(len(ids) == 64 and ids[0] == tokens.cls for ids in longs)
    assert all(tokens.sep in ids[:-1] for ids in longs)  # packed: a separator inside
    batch = MixedLengthSampler(docs[:2], tokens, max_len=64, short_fraction=1.0).batch(4)
    assert batch.shape == (4, 64) and (batch[:, -1] == tokens.pad).all()  # right-padded


def test_packed_samples_lose_no_text(tokens: TokenIds) -> None:
    docs = [list(range(1000 + 100 * d, 1000 + 100 * d + 40 + d)) for d in range(5)]
    sampler = MixedLengthSampler(docs, tokens, max_len=32, short_fraction=0.0, seed=1)
    seen = [t for _ in range(40) for t in sampler.sample()[0] if t >= 1000]
    assert Counter(seen[: sum(map(len, docs))]) == Counter(t for d in docs for t in d)


# ---------------------------------------------------------------------------------------------
# The MLM model, its checkpoints and the training loop


def test_mlm_head_is_tied_and_the_folder_loads_as_an_encoder(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = _tiny_mlm(tokenizer).eval()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    save_checkpoint(model.bert, tmp_path, tokenizer=tokenizer, extra=model.head_state())
    loaded = load_masked_lm(tmp_path).eval()
    ids = torch.randint(5, len(tokenizer), (2, 128))
    labels = torch.where(torch.rand(2, 128) < 0.3, ids, torch.full_like(ids, IGNORE))
    with torch.no_grad():
        # Bit-exact on purpose: the same float32 weights through the same code and shapes.
        torch.testing.assert_close(loaded(ids, labels)[1], model(ids, labels)[1], atol=0, rtol=0)
    vectors = get_encoder("m2-bert", model=str(tmp_path)).encode_documents(["the tenant pays"])
    assert vectors.shape == (1, 64)


def test_a_few_steps_reduce_the_loss_and_raise_accuracy(tokenizer, tokens: TokenIds) -> None:  # type: ignore[no-untyped-def]
    cfg = PretrainConfig(max_len=64, batch_size=8, steps=20, eval_batches=2)
    model = _tiny_mlm(tokenizer, max_position_embeddings=64, long_conv_l_max=64)
    train = _ids(tokenizer, generated_documents(60, seed=0))
    held_out = make_eval_set(_ids(tokenizer, generated_documents(10, seed=1)), tokens, cfg)
    result = pretrain(model, train, held_out, tokens, cfg)
    assert result.steps == 20 and all(np.isfinite(result.losses))
    assert np.mean(result.losses[-5:]) < np.mean(result.losses[:5]) - 0.5
    assert result.accuracy_after > result.accuracy_before + 0.1
    assert masked_accuracy(model, held_out) == result.accuracy_after


def test_command_line_writes_an_encoder_folder_and_a_report(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"title": "", "text": t} for t in generated_documents(30, seed=2)]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    tokenizer.save_pretrained(str(tmp_path / "tok"))
    out = tmp_path / "out"
    args = ["--corpus", str(corpus), "--out", str(out), "--tokenizer", str(tmp_path / "tok")]
    report = main(
        [*args, "--steps", "3", "--max-len", "64", "--batch-size", "4", "--device", "cpu"]
    )
    assert report["result"]["steps"] == 3 and report["documents"] == {"train": 29, "held_out": 1}
    assert json.loads((out / "pretrain_report.json").read_text())["recipe"]["mask_prob"] == 0.3
    encoder = get_encoder("m2-bert", model=str(out))
    assert encoder.max_tokens == 62
    card = (out / "README.md").read_text()  # the model card every recipe writes
    assert f"--encoder m2-bert --model {out}" in card and "mixed-length MLM" in card
    assert json.loads((out / "training.json").read_text())["steps"] == 3


@pytest.mark.slow
def test_pretraining_beats_random_init_on_held_out_masked_tokens(
    tokenizer, tokens: TokenIds
) -> None:  # type: ignore[no-untyped-def]
    """About a minute of CPU: held-out masked-token accuracy goes from chance to well above the
    most-frequent-token baseline, i.e. the model uses context."""
    cfg = PretrainConfig(max_len=128, batch_size=16, steps=300)
    model = _tiny_mlm(tokenizer)
    train = _ids(tokenizer, generated_documents(400, seed=0))
    held_out = make_eval_set(_ids(tokenizer, generated_documents(40, seed=1)), tokens, cfg)
    counts = Counter(int(t) for _, labels in held_out for t in labels[labels != IGNORE])
    majority = counts.most_common(1)[0][1] / sum(counts.values())
    result = pretrain(model, train, held_out, tokens, cfg)
    assert result.accuracy_before < 0.05
    assert result.accuracy_after > majority + 0.15
