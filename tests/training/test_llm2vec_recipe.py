"""The LLM2Vec recipe on a tiny random Llama: masking, MNTP and SimCSE runs, adapters that reload."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from docsearch.encoders.llm2vec import (
    LLM2VecEncoder,
    bidirectional_hidden_states,
    load_decoder,
    merge_adapter,
)
from docsearch.errors import UsageError
from docsearch.training.losses import mntp
from docsearch.training.masking import mask_tokens
from docsearch.training.mntp import (
    STRATEGIES,
    lm_logits,
    mask_token_id,
    maskable_positions,
    token_blocks,
    train_mntp,
)
from docsearch.training.simcse import train_simcse

WORDS = (
    "the a of and to in is on for with contract clause party shall agree payment term notice "
    "patient dose trial blood pressure device manual valve pump report study result data"
).split()
TEXTS = [
    "the party shall agree to the payment term in the contract",
    "notice of the clause is to the party on payment",
    "the patient dose in the trial is blood pressure",
    "the study result and data of the trial report",
    "the device manual is for the pump and valve",
    "the pump valve of the device is in the manual",
] * 3


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer with Llama's specials, BOS prepended, and `_` in the vocabulary."""
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "_", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def test_bert_style_masking_rates_and_labels() -> None:
    ids = torch.randint(4, 40, (200, 100))
    ids[:, 0] = 1  # BOS, never masked
    generator = torch.Generator().manual_seed(0)
    masked, labels = mask_tokens(ids, ids != 1, STRATEGIES["bert"], 3, 40, generator)
    targets = labels != -100
    assert not bool(targets[:, 0].any())
    assert torch.equal(labels[targets], ids[targets])
    assert targets.float().mean().item() == pytest.approx(0.2 * 99 / 100, abs=0.01)
    assert torch.equal(masked[~targets], ids[~targets])  # only targets change
    as_mask = (masked[targets] == 3).float().mean().item()
    kept = (masked[targets] == ids[targets]).float().mean().item()
    assert as_mask == pytest.approx(0.8, abs=0.02)
    assert kept == pytest.approx(0.1 + 0.1 / 40, abs=0.02)  # 10% kept, plus random hits on itself


def test_all_mask_masks_80_percent_with_the_mask_token() -> None:
    ids = torch.randint(4, 40, (100, 100))
    masked, labels = mask_tokens(
        ids, torch.ones_like(ids, dtype=torch.bool), STRATEGIES["all_mask"], 3, 40
    )
    targets = labels != -100
    assert targets.float().mean().item() == pytest.approx(0.8, abs=0.02)
    assert bool((masked[targets] == 3).all())


def test_mask_token_is_underscore_and_blocks_are_equal_length(tiny_llama: Path) -> None:
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tiny_llama))
    assert mask_token_id(tokenizer) == 3
    blocks = token_blocks(tokenizer, TEXTS, block_size=16)
    assert (
        blocks.shape[1] == 16
        and blocks.shape[0] == sum(len(tokenizer(t)["input_ids"]) for t in TEXTS) // 16
    )
    assert not bool(maskable_positions(tokenizer, blocks)[blocks == 1].any())
    with pytest.raises(UsageError):
        mask_token_id(tokenizer, "zebra")


def fixed_mntp_loss(folder: Path, adapter: Path | None) -> float:
    """MNTP loss of base (+ merged adapter) on one fixed masked batch."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    lm = LlamaForCausalLM.from_pretrained(str(folder)).eval()
    decoder = load_decoder(folder)
    if adapter is not None:
        decoder = merge_adapter(decoder, adapter)
    blocks = token_blocks(tokenizer, TEXTS, block_size=16)
    generator = torch.Generator().manual_seed(123)
    masked, labels = mask_tokens(
        blocks,
        maskable_positions(tokenizer, blocks),
        STRATEGIES["bert"],
        3,
        len(tokenizer),
        generator,
    )
    with torch.no_grad():
        hidden = bidirectional_hidden_states(decoder, masked, torch.ones_like(masked))
        return float(mntp(lm_logits(lm, hidden), labels))


def test_train_mntp_saves_an_adapter_that_lowers_the_loss_and_loads(
    tiny_llama: Path, tmp_path: Path
) -> None:
    out = tmp_path / "mntp"
    result = train_mntp(str(tiny_llama), TEXTS, out, steps=20, batch_size=4, block_size=16, lr=3e-3)
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (16, 32)
    assert sorted(config["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    assert config["base_model_name_or_path"] == str(tiny_llama.resolve())
    assert len(result.losses) == 20
    assert f"--model {tiny_llama.resolve()} --adapter {out}" in (out / "README.md").read_text()
    assert json.loads((out / "training.json").read_text())["losses"] == result.losses
    assert fixed_mntp_loss(tiny_llama, out) < fixed_mntp_loss(tiny_llama, None) - 0.05
    base = LLM2VecEncoder(str(tiny_llama), max_length=32, doc_max_length=20)
    adapted = LLM2VecEncoder(str(tiny_llama), adapter=str(out), max_length=32, doc_max_length=20)
    as_repo = LLM2VecEncoder(str(out), max_length=32, doc_max_length=20)  # released -mntp layout
    docs = TEXTS[:3]
    assert not np.allclose(base.encode_documents(docs), adapted.encode_documents(docs), atol=1e-4)
    np.testing.assert_allclose(
        as_repo.encode_documents(docs), adapted.encode_documents(docs), atol=1e-6
    )


def test_train_simcse_on_mntp_keeps_both_layers(tiny_llama: Path, tmp_path: Path) -> None:
    mntp_dir = tmp_path / "mntp"
    train_mntp(str(tiny_llama), TEXTS, mntp_dir, steps=2, batch_size=2, block_size=16, lr=1e-3)
    out = tmp_path / "simcse"
    # scale 1 keeps the toy task from being solved at step 0 (at scale 20 the loss starts near 0)
    result = train_simcse(
        str(tiny_llama), TEXTS[:6], out, steps=10, mntp_adapter=str(mntp_dir), batch_size=6,
        max_length=16, lr=1e-2, scale=1.0,
    )  # fmt: skip
    assert np.mean(result.losses[-3:]) < result.losses[0] - 0.2
    assert (out / "mntp" / "adapter_model.safetensors").read_bytes() == (
        mntp_dir / "adapter_model.safetensors"
    ).read_bytes()
    options = {"max_length": 32, "doc_max_length": 20}
    stacked = LLM2VecEncoder(str(tiny_llama), adapter=str(out), **options)
    mntp_only = LLM2VecEncoder(str(tiny_llama), adapter=str(mntp_dir), **options)
    released_style = LLM2VecEncoder(str(mntp_dir), adapter=str(out), **options)
    docs = TEXTS[:3]
    assert not np.allclose(
        stacked.encode_documents(docs), mntp_only.encode_documents(docs), atol=1e-4
    )
    np.testing.assert_allclose(
        stacked.encode_documents(docs), released_style.encode_documents(docs), atol=1e-6
    )
