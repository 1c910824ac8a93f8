"""Tiny random NV-Embed checkpoints in the released layout, for tests and the GPU benchmark.

A Mistral decoder of width 64 with two layers, a latent-attention block of 16 latents, and a
byte-level BPE tokenizer laid out like Mistral's (`<unk>`=0, `<s>`=1, `</s>`=2), written as
`config.json` (`model_type` nvembed, `bidir_mistral` text config) + `model.safetensors`
(`embedding_model.*` / `latent_attention_model.*`) + tokenizer files, which
`get_encoder("nv-embed", model=folder)` loads offline. Random weights: the vectors mean nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import MistralConfig, MistralModel, PreTrainedTokenizerFast

from docsearch.encoders.nv_embed import (
    DECODER_PREFIX,
    LATENT_PREFIX,
    NVEMBED_MODEL_TYPE,
    LatentAttentionConfig,
    LatentAttentionModel,
)
from tests.encoders.tiny_decoder import bpe_tokenizer

TEXT = """Instruct: Given a question, retrieve passages that answer the question
Query: what does the contract say about termination for convenience and notice periods?
The lessee shall pay the rent on the first day of each month. Patients were randomised to the
study drug or a placebo. Tighten the bolts to 25 newton metres before use. The agreement may be
terminated by either party with thirty days written notice. Results are reported in Table 2."""


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (400 ids) trained on TEXT, with Mistral's special tokens and ids."""
    return bpe_tokenizer([TEXT], 400, ("<unk>", "<s>", "</s>"), first="unk")


def released_config(decoder_config: Any, latent: LatentAttentionConfig) -> dict[str, Any]:
    """An NV-Embed `config.json`: nvembed outer config, `bidir_<type>` text_config."""
    text_config = decoder_config.to_dict()
    text_config["model_type"] = f"bidir_{decoder_config.model_type}"
    return {
        "model_type": NVEMBED_MODEL_TYPE,
        "architectures": ["NVEmbedModel"],
        "hidden_size": decoder_config.hidden_size,
        "add_eos": True,
        "add_pad_token": True,
        "is_mask_instruction": True,
        "mask_type": "b",
        "padding_side": "right",
        "latent_attention_config": latent.to_dict(),
        "text_config": text_config,
    }


def save_released_layout(
    folder: str | Path,
    decoder: nn.Module,
    latent: LatentAttentionModel,
    tokenizer: Any,
    licence: str,
) -> Path:
    """Write `decoder` + `latent` as an NV-Embed folder (config, weights, tokenizer)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    config = {**released_config(decoder.config, latent.config), "license": licence}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    state = {f"{DECODER_PREFIX}{k}": v for k, v in decoder.state_dict().items()}
    state |= {f"{LATENT_PREFIX}{k}": v for k, v in latent.state_dict().items()}
    state = {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(str(out))
    return out


def randomise(module: nn.Module, generator: torch.Generator) -> None:
    """Every parameter non-trivial: norm gains around 1, other weights and biases small noise,
    so a parameter loaded into the wrong place changes the outputs."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            is_gain = param.ndim == 1 and "norm" in name and name.endswith("weight")
            param.copy_(1.0 + 0.1 * noise if is_gain else 0.05 * noise)


def save_random_released(
    folder: str | Path,
    *,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    latents: int = 16,
    heads: int = 2,
    head_dim: int = 32,
) -> Path:
    """A tiny random NV-Embed (bidirectional Mistral + latent attention) in the released layout."""
    tokenizer = build_tokenizer()
    config = MistralConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=hidden // 4, max_position_embeddings=4096, sliding_window=4096,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    decoder = MistralModel(config)
    latent = LatentAttentionModel(LatentAttentionConfig(latents, hidden, hidden, heads, head_dim))
    randomise(decoder, generator)
    randomise(latent, generator)
    note = "none: random weights written by docsearch (not NVIDIA's)"
    return save_released_layout(folder, decoder, latent, tokenizer, note)
