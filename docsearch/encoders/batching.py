"""Batches under a padded-token budget (the indexer, the decoder encoders) or of fixed size.

Torch-free, so the indexer imports it at module level. Not here: padding the batches (each
family pads its own way) and M2-BERT's grouping by padded length (its vectors depend on the
padded length, so it never mixes lengths in a batch).
"""

from __future__ import annotations

from collections.abc import Sequence


def token_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices grouped longest first so that rows x longest length stays within `budget`.

    A single input longer than the budget gets a batch of its own; an empty input counts as one
    token, so a batch of empty inputs stays bounded too.
    `token_batches([3, 9, 4], 10) -> [[1], [2, 0]]`.
    """
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if batches and (len(batches[-1]) + 1) * max(lengths[batches[-1][0]], 1) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def longest_first(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indices in batches of `size` rows, longest first, so that each batch pads little.

    `longest_first([3, 9, 4], 2) -> [[1, 2], [0]]`.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + size] for start in range(0, len(order), size)]
