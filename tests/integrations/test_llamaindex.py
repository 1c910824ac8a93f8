"""`DocsearchLlamaRetriever` returns LlamaIndex nodes with the hit's text, provenance and scores."""

from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.schema import MetadataMode, TextNode  # noqa: E402

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
