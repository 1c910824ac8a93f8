"""`DocsearchLlamaRetriever` returns LlamaIndex nodes with the hit's text, provenance and scores."""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode  # noqa: E402

from docsearch.errors import UsageError  # noqa: E402
from docsearch.integrations.llamaindex import DocsearchLlamaRetriever  # noqa: E402
from tests.integrations.conftest import PUMP_MANUAL, QUERY  # noqa: E402


def test_top_node_is_the_pump_manual_page_with_full_metadata(samples_db: str) -> None:
    results = DocsearchLlamaRetriever("samples", db=samples_db).retrieve(QUERY)
    top = results[0]
    node, meta = top.node, top.node.metadata
    assert isinstance(node, TextNode)
    assert meta["path"].endswith(PUMP_MANUAL)
    assert meta["pages"] == "2" and meta["page_start"] == meta["page_end"] == 2
    assert "E-MOT-21" in node.get_content() and "**E-MOT-21**" in meta["snippet"]
    assert node.node_id == meta["chunk_id"] and node.ref_doc_id == meta["doc_id"]
    assert (node.start_char_idx, node.end_char_idx) == (meta["char_start"], meta["char_end"])
    assert set(meta["scores"]) == {"dense", "lexical", "fused"}
    assert top.score == pytest.approx(meta["score"]) and meta["score"] > 0
    scores = [r.get_score() for r in results]
    assert scores == sorted(scores, reverse=True)


def test_llm_sees_provenance_but_not_scores(samples_db: str) -> None:
    node = DocsearchLlamaRetriever("samples", db=samples_db, k=1).retrieve(QUERY)[0].node
    prompt = node.get_content(metadata_mode=MetadataMode.LLM)
    assert PUMP_MANUAL in prompt and "pages: 2" in prompt
    assert "snippet" not in prompt and "scores" not in prompt


def test_k_passages_and_filters_are_passed_through(samples_db: str) -> None:
    passages = DocsearchLlamaRetriever("samples", db=samples_db, k=3).retrieve("termination")
    assert len(passages) == 3
    assert len({p.node.metadata["doc_id"] for p in passages}) < 3  # passages, not documents
    lexical = DocsearchLlamaRetriever(db=samples_db, mode="lexical", where="page_start = 3")
    found = lexical.retrieve("termination")
    assert found and all(set(r.node.metadata["scores"]) == {"lexical", "fused"} for r in found)
    assert all(r.node.metadata["page_start"] == 3 for r in found)


def test_a_where_cannot_widen_the_path_filter(samples_db: str) -> None:
    narrowed = DocsearchLlamaRetriever(db=samples_db, where="truncated OR TRUE", path="*.pdf", k=10)
    docs = narrowed.retrieve(QUERY)
    assert docs and all(d.node.metadata["path"].endswith(".pdf") for d in docs)
    widening = DocsearchLlamaRetriever(db=samples_db, where="1=1) OR (1=1", path="*.pdf")
    with pytest.raises(UsageError, match="unbalanced parentheses"):
        widening.retrieve(QUERY)


def test_missing_llamaindex_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_index.core.retrievers", None)
    monkeypatch.delitem(sys.modules, "docsearch.integrations.llamaindex")
    with pytest.raises(ImportError, match=r"pip install 'docsearch\[llamaindex\]'"):
        importlib.import_module("docsearch.integrations.llamaindex")


def test_retrieve_and_aretrieve_give_scored_nodes_best_first(samples_db: str) -> None:
    retriever = DocsearchLlamaRetriever("samples", db=samples_db, k=3)
    assert BaseRetriever in type(retriever).__mro__
    from_str = retriever.retrieve(QUERY)
    from_bundle = asyncio.run(retriever.aretrieve(QueryBundle(QUERY)))
    for results in (from_str, from_bundle):
        assert len(results) == 3 and all(isinstance(r, NodeWithScore) for r in results)
        scores = [r.score for r in results]
        assert all(isinstance(score, float) and score > 0 for score in scores)
        assert scores == sorted(scores, reverse=True)
    assert [r.node.node_id for r in from_bundle] == [r.node.node_id for r in from_str]
    assert [r.score for r in from_bundle] == pytest.approx([r.score for r in from_str])


def test_aretrieve_searches_off_the_event_loop(samples_db: str) -> None:
    searched_on: list[int] = []

    class Recording(DocsearchLlamaRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            searched_on.append(threading.get_ident())
            return super()._retrieve(query_bundle)

    async def loop_thread_and_results() -> tuple[int, list[NodeWithScore]]:
        retriever = Recording("samples", db=samples_db, k=2)
        return threading.get_ident(), await retriever.aretrieve(QUERY)

    loop_thread, results = asyncio.run(loop_thread_and_results())
    assert len(results) == 2 and searched_on and searched_on[0] != loop_thread


def test_similarity_top_k_is_k_in_the_constructor_and_between_calls(samples_db: str) -> None:
    retriever = DocsearchLlamaRetriever("samples", db=samples_db, similarity_top_k=2)
    opened = retriever.retriever
    assert retriever.k == retriever.similarity_top_k == 2
    assert len(retriever.retrieve("termination for cause")) == 2
    retriever.similarity_top_k = 1
    assert len(retriever.retrieve("termination for cause")) == 1
    assert len(asyncio.run(retriever.aretrieve("termination for cause"))) == 1
    assert retriever.retriever is opened  # the setting changed, nothing was rebuilt
    assert DocsearchLlamaRetriever("samples", db=samples_db).similarity_top_k == 5
    with pytest.raises(UsageError, match="not both"):
        DocsearchLlamaRetriever("samples", db=samples_db, k=3, similarity_top_k=2)
