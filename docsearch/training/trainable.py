"""Encoders made trainable in place: the weights `docsearch finetune` optimises.

The registry builds the encoder (so training embeds texts exactly as search does: same prompts,
instructions, pooling and truncation), and a wrapper here exposes what the loop needs: `embed`
with gradients, the trainable parameters, their state for checkpoints, and `save`, which writes
a folder the encoder's `adapter` option loads.
- sentence-transformers: full fine-tuning (small encoders such as MiniLM); saved as a whole
  sentence-transformers model folder.
- llm2vec: a fresh LoRA (peft, r=16, alpha=32, LLM2Vec's targets) on the bidirectional decoder,
  over at most one earlier (MNTP) adapter; saved as an llm2vec adapter folder.
Not here: the loop (`trainer.py`), other encoder families (frozen or not yet trainable).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from docsearch.encoders.base import Encoder
from docsearch.errors import UsageError


class Trainable(Protocol):
    encoder: Encoder
    method: str  # "full fine-tuning" or "LoRA"

    def embed(self, texts: Sequence[str], side: str) -> torch.Tensor: ...  # (n, dim), with grad

    def parameters(self) -> list[torch.nn.Parameter]: ...

    def train_mode(self, on: bool) -> None: ...

    def state(self) -> dict[str, torch.Tensor]: ...

    def load_state(self, state: dict[str, torch.Tensor]) -> None: ...

    def save(self, folder: Path) -> dict[str, Any]: ...  # -> encoder options that load it


def _device_of(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


class SentenceTransformerTrainable:
    """Full fine-tuning of a sentence-transformers model; saved as a whole model folder."""

    method = "full fine-tuning"

    def __init__(self, encoder: Any, options: dict[str, Any]) -> None:
        self.encoder, self.options = encoder, options
        self.model = encoder._model  # the encoder's own model: its vectors follow training

    def embed(self, texts: Sequence[str], side: str) -> torch.Tensor:
        prompt = self.encoder.query_prompt if side == "query" else self.encoder.document_prompt
        features = self.model.preprocess([prompt + t for t in texts])
        device = _device_of(self.model)
        features = {k: v.to(device) if torch.is_tensor(v) else v for k, v in features.items()}
        out: torch.Tensor = self.model(features)["sentence_embedding"]
        return out  # (n, dim)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def train_mode(self, on: bool) -> None:
        self.model.train(on)

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def save(self, folder: Path) -> dict[str, Any]:
        self.model.save(str(folder), create_model_card=False)
        return {**self.options, "adapter": str(folder.resolve())}


class LLM2VecTrainable:
    """A fresh LoRA on an llm2vec encoder's decoder; saved as an llm2vec adapter folder."""

    method = "LoRA"

    def __init__(self, encoder: Any, options: dict[str, Any], r: int, alpha: int) -> None:
        from peft import get_peft_model

        from docsearch.encoders.llm2vec import (
            adapter_base,
            is_adapter_folder,
            lora_config,
            resolve_layers,
        )
        from docsearch.training.mntp import local_ref

        first, _, stack = resolve_layers(options["model"], options.get("adapter"))
        if len(stack) > 1:
            raise UsageError(
                "llm2vec fine-tuning starts from a base model, or a base plus one (MNTP) "
                "adapter; this one already stacks two adapters"
            )
        self.parent = stack[0] if stack else None
        self.base = adapter_base(first) if is_adapter_folder(first) else local_ref(options["model"])
        self.encoder, self.options = encoder, options
        self.model = get_peft_model(encoder._model, lora_config(r=r, alpha=alpha))
        encoder._model = self.model  # the encoder now embeds through the LoRA

    def embed(self, texts: Sequence[str], side: str) -> torch.Tensor:
        enc = self.encoder
        instruction = enc.query_instruction if side == "query" else enc.document_instruction
        out: torch.Tensor = enc.embed_batch([(instruction, t) for t in texts])
        return out  # (n, dim)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def train_mode(self, on: bool) -> None:
        self.model.train(on)

    def state(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model, state)

    def save(self, folder: Path) -> dict[str, Any]:
        from docsearch.encoders.llm2vec import save_adapter

        enc = self.encoder
        settings = {
            "pooling_mode": enc.pooling,
            "max_length": enc.max_length,
            "doc_max_length": enc.doc_max_length,
            "skip_instruction": enc.skip_instruction,
        }
        save_adapter(
            self.model, folder, base=self.base, tokenizer=enc._tokenizer, settings=settings,
            parent=self.parent,
        )  # fmt: skip
        options = {k: v for k, v in self.options.items() if k != "adapter"}
        return {**options, "model": self.base, "adapter": str(folder.resolve())}


def make_trainable(
    encoder: Encoder, options: dict[str, Any], lora_r: int = 16, lora_alpha: int = 32
) -> Trainable:
    if encoder.name == "sentence-transformers":
        return SentenceTransformerTrainable(encoder, options)
    if encoder.name == "llm2vec":
        return LLM2VecTrainable(encoder, options, lora_r, lora_alpha)
    raise UsageError(
        f"docsearch finetune trains the sentence-transformers and llm2vec encoders, not "
        f"{encoder.name!r}"
    )


def device_for(options: dict[str, Any]) -> str:
    return str(options.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))


def bf16_supported(device: str) -> bool:
    """bf16 autocast pays off on CUDA GPUs with bf16 and on CPUs with AVX512-BF16 or AMX."""
    if device.startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def hardware(device: str) -> str:
    """The device, in words, for the model card."""
    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(0))
    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads"
