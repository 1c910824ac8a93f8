"""Fuzzed searches: whatever the query, k, mode and filters, `Retriever.search` returns hits or
raises UsageError, and its hits always lie inside the path filter.

Generated inputs mix free text with the pieces that broke search before: lone surrogates, NUL
and other control characters, 10k-character queries, full-text syntax (quotes, AND/OR/NOT, + - *
~ : parentheses), SQL fragments in `where` (`;`, comments, sub-selects, functions, unknown
columns, type mismatches, unbalanced parentheses). One real LanceDB collection of the sample
corpus; the dense leg is the hashing fake behind a real Hugging Face tokenizer (which raises on
lone surrogates, as real encoders' tokenizers do). The default run is derandomised (the same
examples every time); the `slow` variant draws fresh ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from docsearch.errors import UsageError
from docsearch.indexer.filters import FILTER_COLUMNS
from docsearch.retriever import MODES, Retriever
from tests.fakes import HashingEncoder
from tests.helpers import index_samples

STRANGE = ["\ud800", "\udfff", "\udcff", "\ud83d", "\x00", "\x1b[31m", "\x7f", "\u0085", "\ufffd",
           "\u200b", "\U0001f600", "é", "§"]  # fmt: skip
FTS_SYNTAX = ['"', "'", " AND ", " OR ", " NOT ", "+", "-", "*", "~", "~2", ":", "^3", "(", ")",
              "title:", "\\", "&&", "||", "!", "?", "{", "}", "[", "]", "/"]  # fmt: skip
WORDS = ["liability", "termination", "pump", "motor", "E-MOT-21", "Section 7.2(a)",
         "ISO 13485:2016", "agreement", "the", "of"]  # fmt: skip
SQL = ["1=1", ") OR (", "1=1) OR (1=1", ";", " DROP TABLE samples__chunks", "--", "/*", "*/",
       "(", ")", "( )", "NULL", "pg_sleep(1)", "SELECT 1", "IN (SELECT ordinal FROM t)", "EXISTS",
       " AND ", " OR ", " NOT ", " IS NULL", " IS NOT NULL", " LIKE ", " BETWEEN 1 AND 3",
       " IN (1, 2)", "=", "!=", "<>", ">=", "<", "+", "-", "*", "/", "%", "'abc'", "'it''s'",
       "'unterminated", '"path"', "`path`", "2", "-1", "1.5", "1e3", "TRUE", "false",
       "lower(title)", "upper(", "nope", "_rowid", "vector", "page_start = 'abc'", "\x00",
       "\ud800", "page_start >= 2", "title = 'Master Services Agreement'"]  # fmt: skip
COLUMNS = sorted(FILTER_COLUMNS)
GLOBS = ["*.pdf", "*.md", "*contracts*", "**/manuals/**", "?", "*", "%", "_", "*acme_globex*",
         "*'*", "*\\*", "x' OR 'a'='a", "*.pdf') OR (1=1"]  # fmt: skip


OPERATORS = [
    "=",
    "!=",
    "<>",
    "<",
    ">=",
    "LIKE",
    "NOT LIKE",
    "ILIKE",
    "IS NULL",
    "IS NOT NULL",
    "IN",
]
LITERALS = ["2", "-1", "1.5", "'abc'", "'%agree%'", "'it''s'", "NULL", "TRUE", "(1, 2)", "('a')",
            "lower(title)", "page_end - page_start"]  # fmt: skip


def _joined(pieces: st.SearchStrategy[str], max_size: int) -> st.SearchStrategy[str]:
    return st.lists(pieces, max_size=max_size).map("".join)


ODD_TEXT = _joined(
    st.one_of(
        st.sampled_from(FTS_SYNTAX),
        st.sampled_from(STRANGE),
        st.integers(0xD800, 0xDFFF).map(chr),  # every lone surrogate
        st.text(max_size=12),
        st.sampled_from(WORDS),
        st.just(" "),
    ),
    max_size=10,
)
QUERIES = st.one_of(
    st.tuples(st.sampled_from(WORDS), ODD_TEXT, st.booleans()).map(
        lambda t: t[0] + t[1] if t[2] else t[1] + t[0]
    ),
    st.one_of(
        ODD_TEXT,
        st.sampled_from(
            ["x" * 10_000, ("liability " * 1_000)[:10_000], "7.2(a) " * 1_428, "y" * 10_001]
        ),
    ),
)
CLAUSES = st.builds(
    lambda column, op, literal: f"{column} {op} {literal}".replace("NULL NULL", "NULL"),
    st.sampled_from(COLUMNS),
    st.sampled_from(OPERATORS),
    st.sampled_from(LITERALS),
)
WHERES = st.one_of(
    st.none(),
    st.lists(CLAUSES, min_size=1, max_size=3).map(" AND ".join),
    st.lists(CLAUSES, min_size=1, max_size=3).map(lambda c: "(" + " OR ".join(c) + ")"),
    _joined(st.one_of(st.sampled_from(SQL), st.sampled_from(COLUMNS), st.just(" ")), 8),
    st.text(max_size=20),
)
PATHS = st.one_of(st.none(), st.sampled_from(GLOBS), st.text(max_size=10))
CALLS = st.fixed_dictionaries(
    {
        "query": QUERIES,
        # Bad k, modes and granularities have their own tests (test_filters.py); here they
        # would only crowd out the queries and filters.
        "k": st.one_of(st.integers(1, 30), st.just(10_000)),
        "mode": st.sampled_from([*MODES, None]),
        "where": WHERES,
        "path": PATHS,
        "granularity": st.sampled_from(["document", "passage"]),
    }
)


class TokenizedHashingEncoder(HashingEncoder):
    """The hashing fake behind a real Hugging Face tokenizer (TypeError on lone surrogates)."""

    def __init__(self) -> None:
        super().__init__()
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel

        self.tokenizer = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.tokenizer.encode_batch(list(texts))
        return super().encode_queries(texts)


@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory) -> Retriever:
    db = index_samples(tmp_path_factory.mktemp("fuzz"))
    return Retriever("samples", db=db, encoder=TokenizedHashingEncoder())


def glob_matches(glob: str, path: str) -> bool:
    """The path filter's meaning, independently of its SQL: '*' any run, '?' one character."""
    pattern = "".join(
        ".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in glob.replace("**", "*")
    )
    return re.fullmatch(pattern, path, re.DOTALL) is not None


def check_one_search(retriever: Retriever, call: dict[str, Any]) -> None:
    try:
        hits = retriever.search(**call)
    except UsageError as exc:
        message = str(exc)
        assert message and "\n" not in message and ".rs:" not in message, message
        event(f"refused: {message.split(':')[0][:40]}")
        return
    event("answered" if hits else "answered, no hits")
    assert len(hits) <= call["k"]
    if call["path"]:
        assert all(glob_matches(call["path"], h.path) for h in hits), (call, [h.path for h in hits])


FUZZ = settings(
    max_examples=500,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(call=CALLS)
def test_search_raises_only_usage_errors(retriever: Retriever, call: dict[str, Any]) -> None:
    check_one_search(retriever, call)


@pytest.mark.slow
@settings(FUZZ, max_examples=3_000, derandomize=False)
@given(call=CALLS)
def test_search_raises_only_usage_errors_long(retriever: Retriever, call: dict[str, Any]) -> None:
    check_one_search(retriever, call)
