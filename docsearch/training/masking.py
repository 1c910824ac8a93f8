"""Token masking for the masked-language-model recipes: MNTP (`mntp.py`), M2 pretraining.

`mask_tokens` chooses a share of the maskable tokens as targets and replaces each with the mask
token, a random token or itself (BERT: 80% / 10% / 10%); labels keep the original id at the
targets and `IGNORE_INDEX` elsewhere, as the cross-entropy losses expect.
Not here: which tokens are maskable and the losses (the recipes, `losses.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from docsearch.training.losses import IGNORE_INDEX


@dataclass(frozen=True)
class Masking:
    """Which share of tokens is masked, and what a masked token becomes."""

    probability: float  # share of the maskable tokens that become targets
    to_mask: float = 0.8  # of the targets: share replaced by the mask token
    to_random: float = 0.1  # of the targets: share replaced by a random token (the rest stay)


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    masking: Masking,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked input ids, labels) for a batch; labels hold the original id at targets, else -100.

    `maskable` (batch, seq) is False on special tokens and padding, which are never targets;
    random replacements are drawn below `vocab_size`.
    """
    draw = torch.rand(input_ids.shape, generator=generator)
    targets = (draw < masking.probability) & maskable  # (batch, seq)
    labels = torch.where(targets, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    how = torch.rand(input_ids.shape, generator=generator)
    to_mask = targets & (how < masking.to_mask)
    to_random = targets & (how >= masking.to_mask) & (how < masking.to_mask + masking.to_random)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    return masked, labels
