"""Shared decoder plumbing: templates and text spans, truncation, left padding, pooling."""

from __future__ import annotations

import pytest
import torch

from docsearch.encoders.decoder_common import (
    Tokenized,
    check_template,
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
