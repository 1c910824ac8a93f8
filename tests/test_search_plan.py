"""A search parses its query once and plans its legs before running any: the plan says what
runs (the table below), and the query's identifiers and stems are worked out once however many
hits and snippets the search shows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from docsearch import query as query_module
from docsearch import snippets
from docsearch.fusion import BARE_WORDS_RULE, CHUNK_FUSION, DOCUMENT_RULES, TERM_LIST_RULE, Fusion
from docsearch.query import ParsedQuery
from docsearch.retriever import Retriever
from docsearch.search_plan import SearchPlan
from tests.helpers import index_samples

LONG = " ".join(["termination of the supply agreement for cause"] * 4)  # 28 words


@pytest.fixture(scope="module")
def samples_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return index_samples(tmp_path_factory.mktemp("plan"))


def plan(text: str, mode: str, documents: bool = True, **given: Any) -> SearchPlan:
    options: dict[str, Any] = {"fusion": None, "documents_answer": True} | given
    return SearchPlan.make(ParsedQuery.parse(text), mode, 10, documents=documents, **options)


@pytest.mark.parametrize(
    ("text", "mode", "documents", "rule", "bm25", "phrases", "encode", "whole"),
    [
        ("the supplier's confidential information", "hybrid", True, "hybrid", 1, 0, 1, 1),
        ("supplier confidential information", "hybrid", True, "words", True, False, True, True),
        (LONG, "hybrid", True, "lexical", True, False, False, True),
        ("pumps, infusion sets, patient safety", "hybrid", True, "key-terms", 1, 0, 0, 1),
        ("notice under Section 7.2(a)", "lexical", False, None, True, True, False, False),
        ("notice under Section 7.2(a)", "vector", True, "vector", False, False, True, False),
        ("notice under section 7.2(a)", "lexical", True, "lexical", True, False, False, True),
    ],
)
def test_the_plan_says_which_legs_run(
    text: str,
    mode: str,
    documents: bool,
    rule: str | None,
    bm25: bool,
    phrases: bool,
    encode: bool,
    whole: bool,
) -> None:
    made = plan(text, mode, documents)
    rules = {"key-terms": TERM_LIST_RULE, "words": BARE_WORDS_RULE, None: None} | DOCUMENT_RULES
    assert made.rule is rules[rule]
    assert (made.bm25, made.phrases, made.encode, made.whole_bm25) == (
        bool(bm25),
        bool(phrases),
        bool(encode),
        bool(whole),
    )
    assert made.beside == made.bm25  # a vector search has nothing to overlap its encoding with


def test_without_document_legs_documents_rank_by_their_best_chunks() -> None:
    made = plan("supplier confidential information", "hybrid", documents_answer=False)
    assert made.rule is CHUNK_FUSION and not made.whole_bm25 and made.encode
    own = Fusion("rrf", {"dense": 1.0, "lexical": 1.0})
    given = plan("supplier confidential information", "hybrid", fusion=own)
    assert given.rule is own and given.chunk_rule is own


def _counting(calls: Counter[str], name: str, work: Callable[[str], Any]) -> Callable[..., Any]:
    def counted(text: str, *args: Any) -> Any:
        calls[name] += 1
        return work(text, *args)

    return counted


@pytest.mark.parametrize("granularity", ["document", "passage"])
def test_a_search_works_out_its_identifiers_and_stems_once(
    samples_db: str, granularity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every snippet marks the query's stems and identifiers: they come from the search's
    ParsedQuery, not from the query parsed again per hit."""
    calls: Counter[str] = Counter()
    for module in (query_module, snippets):
        for name in ("identifiers", "content_stems"):
            monkeypatch.setattr(module, name, _counting(calls, name, getattr(module, name)))
    retriever = Retriever("samples", db=samples_db)
    hits = retriever.search(
        "confidential information of the supplier under Section 7.2(a)",
        k=5,
        mode="lexical",
        granularity=granularity,
    )
    assert len(hits) >= 3 and any(hit.snippet.marks for hit in hits)
    assert calls == {"identifiers": 1, "content_stems": 1}
