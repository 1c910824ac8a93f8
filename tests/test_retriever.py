"""Search over a real LanceDB collection of the sample corpus (hashing fake encoder)."""

from __future__ import annotations

import pytest

from docsearch.errors import UsageError
from docsearch.fusion import Fusion, blend, ranks
from docsearch.indexer.filters import ChunkFilter
from docsearch.query import ParsedQuery
from docsearch.ranking import MAX_PASSAGES, DocumentRanker
from docsearch.retriever import Retriever
from docsearch.store.schema import Candidate
from tests.helpers import index_samples


@pytest.fixture(scope="module")
def samples_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return index_samples(tmp_path_factory.mktemp("ret"))


def test_hybrid_reports_rank_and_score_per_leg(samples_db: str) -> None:
    plain_rrf = Fusion("rrf", {"dense": 1.0, "lexical": 1.0}, 60)
    retriever = Retriever("samples", db=samples_db, fusion=plain_rrf)
    hits = retriever.search("motor stall error code E-MOT-21", k=3)
    top = hits[0]
    assert top.path.endswith("x200-infusion-pump-service-manual.txt")
    assert top.pages == "2"
    # A fusion of the chunk legs ranks each document by its best chunk in each (no document legs).
    assert set(top.scores) == {"dense", "lexical", "fused"}
    assert top.scores["lexical"]["rank"] == 1 and top.scores["lexical"]["score"] > 0
    assert top.scores["dense"]["rank"] >= 1
    expected = 1 / (60 + top.scores["dense"]["rank"]) + 1 / (60 + top.scores["lexical"]["rank"])
    assert top.score == pytest.approx(expected)
    assert top.scores["fused"] == {"rank": 1, "score": top.score}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len({h.doc_id for h in hits}) == len(hits)  # one hit per document


def test_default_hybrid_ranks_documents_by_the_document_rule(samples_db: str) -> None:
    retriever = Retriever("samples", db=samples_db)
    assert retriever.fusion is None  # no fusion configured: the default rules
    top = retriever.search("motor stall error code E-MOT-21", k=3)[0]
    assert top.path.endswith("x200-infusion-pump-service-manual.txt")
    # Every leg that ran reports its rank and raw score; no agreement guard in the default rule.
    assert set(top.scores) == {"doc_lexical", "lexical", "doc_dense", "dense", "fused"}
    assert top.scores["doc_lexical"]["rank"] == 1
    assert top.scores["fused"] == {"rank": 1, "score": top.score}
    # A rule with the guard reports the factor it gave the dense legs.
    guarded = Fusion("zscore", {"doc_lexical": 0.5, "doc_dense": 0.5}, tau=0.3)
    top = Retriever("samples", db=samples_db, fusion=guarded).search("motor stall E-MOT-21")[0]
    assert 0.0 <= top.scores["fused"]["agreement"] <= 1.0


@pytest.mark.parametrize(
    ("query", "document", "page"),
    [
        ("Section 7.2(a)", "acme-globex-msa.pdf", "3"),
        ("ISO/IEC 27001:2022", "acme-globex-msa.pdf", "3"),
        ("PPR-9087", "x200-infusion-pump-service-manual.txt", None),
        ("ISO 13485:2016", None, None),
    ],
)
def test_lexical_finds_exact_identifiers(
    samples_db: str, query: str, document: str | None, page: str | None
) -> None:
    hits = Retriever("samples", db=samples_db).search(query, k=3, mode="lexical")
    if document:
        assert hits[0].path.endswith(document)
    ident = query.split()[-1]
    assert f"**{ident}**" in hits[0].snippet.marked()
    assert ident in hits[0].text
    if page:
        assert hits[0].pages == page


