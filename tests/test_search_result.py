"""`Retriever.search_result`: the mode that answered and the rule that ranked, beside the hits
`search` returns as it always did."""

from __future__ import annotations

from typing import Any

import pytest

from docsearch.config import Settings
from docsearch.errors import EncoderUnavailableError
from docsearch.retriever import Retriever
from tests.helpers import index_into

LONG = " ".join(["the tenant shall pay the rent monthly and give notice before termination"] * 3)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("results")
    (base / "docs").mkdir()
    (base / "docs" / "lease.md").write_text("# Lease\n\nThe tenant pays rent monthly.\n")
    (base / "docs" / "memo.md").write_text("# Memo\n\nParking permits are issued in spring.\n")
    path = str(base / "db")
    assert not index_into(path, base / "docs", "c").failed
    return path


def _unavailable(spec: dict[str, Any]) -> Any:
    raise EncoderUnavailableError("no model files here")


def test_hybrid_without_its_encoder_reports_lexical_and_why(db: str) -> None:
    retriever = Retriever("c", settings=Settings(db=db), encoders=_unavailable)
    result = retriever.search_result("tenant rent", mode="hybrid")
    assert result.hits and (result.mode, result.asked) == ("lexical", "hybrid")
    assert result.fallback == "encoder unavailable" and result.rule == "lexical"


def test_the_rule_is_named_and_search_keeps_returning_hits(db: str) -> None:
    with Retriever("c", settings=Settings(db=db)) as retriever:
        short = retriever.search_result("tenant rent", mode="hybrid")
        assert (short.mode, short.rule, short.fallback) == ("hybrid", "hybrid", None)
        long = retriever.search_result(LONG, mode="hybrid")
        assert (long.mode, long.rule) == ("hybrid", "long-query")
        hits = retriever.search("tenant rent", mode="hybrid")
        assert isinstance(hits, list)
        assert [h.chunk_id for h in hits] == [h.chunk_id for h in short.hits]
        lexical = retriever.search_result("tenant rent", mode="lexical", where="ordinal >= 0")
        assert (lexical.mode, lexical.rule) == ("lexical", "chunk")  # no document leg can answer
