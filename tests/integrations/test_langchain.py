"""`DocsearchRetriever` returns LangChain Documents with the hit's text, provenance and scores."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest

pytest.importorskip("langchain_core")

from docsearch.errors import UsageError  # noqa: E402
from docsearch.integrations.langchain import DocsearchRetriever  # noqa: E402
from docsearch.retriever import Retriever  # noqa: E402
from tests.integrations.conftest import PUMP_MANUAL, QUERY  # noqa: E402


def test_top_document_is_the_pump_manual_page_with_full_metadata(samples_db: str) -> None:
    docs = DocsearchRetriever(collection="samples", db=samples_db).invoke(QUERY)
    top = docs[0]
    meta = top.metadata
    assert meta["path"].endswith(PUMP_MANUAL)
    assert meta["pages"] == "2" and meta["page_start"] == meta["page_end"] == 2
    assert "E-MOT-21" in top.page_content and "**E-MOT-21**" in meta["snippet"]
    assert 0 <= meta["char_start"] < meta["char_end"]
    assert (
        set(meta["scores"]) == {"dense", "lexical", "fused"}
        and meta["scores"]["lexical"]["rank"] == 1
    )
    assert meta["score"] > 0 and meta["collection"] == "samples"
    assert top.id == meta["chunk_id"] and meta["doc_id"] and meta["title"]


def test_passages_are_the_retrievers_passages_and_k_is_honoured(samples_db: str) -> None:
    docs = DocsearchRetriever(collection="samples", db=samples_db, k=3).invoke("termination")
    hits = Retriever("samples", db=samples_db).search("termination", k=3, granularity="passage")
    assert len(docs) == 3
    assert [d.id for d in docs] == [h.chunk_id for h in hits]
    assert [d.page_content for d in docs] == [h.text for h in hits]
    assert len({d.metadata["doc_id"] for d in docs}) < 3  # several passages of one contract


def test_document_granularity_gives_one_result_per_document(samples_db: str) -> None:
    retriever = DocsearchRetriever(
        collection="samples", db=samples_db, k=10, granularity="document"
    )
    docs = retriever.invoke("termination")
    assert 1 < len(docs) <= 5  # the sample corpus has five documents
    assert len({d.metadata["doc_id"] for d in docs}) == len(docs)


def test_mode_where_and_path_are_passed_through(samples_db: str) -> None:
    lexical = DocsearchRetriever(collection="samples", db=samples_db, mode="lexical", k=4)
    docs = lexical.invoke(QUERY)
    assert docs and all(set(d.metadata["scores"]) == {"lexical", "fused"} for d in docs)
    page3 = DocsearchRetriever(db=samples_db, mode="lexical", where="page_start = 3")
    on_page3 = page3.invoke("termination")
    assert on_page3 and all(d.metadata["page_start"] == 3 for d in on_page3)
    md_only = DocsearchRetriever(db=samples_db, path="*.md")
    found = md_only.invoke("confidential information")
    assert found and all(d.metadata["path"].endswith(".md") for d in found)


def test_the_docsearch_retriever_is_opened_once_and_async_works(samples_db: str) -> None:
    retriever = DocsearchRetriever(collection="samples", db=samples_db, mode="lexical", k=2)
    first = retriever.retriever
    docs = asyncio.run(retriever.ainvoke(QUERY))
    assert retriever.retriever is first
    assert len(docs) == 2 and docs[0].metadata["path"].endswith(PUMP_MANUAL)


def test_a_where_cannot_widen_the_path_filter(samples_db: str) -> None:
    narrowed = DocsearchRetriever(db=samples_db, where="truncated OR TRUE", path="*.pdf", k=10)
    docs = narrowed.invoke(QUERY)
    assert docs and all(d.metadata["path"].endswith(".pdf") for d in docs)
    widening = DocsearchRetriever(db=samples_db, where="1=1) OR (1=1", path="*.pdf")
    with pytest.raises(UsageError, match="unbalanced parentheses"):
        widening.invoke(QUERY)


def test_missing_langchain_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core.retrievers", None)
    monkeypatch.delitem(sys.modules, "docsearch.integrations.langchain")
    with pytest.raises(ImportError, match=r"pip install 'docsearch\[langchain\]'"):
        importlib.import_module("docsearch.integrations.langchain")
