"""Shared decoder plumbing: templates and text spans, truncation, budget batches, left padding,
pooling, dtype choice."""

from __future__ import annotations

import pytest
import torch

from docsearch.encoders.decoder_common import (
    Tokenized,
    budget_batches,
    check_template,
    choose_dtype,
    left_pad,
    pool,
    render,
    span_mask,
    tokenize,
    truncate,
)
from docsearch.errors import UsageError
from tests.encoders import tiny_decoder


def test_render_fills_every_slot_and_spans_the_last() -> None:
    assert render("Q: {text}!", "hi") == ("Q: hi!", (3, 5))
    full, (a, b) = render("D:{text}\nD again:{text}", "ab {x}")
    assert full == "D:ab {x}\nD again:ab {x}" and full[a:b] == "ab {x}" and a > 2
    assert render("{text}", "") == ("", (0, 0))
    with pytest.raises(UsageError):
        check_template("no slot here")


def test_tokenize_marks_the_text_tokens_of_the_last_copy() -> None:
    tok = tiny_decoder.tokenizer()
    item = tokenize(tok, "Query: {text} again: {text}", "the rent")
    assert item.ids[0] == tok.bos_token_id
    start, end = item.span
    assert tok.decode(item.ids[start:end]).strip() == "the rent"
    assert end == len(item.ids)  # the template ends with the text
    assert start > len(item.ids) // 2  # the second copy, not the first
    assert tokenize(tok, "Query: {text}", "").span == (0, 0)


def test_truncate_keeps_whole_tokens() -> None:
    tok = tiny_decoder.tokenizer()
    text = "The lessee shall pay the rent on the first day of each month."
    cut = truncate(tok, text, 3)
    assert text.startswith(cut) and len(tok(cut, add_special_tokens=False)["input_ids"]) == 3
    assert truncate(tok, text, 10_000) == text and truncate(tok, text, None) == text


def test_budget_batches_longest_first_within_budget() -> None:
    assert budget_batches([3, 9, 4], 10) == [[1], [2, 0]]
    lengths = [5, 1, 7, 7, 2, 30]
    batches = budget_batches(lengths, 14)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert batches[0] == [5]  # too long for the budget: alone
    for batch in batches[1:]:
        assert len(batch) * max(lengths[i] for i in batch) <= 14


def test_left_pad_puts_rows_right_and_restarts_positions() -> None:
    out = left_pad([[7, 8, 9], [5]], pad_id=0)
    assert out["input_ids"].tolist() == [[7, 8, 9], [0, 0, 5]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]


def test_span_mask_and_pooling() -> None:
    items = [Tokenized([1, 2, 3, 4], (1, 3)), Tokenized([1, 2], (0, 0))]
    text = span_mask(items, 4, "text")
    assert text.tolist() == [[0, 1, 1, 0], [0, 0, 1, 1]]  # empty span: the whole row
    assert span_mask(items, 4, "all").tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    hidden = torch.arange(16, dtype=torch.float32).reshape(2, 4, 2)  # (batch, seq, dim)
    assert pool(hidden, text, "last").tolist() == [[6, 7], [14, 15]]
    assert pool(hidden, text, "mean").tolist() == [[3, 4], [13, 14]]
    assert pool(hidden, text, "mean+last").tolist() == [[4.5, 5.5], [13.5, 14.5]]


def test_choose_dtype() -> None:
    assert choose_dtype("float32", "cpu") == torch.float32
    assert choose_dtype("bf16", "cpu") == torch.bfloat16
    assert choose_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)
    with pytest.raises(UsageError):
        choose_dtype("float8", "cpu")
