"""The one batcher under a padded-token budget (the indexer and the decoder encoders use it)."""

from __future__ import annotations

from docsearch.encoders.batching import token_batches


def test_longest_first_within_the_budget() -> None:
    assert token_batches([3, 9, 4], 10) == [[1], [2, 0]]
    lengths = [5, 1, 7, 7, 2, 30]
    batches = token_batches(lengths, 14)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert batches[0] == [5]  # too long for the budget: alone
    for batch in batches[1:]:
        assert len(batch) * max(lengths[i] for i in batch) <= 14


def test_empty_inputs_count_as_one_token() -> None:
    batches = token_batches([0, 0, 0, 0, 0], 2)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert token_batches([], 10) == []