def test_many_identifiers_cost_one_extra_full_text_search(
    samples_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long query's identifiers share one phrase search (they each ran their own), and the
    chunk holding the most of them still comes first."""
    from docsearch.store.reads import Store

    searches: list[object] = []
    real = Store.search_text

    def counted(self: Store, query: object, k: int, where: ChunkFilter | None, **kw: bool) -> list:  # type: ignore[type-arg]
        searches.append(query)
        return real(self, query, k, where, **kw)

    monkeypatch.setattr(Store, "search_text", counted)
    absent = ["QX-4411", "88.7(q)", "ZZ-0001", "4417:1999", "KB-77"]
    idents = ["7.2(a)", *absent, "E-MOT-21", "PPR-9087"]  # the last two share one chunk
    query = "what to do about " + " and ".join(idents)
    retriever = Retriever("samples", db=samples_db)
    top = retriever.search(query, k=3, mode="lexical", granularity="passage")[0]
    assert len(searches) == 2  # the BM25 leg and one search for all eight phrases
    assert "PPR-9087" in top.text and "E-MOT-21" in top.text


def test_lexical_stems_terms(samples_db: str) -> None:
    hits = Retriever("samples", db=samples_db).search("terminating agreements", mode="lexical")
    assert any("**" in str(h.snippet) and "erminat" in str(h.snippet) for h in hits)


def test_passages_and_filters(samples_db: str) -> None:
    retriever = Retriever("samples", db=samples_db)
    passages = retriever.search("termination", k=5, mode="lexical", granularity="passage")
    assert len({p.chunk_id for p in passages}) == len(passages)
    assert len({p.doc_id for p in passages}) < len(passages)  # several passages of one contract
    only_md = retriever.search("confidential information", mode="lexical", path="*.md")
    assert only_md and all(h.path.endswith(".md") for h in only_md)
    page3 = retriever.search("termination", mode="lexical", where="page_start = 3")
    assert page3 and all(h.page_start == 3 for h in page3)


def test_vector_mode_uses_only_the_dense_leg(samples_db: str) -> None:
    hits = Retriever("samples", db=samples_db).search("blood pressure monitoring", mode="vector")
    assert hits and all(set(h.scores) == {"dense", "fused"} for h in hits)
    assert hits[0].path.endswith("hypertension-guideline.html")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": "  "}, "empty query"),
        ({"query": "x", "mode": "semantic"}, "unknown mode"),
        ({"query": "x", "k": 0}, "at least 1"),
        ({"query": "x", "granularity": "page"}, "granularity"),
    ],
)
def test_bad_search_input(samples_db: str, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(UsageError, match=message):
        Retriever("samples", db=samples_db).search(**kwargs)


def test_default_collection_is_the_only_one(samples_db: str) -> None:
    assert Retriever(db=samples_db).collection == "samples"


def test_filter_combines_glob_and_sql() -> None:
    assert ChunkFilter(path="contracts/*.pdf", where="page_start > 2").sql() == (
        "path LIKE 'contracts/%.pdf' AND (page_start > 2)"
    )
    assert ChunkFilter(path="it's*").sql() == "path LIKE 'it''s%'"
    assert ChunkFilter().sql() is None


def test_rrf_and_minmax_by_hand() -> None:
    legs = {"dense": {"a": 0.9, "b": 0.5}, "lexical": {"b": 10.0, "c": 3.0}}
    assert ranks(legs["lexical"]) == {"b": 1, "c": 2}
    fused = blend(legs, {"dense": 1.0, "lexical": 2.0}, "rrf", k=60)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 2 / 61)
    assert fused["c"] == pytest.approx(2 / 62)
    blended = blend(legs, {"dense": 1.0, "lexical": 1.0}, "minmax")
    assert blended == pytest.approx({"a": 1.0, "b": 1.0, "c": 0.0})
    assert Fusion("minmax")(legs) == blended
    with pytest.raises(ValueError, match="unknown fusion"):
        Fusion("max")(legs)


def test_lexical_candidates_keep_the_true_bm25_under_the_identifier_lift(samples_db: str) -> None:
    retriever = Retriever("samples", db=samples_db)
    plain = {c.chunk_id: c.score for c in retriever.store.search_text("PPR-9087", 50, None)}
    found = retriever.lexical("PPR-9087", 50, None)
    top = found[0]
    assert "PPR-9087" in top.text and top.score > top.raw_score  # lifted above every BM25
    assert top.score > max(plain.values())
    for one in found:
        if one.chunk_id in plain:
            assert one.raw_score == pytest.approx(plain[one.chunk_id], rel=1e-6)
    passage = retriever.search("PPR-9087", k=1, mode="lexical", granularity="passage")[0]
    assert passage.chunk_id == top.chunk_id
    assert passage.scores["lexical"]["score"] == pytest.approx(top.raw_score, rel=1e-6)
    hit = retriever.search("PPR-9087", k=1, mode="lexical")[0]
    assert hit.passages[0].chunk_id == top.chunk_id  # the lifted chunk shows the document


def test_a_hit_carries_its_snippet_with_offsets_and_the_old_json(samples_db: str) -> None:
    hit = Retriever("samples", db=samples_db).search("motor stall E-MOT-21", k=1, mode="lexical")[0]
    snippet = hit.snippet
    assert hit.char_start <= snippet.char_start < snippet.char_end <= hit.char_end
    source = hit.text[snippet.char_start - hit.char_start : snippet.char_end - hit.char_start]
    assert " ".join(source.split()) in snippet.text  # the shown passage is that span
    assert source[snippet.anchor - snippet.char_start :].startswith(
        snippet.text[snippet.marks[0][0] : snippet.marks[0][1]]
    )  # the anchor is where the first marked term is
    assert [snippet.text[a:b] for a, b in snippet.marks if "E-MOT" in snippet.text[a:b]]
    shown = hit.as_dict()
    assert (
        shown["snippet"] == snippet.marked() == str(snippet) and "**E-MOT-21**" in shown["snippet"]
    )
    assert shown["snippet_marks"] == snippet.marks and shown["pages"] == hit.pages
    assert shown["snippet_span"] == (snippet.char_start, snippet.char_end)
    assert {"text", "path", "chunk_id", "doc_id", "score", "scores"} <= shown.keys()


def test_hybrid_encodes_the_query_and_searches_phrases_and_documents_beside_the_chunk_bm25(
    samples_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query vector and the identifiers' phrase search come from the Retriever's query
    thread; whole-document BM25 runs there for a query not encoded, and on the caller's thread
    after the chunk BM25 beside an encoding (which then has the query thread to itself); the
    ranking is the one the same search gives with all of them done one after the other on the
    caller's thread. Ranking documents by plain BM25 needs no phrase search: the chunk pool's
    own chunks that hold the identifier lead the passages."""
    import threading

    from docsearch import retriever as module

    retriever = Retriever("samples", db=samples_db)
    encoder, store = retriever.encoder(), retriever.store
    threads: dict[str, list[str]] = {}

    def recorded(owner: object, name: str) -> None:
        real = getattr(owner, name)

        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            threads.setdefault(name, []).append(threading.current_thread().name)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, call)

    recorded(encoder, "encode_queries")
    for name in ("search_phrases", "search_documents_text", "search_text"):
        recorded(store, name)
    query = "motor stall error code E-MOT-21"  # short (dense legs weighed), one identifier
    beside = retriever.search(query, k=5)
    assert [t.split("_")[0] for t in threads["encode_queries"]] == ["docsearch-query"]
    assert threads["search_documents_text"] == ["MainThread"]
    assert threads["search_text"][0] == "MainThread" and "search_phrases" not in threads
    threads.clear()
    retriever.search(" ".join([query] * 5), k=5)  # 30 words: the lexical rule, not encoded
    assert "encode_queries" not in threads
    assert [t.split("_")[0] for t in threads["search_documents_text"]] == ["docsearch-query"]
    assert "E-MOT-21" in beside[0].passages[0].text
    threads.clear()
    retriever.search(query, k=5, granularity="passage")
    assert [t.split("_")[0] for t in threads["search_phrases"]] == ["docsearch-query"]
    monkeypatch.setattr(module, "OVERLAP_ENCODING", False)
    threads.clear()
    first = retriever.search(query, k=5)
    assert {t for names in threads.values() for t in names} == {"MainThread"}
    assert [(h.doc_id, h.score, h.scores, h.passages) for h in beside] == [
        (h.doc_id, h.score, h.scores, h.passages) for h in first
    ]


