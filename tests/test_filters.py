"""Search filters: a caller's `where` is checked and can narrow a search, never widen it.

Unit tests of `docsearch.indexer.filters`, then searches over a real LanceDB collection of the
sample corpus (hashing fake encoder) through `Retriever`, the CLI and the LLM-framework adapters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from docsearch.app.cli import app
from docsearch.errors import UsageError
from docsearch.indexer.filters import FILTER_COLUMNS, ChunkFilter, compile_where, glob_to_like
from docsearch.retriever import MAX_QUERY_CHARS, Retriever, clean_query
from docsearch.store.schema import CollectionMeta, chunks_schema
from docsearch.text import MAX_IDENTIFIERS, identifiers
from tests.fakes import HashingEncoder
from tests.helpers import index_samples

WIDEN = "1=1) OR (1=1"  # closes the wrapping parenthesis early, then ORs past the path clause
QUERY = "liability pump termination"  # hits the .pdf, .docx, .md and .txt samples


@pytest.fixture(scope="module")
def samples_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return index_samples(tmp_path_factory.mktemp("filters"))


@pytest.fixture(scope="module")
def retriever(samples_db: str) -> Retriever:
    return Retriever("samples", db=samples_db)


# -- the checker ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        (WIDEN, "unbalanced parentheses: '\\)' at position 3 has no '\\('"),
        ("(page_start > 1", "unbalanced parentheses: 1 '\\(' not closed"),
        ("1=1; DROP TABLE samples__chunks", "';' is not allowed"),
        ("page_start > 1 -- and the rest", "comments"),
        ("page_start > 1 /* x */", "comments"),
        ("page_start IN (SELECT ordinal FROM t)", "sub-selects are not allowed"),
        ("EXISTS (SELECT 1)", "sub-selects are not allowed"),
        ("author = 'x'", "'author' is not a chunk column"),
        ("vector IS NULL", "'vector' is not a chunk column"),
        ("_rowid > 1", "'_rowid' is not a chunk column"),
        ("pg_sleep(1)", r"function pg_sleep\(\) is not allowed \(allowed: lower, upper\)"),
        ("regexp_like(text, 'a+')", r"function regexp_like\(\) is not allowed"),
        ("title = 'abc", "unterminated string literal"),
        ('"page_start" > 1', "quoted identifiers are not allowed"),
        ("page_start / 0 > 1", "operator '/' is not allowed"),
        ("page_start || 'x'", "unexpected character '|' at position 11"),
        ("(" * 21 + "truncated" + ")" * 21, "nested deeper than 20"),
        ("title = 'a\x00b'", "control character U\\+0000"),
        ("title = '\ud800'", "lone surrogate"),
        ("page_start > " + "1" * 10_000, "too long: 10,013 characters"),
    ],
)
def test_refused_filters_name_the_problem(where: str, problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        ChunkFilter(where=where)


@pytest.mark.parametrize(
    ("where", "sql"),
    [
        ("page_start >= 2", "page_start >= 2"),
        ("Title = 'it''s' and not TRUNCATED", "title = 'it''s' AND NOT truncated"),
        ("lower(title) LIKE '%agreement%'", "lower ( title ) LIKE '%agreement%'"),
        (
            "page_start IN (1, 2) OR page_end-page_start>=1",
            "page_start IN ( 1 , 2 ) OR page_end - page_start >= 1",
        ),  # fmt: skip
        ("path = 'C:\\docs\\a.pdf'", "path = 'C:\\docs\\a.pdf'"),  # backslashes are literal
    ],
)
def test_accepted_filters_are_rebuilt_from_their_tokens(where: str, sql: str) -> None:
    assert compile_where(where) == sql
    assert ChunkFilter(path="*.pdf", where=where).sql() == f"path LIKE '%.pdf' AND ({sql})"


def test_blank_where_and_no_parts_let_everything_through() -> None:
    assert ChunkFilter(where="  ").sql() is None
    assert ChunkFilter(paths=[]).sql() == "FALSE"
    assert ChunkFilter(paths=["a'b.md"]).sql() == "path IN ('a''b.md')"


def test_glob_wildcards_of_like_match_only_themselves() -> None:
    assert glob_to_like("a_b%c\\d*.pdf") == "a\\_b\\%c\\\\d%.pdf"
    assert glob_to_like("contracts/**/x?.md") == "contracts/%/x_.md"


def test_filter_columns_are_the_chunk_columns_less_the_vector() -> None:
    schema = chunks_schema(4, CollectionMeta(encoder=None, chunker={}))
    assert set(schema.names) - {"vector"} == FILTER_COLUMNS


def test_query_cleaning_keeps_real_characters_and_joins_surrogate_pairs() -> None:
    assert clean_query(" a\ud83d\ude00b\tc\u200bé§\n") == "a\U0001f600b c\u200bé§"
    assert clean_query("x\ud83dy\x00z\x9b") == "x y z"  # lone half, NUL, C1 control


def test_identifiers_are_distinct_and_capped() -> None:
    query = "Section 7.2(a) or 7.2(A) " + " ".join(f"{i}.{i}" for i in range(40))
    found = identifiers(query)
    assert found[:2] == ("7.2(a)", "0.0") and len(found) == MAX_IDENTIFIERS


# -- searches ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_where_cannot_widen_the_path_filter(retriever: Retriever, mode: str) -> None:
    every = retriever.search(QUERY, k=10, mode=mode)
    assert {Path(h.path).suffix for h in every} > {".pdf"}  # the query reaches other types
    with pytest.raises(UsageError, match="unbalanced parentheses"):
        retriever.search(QUERY, k=10, mode=mode, where=WIDEN, path="*.pdf")
    # A balanced OR stays inside its own parentheses.
    hits = retriever.search(QUERY, k=10, mode=mode, where="truncated OR 1 = 1", path="*.pdf")
    assert hits and all(h.path.endswith(".pdf") for h in hits)
    listed = retriever.search(QUERY, k=10, mode=mode, where="1 = 1 OR TRUE", paths=[hits[0].path])
    assert {h.path for h in listed} == {hits[0].path}


def test_valid_where_filters_still_work(retriever: Retriever) -> None:
    later = retriever.search("agreement", k=10, mode="lexical", where="page_start >= 2")
    assert later and all(h.page_start >= 2 for h in later)
    titled = retriever.search(
        "agreement", k=10, mode="hybrid", where="title = 'Mutual Non-Disclosure Agreement'"
    )
    assert [Path(h.path).name for h in titled] == ["mutual-nda-initech.md"]
    assert retriever.search("agreement", mode="vector", where="lower(title) = 'x'") == []


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("page_start = 'abc'", "could not convert to literal of type 'Int32'"),
        ("NULL", "does not return a boolean"),
        ("page_start", "does not return a boolean"),
        ("( )", "Expected: an expression, found: \\)"),
        ("page_start > 2 AND", "Expected: an expression"),
    ],
)
@pytest.mark.parametrize("mode", ["lexical", "vector"])
def test_filters_lance_rejects_are_usage_errors_without_its_source_paths(
    retriever: Retriever, mode: str, where: str, problem: str
) -> None:
    with pytest.raises(UsageError, match=problem) as caught:
        retriever.search("agreement", mode=mode, where=where)
    message = str(caught.value)
    assert message.startswith("bad where filter") and "\n" not in message
    assert ".rs:" not in message and "/home/" not in message and "SELECT" not in message
    assert "Error resolving" not in message  # Lance's echo of the compiled filter


def test_path_glob_underscore_is_not_a_wildcard(retriever: Retriever) -> None:
    assert retriever.search("agreement", mode="lexical", path="*acme-globex*")
    assert retriever.search("agreement", mode="lexical", path="*acme_globex*") == []


class TokenizedHashingEncoder(HashingEncoder):
    """The hashing fake behind a real Hugging Face tokenizer, which, like every HF model's,
    raises TypeError on a lone surrogate."""

    def __init__(self) -> None:
        super().__init__()
        models = pytest.importorskip("tokenizers.models")
        tokenizers = pytest.importorskip("tokenizers")
        self.tokenizer = tokenizers.Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.tokenizer.encode_batch(list(texts))
        return super().encode_queries(texts)


@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_lone_surrogates_and_controls_in_the_query_are_spaces(samples_db: str, mode: str) -> None:
    retriever = Retriever("samples", db=samples_db, encoder=TokenizedHashingEncoder())
    expected = [h.chunk_id for h in retriever.search("pump termination", mode=mode, k=3)]
    assert expected
    for query in ["pump\ud800termination", "pump\udfff\x00termination\x1b"]:
        assert [h.chunk_id for h in retriever.search(query, mode=mode, k=3)] == expected
    with pytest.raises(UsageError, match="empty query"):
        retriever.search("\ud800\x00\x1b", mode=mode)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "query too long: 10,001 characters"),
        ({"query": b"termination"}, "the query must be text, not bytes"),
        ({"query": "x", "k": True}, "k must be at least 1"),
        ({"query": "x", "k": "5"}, "k must be a whole number"),
        ({"query": "x", "k": 2**63}, "at most 10,000"),
        ({"query": "x", "where": 3}, "where filter must be a string"),
        ({"query": "x", "path": ["*.pdf"]}, "path filter must be a glob string"),
        ({"query": "x", "paths": "a.pdf"}, "paths must be a list"),
    ],
)
def test_bad_arguments_are_usage_errors(retriever: Retriever, kwargs: dict, problem: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(UsageError, match=problem):
        retriever.search(**kwargs)


def test_cli_refuses_a_widening_where_in_one_line(samples_db: str) -> None:
    result = CliRunner().invoke(app, ["search", "x", "--where", WIDEN, "--db", samples_db])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: bad where filter '1=1) OR (1=1': unbalanced parentheses: ')' at position 3 has no '('"
    ]


def test_cli_refuses_undecodable_bytes_in_where_in_one_line(samples_db: str) -> None:
    # Bytes that are not UTF-8 reach sys.argv as lone surrogates (surrogateescape).
    args = ["search", "pump", "--where", "title = '\udcff'", "--db", samples_db]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: where filter contains a lone surrogate (not valid Unicode text)"
    ]
