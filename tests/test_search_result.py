"""`Retriever.search_result`: the mode that answered and the rule that ranked, beside the hits
`search` returns as it always did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from docsearch.config import Settings
from docsearch.errors import EncoderUnavailableError
from docsearch.results import SearchResult
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


QUERY = "tenant rent"


def _alike_words(query: str) -> list[str]:
    """Eight filler words the fake encoder hashes into the query words' buckets: documents
    padded with them all look about as near the query to the dense side."""
    from tests.fakes import _bucket

    buckets = {_bucket(word, 64) for word in query.split()}
    return [w for w in (f"x{i}" for i in range(5000)) if _bucket(w, 64) in buckets][:8]


def _search_with_legs(
    tmp_path: Path, texts: dict[str, str], query: str
) -> tuple[SearchResult[Any], dict[str, dict[str, float]]]:
    """`texts` indexed (file name -> text), `query` searched in hybrid, and the document-level
    legs read from the store as a search reads them (chunk BM25 as each document's best)."""
    (tmp_path / "docs").mkdir()
    for name, text in texts.items():
        (tmp_path / "docs" / name).write_text(text)
    db = str(tmp_path / "db")
    assert not index_into(db, tmp_path / "docs", "c").failed
    with Retriever("c", settings=Settings(db=db)) as retriever:
        result = retriever.search_result(query, mode="hybrid", k=20)
        store = retriever.store
        vector = retriever.encoder().encode_queries([query])[0]
        chunks: dict[str, float] = {}
        for one in store.search_text(query, 500, None):
            chunks[one.doc_id] = max(chunks.get(one.doc_id, 0.0), one.score)
        legs = {
            "doc_lexical": {
                d.doc_id: d.score for d in store.search_documents_text(query, 500, None)
            },
            "lexical": chunks,
            "doc_dense": {
                d.doc_id: d.score for d in store.search_documents_vector(vector, 500, None)
            },
        }
    return result, legs


def test_bare_words_handed_to_the_key_term_rule_report_it(tmp_path: Path) -> None:
    """Bare words whose dense side is unsure of its answer (fusion.UnsureDense) are ranked by
    the key-term rule, and the result names that rule, not the hybrid one it was handed from.
    The filler words hash into the query words' buckets of the fake encoder, so every
    document's mean vector looks about as near the query as the lease's does, while
    whole-document BM25 singles the lease out."""
    import random

    from docsearch.fusion import BARE_WORDS_RULE, TERM_LIST_RULE

    alike = _alike_words(QUERY)
    rng, vocabulary = random.Random(0), [f"w{i}" for i in range(400)]
    texts = {}
    for i in range(12):
        words = [rng.choice(vocabulary) for _ in range(120)] + alike * 3
        rng.shuffle(words)
        if i < 6:
            words[10] = "rent"
        texts[f"other{i}.txt"] = " ".join(words)
    words = [rng.choice(vocabulary) for _ in range(140)]
    words[5] = words[50] = "tenant"
    words[100] = words[130] = "rent"
    texts["lease.txt"] = " ".join(words)
    result, legs = _search_with_legs(tmp_path, texts, QUERY)
    assert BARE_WORDS_RULE.unsure is not None and BARE_WORDS_RULE.unsure.holds(legs)
    assert BARE_WORDS_RULE.resolved(legs) is TERM_LIST_RULE
    assert (result.mode, result.rule) == ("hybrid", "key-terms")
    names = [Path(hit.path).name for hit in result.hits]
    # ranked by the lexical legs alone: the lease first, only documents holding a query word
    assert names[0] == "lease.txt"
    assert set(names) == {"lease.txt", *(f"other{i}.txt" for i in range(6))}


def test_bare_words_spread_through_one_document_rank_by_whole_document_bm25(
    tmp_path: Path,
) -> None:
    """The lease names the tenant and the rent three times each, in passages far apart; fifteen
    memos each hold one passage with both words once. Whole-document BM25 ranks the lease
    first, chunk BM25 ranks its passages below every memo's, and the fake encoder's mean
    vectors (filler hashed into the query words' buckets) cannot tell the documents apart: the
    words are spread through the lease (fusion.SpreadWords), so whole-document BM25 alone
    ranks, and the result says so."""
    import random

    from docsearch.fusion import BARE_WORDS_RULE, WHOLE_DOCUMENT_RULE, rank_of_best

    alike = _alike_words(QUERY)
    rng, vocabulary = random.Random(0), [f"w{i}" for i in range(400)]

    def filler(n: int) -> list[str]:
        words = [rng.choice(vocabulary) for _ in range(n)] + alike * 2
        rng.shuffle(words)
        return words

    texts = {}
    for i in range(15):
        words = filler(230)
        words[120:120] = ["tenant", "rent"]
        texts[f"memo{i:02d}.txt"] = " ".join(words)
    lease = filler(230)
    lease[5:5] = ["tenant"] * 3
    lease[-5:-5] = ["rent"] * 3
    texts["lease.txt"] = " ".join(lease)
    result, legs = _search_with_legs(tmp_path, texts, QUERY)
    whole = legs["doc_lexical"]
    assert rank_of_best(whole, legs["lexical"]) == 16  # every memo's passage above the lease's
    assert BARE_WORDS_RULE.resolved(legs) is WHOLE_DOCUMENT_RULE
    assert (result.mode, result.rule) == ("hybrid", "whole-document")
    names = [Path(hit.path).name for hit in result.hits]
    assert names[0] == "lease.txt" and len(names) == 16
    assert [hit.doc_id for hit in result.hits] == sorted(whole, key=lambda d: (-whole[d], d))