def test_documents_no_chunk_pool_reached_get_the_passages_a_search_within_each_finds(
    samples_db: str,
) -> None:
    """One full-text search over all of them picks what a search per document would."""
    retriever = Retriever("samples", db=samples_db)
    query = "confidential information supplier patient pump agreement"
    docs = {c.doc_id: c.path for c in retriever.store.search_text(query, 100, None)}
    assert len(docs) >= 4
    ranker = DocumentRanker(retriever.store)
    together = ranker.passages_of(docs, ParsedQuery.parse(query), None)
    assert set(together) == set(docs)
    for doc, path in docs.items():
        alone = retriever.store.search_text(query, MAX_PASSAGES, ChunkFilter(paths=[path]))
        assert [p.chunk_id for p in together[doc]] == [c.chunk_id for c in alone], path
        assert [p.score for p in together[doc]] == pytest.approx([c.score for c in alone])
    first = next(iter(docs))
    shown = ranker.passages_of(
        {"nothing": "/nowhere/at/all.txt", first: docs[first]}, ParsedQuery.parse(query), None
    )
    assert shown["nothing"] == [] and shown[first] == together[first]


def _chunk(chunk_id: str, text: str, score: float) -> Candidate:
    return Candidate(
        text=text, path="a.txt", title="", page_start=1, page_end=1, char_start=0,
        char_end=len(text), heading_path="", chunk_id=chunk_id, doc_id="a", ordinal=0,
        ocr=False, score=score, raw_score=score,
    )  # fmt: skip


def test_the_lift_raises_pool_chunks_holding_identifiers_and_keeps_other_phrase_hits_out() -> None:
    """Without a phrase search (a document rule) the BM25 pool's own chunks that hold an
    identifier verbatim still come first; a phrase hit that lacks it verbatim ("7.2 (a)") is
    not added, since its phrase score is not on the BM25 scale."""
    from docsearch.ranking import lift

    query = ParsedQuery.parse("notice under section 7.2(a)")
    found = [_chunk("plain", "notice of termination", 9.0), _chunk("held", "per 7.2(a)", 2.0)]
    assert [c.chunk_id for c in lift(query, found, [], 10)] == ["held", "plain"]
    apart = _chunk("apart", "see 7.2 (a) for notice", 30.0)
    lifted = lift(query, found, [apart, _chunk("phrase", "clause 7.2(a)", 1.0)], 10)
    assert [c.chunk_id for c in lifted] == ["held", "phrase", "plain"]
    assert [c.raw_score for c in lifted] == [2.0, 1.0, 9.0]  # the true scores stay
