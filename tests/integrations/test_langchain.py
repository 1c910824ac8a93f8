"""`DocsearchRetriever` returns LangChain Documents with the hit's text, provenance and scores."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest
from pydantic import ValidationError

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


def test_k_given_to_invoke_holds_for_that_call_only(samples_db: str) -> None:
    retriever = DocsearchRetriever(collection="samples", db=samples_db, k=4)
    opened = retriever.retriever
    assert len(retriever.invoke("termination for cause", k=1)) == 1
    assert len(retriever.invoke("termination for cause")) == 4
    assert len(asyncio.run(retriever.ainvoke("termination for cause", k=2))) == 2
    assert len(asyncio.run(retriever.ainvoke("termination for cause"))) == 4
    assert retriever.k == 4 and retriever.retriever is opened  # nothing rebuilt


def test_every_search_option_can_be_given_per_call(samples_db: str) -> None:
    retriever = DocsearchRetriever(collection="samples", db=samples_db, k=10)
    lexical = retriever.invoke(QUERY, mode="lexical")
    assert lexical and all(set(d.metadata["scores"]) == {"lexical", "fused"} for d in lexical)
    on_page3 = retriever.invoke("termination", mode="lexical", where="page_start = 3")
    assert on_page3 and all(d.metadata["page_start"] == 3 for d in on_page3)
    md_only = retriever.invoke("confidential information", path="*.md")
    assert md_only and all(d.metadata["path"].endswith(".md") for d in md_only)
    documents = retriever.invoke("termination", granularity="document")
    assert len({d.metadata["doc_id"] for d in documents}) == len(documents) > 1
    everything = retriever.invoke("termination")  # the constructor's options again
    assert len({d.metadata["doc_id"] for d in everything}) < len(everything)
    assert {"dense", "lexical"} <= set(everything[0].metadata["scores"])


def test_per_call_options_are_validated_as_the_constructor_validates_them(
    samples_db: str,
) -> None:
    retriever = DocsearchRetriever(collection="samples", db=samples_db, k=2)
    for bad in ({"k": "two"}, {"mode": "fuzzy"}, {"granularity": "page"}):
        with pytest.raises(ValidationError) as from_invoke:
            retriever.invoke(QUERY, **bad)
        with pytest.raises(ValidationError) as from_constructor:
            DocsearchRetriever(collection="samples", db=samples_db, **bad)
        assert from_invoke.value.errors() == from_constructor.value.errors()
        with pytest.raises(ValidationError):
            asyncio.run(retriever.ainvoke(QUERY, **bad))
    with pytest.raises(UsageError, match="unknown search option 'top_k'"):
        retriever.invoke(QUERY, top_k=1)
    with pytest.raises(UsageError, match="unbalanced parentheses"):
        retriever.invoke(QUERY, where="1=1) OR (1=1", path="*.pdf")
    assert len(retriever.invoke(QUERY, k="1")) == 1  # coerced as the constructor coerces it
    assert len(retriever.invoke(QUERY, verbose=True)) == 2  # LangChain's own argument
    assert (retriever.k, retriever.mode, retriever.granularity) == (2, None, "passage")
