"""Tiny random decoder LLMs with an in-memory byte-level BPE tokenizer, saved as HF folders.

Shared by the KV-Embedding, baseline and intrinsic-dimension tests. Three layers each: Llama
with GQA (4 query heads, 2 KV heads); Gemma3 with one KV head, a sliding window shorter than the
test inputs, two RoPE bases and `query_pre_attn_scalar` scaling; Qwen3 (q/k norms); Qwen2
(biased q/k/v, one KV head); Mistral (a sliding window on every layer).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing
from transformers import (
    AutoModel,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

CORPUS = [
    "The lessee shall pay the rent on the first day of each month.",
    "Patients were randomised to the study drug or a placebo.",
    "Tighten the bolts to 25 newton metres before use.",
    "We train a neural network with a contrastive loss.",
    "Query: Context: Compress the Context in one word: means sentence again Document",
]
VOCAB = 320


def bpe_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    specials: tuple[str, str, str] = ("<pad>", "<bos>", "<eos>"),
    first: str = "pad",
) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts`: any text encodes, offsets are exact. Ids 0, 1, 2 are
    `specials`: the `first` token ("pad" or "unk"), BOS (added in front of every text), EOS."""
    tok = Tokenizer(models.BPE(unk_token=specials[0] if first == "unk" else None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = TemplateProcessing(
        single=f"{specials[1]} $A", special_tokens=[(specials[1], 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=specials[1],
        eos_token=specials[2],
        **{f"{first}_token": specials[0]},
    )


def tokenizer() -> PreTrainedTokenizerFast:
    """The decoders' tokenizer: BPE trained on CORPUS, `<pad>`=0, `<bos>`=1, `<eos>`=2."""
    return bpe_tokenizer(CORPUS, VOCAB)


def config(arch: str) -> Any:
    common: dict[str, Any] = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "head_dim": 16,
        "vocab_size": VOCAB,
        "max_position_embeddings": 512,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if arch == "llama":
        return LlamaConfig(num_key_value_heads=2, **common)
    if arch == "qwen3":
        return Qwen3Config(num_key_value_heads=2, **common)
    if arch == "qwen2":  # biased q/k/v projections
        return Qwen2Config(num_key_value_heads=1, **common)
    if arch == "mistral":  # a sliding window shorter than the test inputs
        return MistralConfig(num_key_value_heads=2, sliding_window=5, **common)
    if arch == "gemma3":
        return Gemma3TextConfig(
            num_key_value_heads=1,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=24,
            **common,
        )
    raise ValueError(arch)


ARCHS = ("llama", "gemma3", "qwen3", "qwen2", "mistral")


def model(arch: str, attn: str = "sdpa", seed: int = 0) -> Any:
    """A random-weight base model in fp32 (its own config copy: attn choice is per model)."""
    torch.manual_seed(seed)
    net = AutoModel.from_config(copy.deepcopy(config(arch)), attn_implementation=attn)
    with torch.no_grad():  # larger random weights so attention patterns are far from uniform
        for name, p in net.named_parameters():
            if "norm" not in name:
                p.mul_(4.0)
    return net.float().eval()


def twin(net: Any, attn: str) -> Any:
    """The same weights under another attention implementation."""
    other = AutoModel.from_config(copy.deepcopy(net.config), attn_implementation=attn)
    other.load_state_dict(net.state_dict())
    return other.float().eval()


def folder(arch: str, root: Path) -> Path:
    """Save a random model and the tokenizer into `root/arch` (an HF model folder)."""
    target = root / arch
    model(arch).save_pretrained(target)
    tokenizer().save_pretrained(target)
    return target
