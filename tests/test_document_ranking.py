"""Document-level ranking on a tiny corpus whose right answer is known.

`spread.txt` talks about the query in every paragraph; `single.txt` has one paragraph that
matches it better than any other chunk and is otherwise about something else. Whole-document
legs and aggregated chunk legs (the lexical rule, and hybrid for a long query that summarises a
document) rank `spread` first; a document scored as its best chunk ranks `single` first. The fused scores and leg breakdowns are recomputed here from the legs' raw
candidates, with the rules' arithmetic written out by hand (not docsearch.fusion).
"""

from __future__ import annotations

import copy
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from docsearch.fusion import (
    BARE_WORDS_CONFIDENCE,
    LONG_QUERY_WORDS,
    SHORT_RULE_CONFIDENCE,
    TERM_LIST_CONFIDENCE,
    TERM_LIST_RULE,
    document_rule,
    is_keyword_query,
    is_term_list,
)
from docsearch.retriever import Hit, Retriever
from tests.fakes import HashingEncoder
from tests.helpers import index_into

QUERY = "coolant pump vibration"
FILLER = [
    "tomato seedlings want warm soil and regular watering through the dry spring weeks",
    "the choir rehearsed the old hymn twice before the evening concert began in town",
    "our bakery sells rye loaves and almond pastries every morning except on sundays",
    "the ferry timetable changes in winter when storms close the northern harbour",
    "volunteers repainted the library shelves and sorted donated atlases by region",
    "the museum lent two bronze statues to a travelling exhibition about sailors",
    "grandmother kept bees behind the orchard and sold honey at the village market",
    "a new cycling lane now links the railway station with the university campus",
]


def _write_corpus(root: Path) -> None:
    root.mkdir()
    spread = [f"In shift {i} the coolant pump showed vibration. {FILLER[i]}." for i in range(8)]
    single = [
        "Coolant pump vibration: coolant pump vibration was measured and the coolant pump "
        "vibration alarm rang, coolant pump vibration high."
    ] + [f"{line}." for line in FILLER]
    (root / "spread.txt").write_text("\n\n".join(spread) + "\n")
    (root / "single.txt").write_text("\n\n".join(single[:8]) + "\n")
    for i in range(3):
        (root / f"other{i}.txt").write_text("\n\n".join(f"{line}." for line in FILLER) + "\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("doclevel")
    _write_corpus(tmp / "docs")
    db = str(tmp / "db")
    for name, encoder, options in (("lex", "none", {}), ("hyb", "hashing", {"max_tokens": 40})):
        report = index_into(db, tmp / "docs", name, encoder=encoder, options=options, max_tokens=40)
        assert not report.failed
    return db, tmp / "docs"


def _names(hits: list[Hit]) -> list[str]:
    return [Path(h.path).name for h in hits]


def _minmax(scores: dict[str, float]) -> dict[str, float]:
    low, high = min(scores.values()), max(scores.values())
    return {key: (s - low) / ((high - low) or 1.0) for key, s in scores.items()}


def _zscores(scores: dict[str, float], keys: set[str]) -> dict[str, float]:
    values = np.array(list(scores.values()), dtype=np.float64)
    mean, std = values.mean(), values.std() or 1.0
    z = {key: (s - mean) / std for key, s in scores.items()}
    return {key: z.get(key, min(z.values())) for key in keys}


def _confident(weights: tuple[float, ...], z: list[dict[str, float]], power: float) -> list[float]:
    """The weights each times its leg's confidence (its best z) to `power`, their total kept
    (fusion.weighed_by_confidence written out)."""
    scaled = [w * max(leg.values()) ** power for w, leg in zip(weights, z, strict=True)]
    return [s * sum(weights) / sum(scaled) for s in scaled]


def _lse(per_doc: dict[str, list[float]], temp: float = 0.1) -> dict[str, float]:
    """Each document's chunk BM25 scores as a soft maximum in units of the best chunk's."""
    unit = temp * max(s for scores in per_doc.values() for s in scores)
    return {d: temp * math.log(sum(math.exp(s / unit) for s in v)) for d, v in per_doc.items()}


def _chunk_bm25(retriever: Retriever, query: str = QUERY) -> dict[str, list[float]]:
    per_doc: dict[str, list[float]] = {}
    for one in retriever.store.search_text(query, 500, None):
        per_doc.setdefault(one.doc_id, []).append(one.raw_score)
    return per_doc


def test_search_box_operators_are_not_searched_for_as_words(corpus: tuple[str, Path]) -> None:
    """AND in capitals joins the words of a search box. Whole-document BM25 keeps stop words,
    so searched for as a word it would match "and" in the three filler documents, which hold
    neither of the words joined; a sentence's "and" still counts as a word."""
    db, _ = corpus
    with Retriever("lex", db=db) as retriever:

        def found(query: str) -> list[str]:
            return _names(retriever.search(query, k=10, mode="lexical"))

        joined, bare = found("coolant AND (pump OR vibration)"), found("coolant pump vibration")
        sentence = found("the coolant pump and its vibration")
    assert joined == bare == ["spread.txt", "single.txt"]
    assert {f"other{i}.txt" for i in range(3)} <= set(sentence)


def test_lexical_mode_ranks_the_spread_document_first(corpus: tuple[str, Path]) -> None:
    db, _ = corpus
    retriever = Retriever("lex", db=db)
    hits = retriever.search(QUERY, k=5, mode="lexical")
    assert _names(hits)[:2] == ["spread.txt", "single.txt"]
    # Scored as its best chunk, the single strong paragraph wins: the case the rule fixes.
    by_chunk = retriever.search(QUERY, k=5, mode="lexical", where="ordinal >= 0")
    assert _names(by_chunk)[:2] == ["single.txt", "spread.txt"]
    assert set(by_chunk[0].scores) == {"lexical", "fused"}  # no document leg under a chunk where

    # minmax(0.7 whole-document BM25 + 0.3 sum of each document's 5 best chunk BM25 scores)
    whole = {d.doc_id: d.raw_score for d in retriever.store.search_documents_text(QUERY, 500, None)}
    sum5 = {doc: sum(sorted(s, reverse=True)[:5]) for doc, s in _chunk_bm25(retriever).items()}
    assert set(whole) == set(sum5) == {h.doc_id for h in hits}  # only two documents match
    doc_part, chunk_part = _minmax(whole), _minmax(sum5)
    for rank, hit in enumerate(hits, start=1):
        expected = 0.7 * doc_part[hit.doc_id] + 0.3 * chunk_part[hit.doc_id]
        assert hit.score == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert hit.scores["doc_lexical"]["score"] == pytest.approx(whole[hit.doc_id], rel=1e-6)
        assert hit.scores["lexical"]["score"] == pytest.approx(sum5[hit.doc_id], rel=1e-6)
        assert hit.scores["fused"] == {"rank": rank, "score": hit.score}
    assert hits[0].score == pytest.approx(1.0)  # first in both legs


def test_without_a_document_table_documents_rank_by_their_best_chunk(
    corpus: tuple[str, Path], tmp_path: Path
) -> None:
    db, _ = corpus
    shutil.copytree(db, tmp_path / "db")
    shutil.rmtree(tmp_path / "db" / "lex__docs.lance")  # as a collection built before it existed
    retriever = Retriever("lex", db=str(tmp_path / "db"))
    assert not retriever.store.has_documents
    hits = retriever.search(QUERY, k=5, mode="lexical")
    assert _names(hits)[:2] == ["single.txt", "spread.txt"]
    assert set(hits[0].scores) == {"lexical", "fused"}
    assert len(hits[1].passages) == 3  # passages still come from the chunk pool


def _cosines(retriever: Retriever, text: str = QUERY) -> tuple[dict[str, float], dict[str, float]]:
    """Per document: cosine(query, normalised mean of its chunk vectors) and its best chunk's
    cosine, from the stored chunks."""
    rows = retriever.store.rows("ordinal >= 0", ["doc_id", "vector"])
    by_doc: dict[str, list[np.ndarray]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(np.asarray(row["vector"], dtype=np.float64))
    query = HashingEncoder(max_tokens=40).encode_queries([text])[0].astype(np.float64)
    query /= np.linalg.norm(query)
    mean_cos, best_cos = {}, {}
    for doc, vectors in by_doc.items():
        mean = np.sum(vectors, axis=0)
        mean_cos[doc] = float(query @ (mean / np.linalg.norm(mean)))
        best_cos[doc] = max(float(query @ (v / np.linalg.norm(v))) for v in vectors)
    return mean_cos, best_cos


@pytest.mark.parametrize(
    ("query", "weights", "power"),
    [
        # Whole-document BM25 (which keeps stop words) matches all five documents.
        (f"the {QUERY}", (0.2, 0.4, 0.2, 0.2), SHORT_RULE_CONFIDENCE),
        # Rare words: two of the five documents hold them (fusion.RareTerms); bare words, so
        # weighed by their confidence more strongly (fusion.BARE_WORDS_RULE)
        (QUERY, (0.3, 0.3, 0.2, 0.2), BARE_WORDS_CONFIDENCE),
    ],
)
def test_hybrid_fuses_a_short_query_by_its_rule(
    corpus: tuple[str, Path], query: str, weights: tuple[float, ...], power: float
) -> None:
    db, _ = corpus
    retriever = Retriever("hyb", db=db)
    hits = retriever.search(query, k=5)
    # A short query: zscore(whole-doc BM25, chunk BM25 lse@0.1, doc-mean cosine, best chunk
    # cosine), 0.2 : 0.4 : 0.2 : 0.2, the lexical legs 0.3 : 0.3 for rare words, each weight
    # scaled by its leg's confidence
    whole = {d.doc_id: d.raw_score for d in retriever.store.search_documents_text(query, 500, None)}
    assert (len(whole) < 5 / 2) is (weights[0] == 0.3)
    lse = _lse(_chunk_bm25(retriever, query))
    mean_cos, best_cos = _cosines(retriever, query)
    keys = set(whole) | set(lse) | set(mean_cos)
    assert len(keys) == 5 and {h.doc_id for h in hits} == keys
    z = [_zscores(leg, keys) for leg in (whole, lse, mean_cos, best_cos)]
    # each weight then times its leg's confidence for the query to the form's power
    confident = _confident(weights, z, power)
    expected = {key: sum(w * leg[key] for w, leg in zip(confident, z, strict=True)) for key in keys}
    # Best first, ties (the three identical other documents) by doc_id.
    assert [h.doc_id for h in hits] == sorted(keys, key=lambda key: (-expected[key], key))
    for rank, hit in enumerate(hits, start=1):
        key = hit.doc_id
        assert hit.score == pytest.approx(expected[key], rel=1e-5, abs=1e-6)
        assert hit.scores["fused"]["rank"] == rank
        assert hit.scores["doc_dense"]["score"] == pytest.approx(mean_cos[key], abs=1e-5)
        assert hit.scores["dense"]["score"] == pytest.approx(best_cos[key], abs=1e-5)
        if key in lse:
            assert hit.scores["lexical"]["score"] == pytest.approx(lse[key], rel=1e-6)
            assert hit.scores["doc_lexical"]["score"] == pytest.approx(whole[key], rel=1e-6)


class CountingEncoder(HashingEncoder):
    """The hashing encoder, counting the queries it encodes."""

    calls = 0

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        CountingEncoder.calls += len(texts)
        return super().encode_queries(texts)


# A summary of spread.txt, as summary2meeting's queries summarise a meeting.
SUMMARY = (
    "the log records coolant pump vibration in shift after shift: in every shift of the week "
    "the coolant pump showed vibration again and the crew wrote it down"
)


def test_a_long_hybrid_query_is_ranked_by_the_lexical_rule(corpus: tuple[str, Path]) -> None:
    """From LONG_QUERY_WORDS words on, hybrid ranks as the lexical rule does (the document the
    query summarises first), and the query is not encoded; one word fewer and the dense legs are back."""
    db, _ = corpus
    words = SUMMARY.split()[:LONG_QUERY_WORDS]
    assert len(words) == LONG_QUERY_WORDS
    long_query, short_query = " ".join(words), " ".join(words[:-1])
    retriever = Retriever("hyb", db=db)
    retriever._encoder = CountingEncoder(max_tokens=40)
    CountingEncoder.calls = 0
    hybrid = retriever.search(long_query, k=5)
    lexical = retriever.search(long_query, k=5, mode="lexical")
    assert CountingEncoder.calls == 0
    assert [(h.doc_id, h.score) for h in hybrid] == [(h.doc_id, h.score) for h in lexical]
    assert _names(hybrid)[0] == "spread.txt"
    assert {"doc_lexical", "lexical", "fused"} == set(hybrid[0].scores)
    short = retriever.search(short_query, k=5)
    assert CountingEncoder.calls == 1
    assert {"doc_lexical", "lexical", "doc_dense", "dense"} <= set(short[0].scores)


def test_a_document_shows_its_best_passages(corpus: tuple[str, Path]) -> None:
    db, _ = corpus
    hits = Retriever("lex", db=db).search(QUERY, k=5, mode="lexical")
    spread, single = hits[0], hits[1]
    assert len(spread.passages) == 3  # many matching chunks: the best three
    assert all("**coolant**" in p.snippet.marked().lower() for p in spread.passages)
    scores = [p.score for p in spread.passages]
    assert scores == sorted(scores, reverse=True)
    assert single.passages[0].text.startswith("Coolant pump vibration")  # its one strong chunk
    assert len(single.passages) == 1  # no other chunk of it matches
    first = spread.passages[0]
    assert (spread.chunk_id, spread.snippet, spread.pages) == (first.chunk_id, first.snippet, "1")
    shown = spread.as_dict()
    assert [p["chunk_id"] for p in shown["passages"]] == [p.chunk_id for p in spread.passages]
    assert shown["passages"][0]["snippet"] == first.snippet.marked()
    assert {"pages", "score", "snippet_span"} <= shown["passages"][1].keys()
    assert "text" not in shown["passages"][1]  # the document's text is the hit's, not repeated
    # Passage search returns chunks, each its own evidence: the hit holds that one passage
    # (its JSON lists none beyond the hit's own fields).
    passages = Retriever("lex", db=db).search(QUERY, k=3, mode="lexical", granularity="passage")
    assert passages[0].doc_id == single.doc_id and passages[0].granularity == "passage"
    assert passages[0].passages == (passages[0].best,) and passages[0].as_dict()["passages"] == []
    assert passages[0].score == passages[0].best.score  # a passage hit scores as its passage


def test_a_document_hit_holds_its_passages_and_reads_the_first_for_old_code(
    corpus: tuple[str, Path],
) -> None:
    """A hit is not a passage: it holds them (best first) and its own score; the fields a hit
    had when it was its first passage read that passage."""
    from docsearch.hits import Hit, Passage

    db, _ = corpus
    hit = Retriever("lex", db=db).search(QUERY, k=1, mode="lexical")[0]
    assert not isinstance(hit, Passage) and isinstance(hit, Hit)
    best = hit.best
    assert hit.passages[0] is best and hit.score != best.score  # fused, not the chunk's
    old = ("text", "chunk_id", "snippet", "pages", "page", "cite", "provenance", "char_start")
    assert all(getattr(hit, name) == getattr(best, name) for name in old)
    assert (hit.path, hit.title, hit.doc_id) == (best.path, best.title, best.doc_id)
    with pytest.raises(AttributeError, match="no attribute 'passage_count'"):
        hit.passage_count  # noqa: B018 - only a passage's own fields are read through
    shown = hit.as_dict()
    assert shown["score"] == hit.score and shown["scores"] == hit.scores
    assert shown["chunk_id"] == best.chunk_id and len(shown["passages"]) == len(hit.passages)
    # The UI keeps hits in its state (copied) and a server may pickle them: the read-through
    # must not get in the way.
    for again in (copy.deepcopy(hit), pickle.loads(pickle.dumps(hit))):
        assert again == hit and again.snippet == best.snippet


def test_a_document_search_reads_the_text_of_the_chunks_it_shows(
    corpus: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The legs read no text; the passages shown get theirs in one read afterwards."""
    from docsearch.store.reads import Store

    db, _ = corpus
    asked: list[int] = []
    real = Store.with_text

    def counted(self: Store, found: list) -> list:  # type: ignore[type-arg]
        asked.append(len(found))
        return real(self, found)

    monkeypatch.setattr(Store, "with_text", counted)
    hits = Retriever("hyb", db=db, encoder=HashingEncoder()).search(QUERY, k=2)
    assert asked and sum(asked) <= 2 * 3  # k documents, at most three passages each
    from docsearch.indexer.filters import ChunkFilter

    stored = {
        row["id"]: row["text"] for row in Store.open(db, "hyb").rows(ChunkFilter(), ["id", "text"])
    }
    shown = [p for h in hits for p in h.passages]
    assert shown and all(p.text == stored[p.chunk_id] for p in shown)
    assert all(p.snippet.text.strip("… ") in " ".join(p.text.split()) for p in shown)


def test_a_document_indexed_again_during_a_search_shows_the_version_it_ranked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file indexed again after the legs read its chunks and before their text is read: the
    search reads one version of each table (`Store.tables.reading`), so the hit shows the passages it
    was ranked by, never an empty one; the next search shows what the file holds now."""
    from docsearch.store.reads import Store

    _write_corpus(tmp_path / "docs")
    db = str(tmp_path / "db")
    index_into(db, tmp_path / "docs", "lex", encoder="none", max_tokens=40)
    spread = tmp_path / "docs" / "spread.txt"
    real = Store.with_text

    def reindex_first(self: Store, found: list) -> list:  # type: ignore[type-arg]
        if spread.read_text().startswith("In shift"):
            lines = [f"Rewritten {i}: the coolant pump vibration was fixed." for i in range(8)]
            spread.write_text("\n\n".join(lines) + "\n")
            assert index_into(db, tmp_path / "docs", "lex", encoder="none", max_tokens=40).changed
        return real(self, found)

    monkeypatch.setattr(Store, "with_text", reindex_first)
    retriever = Retriever("lex", db=db)
    shown = next(
        h for h in retriever.search(QUERY, k=5, mode="lexical") if h.path.endswith("spread.txt")
    )
    assert shown.passages and all(p.text.startswith("In shift") for p in shown.passages)
    again = next(
        h for h in retriever.search(QUERY, k=5, mode="lexical") if h.path.endswith("spread.txt")
    )
    assert again.passages and all(p.text.startswith("Rewritten") for p in again.passages)


def test_a_lone_hit_shows_a_readable_score(tmp_path: Path) -> None:
    """A collection of one document: each leg has one candidate, whose z-score (hybrid) and
    min-max (lexical) were 0, so the only hit printed `score 0.0000`. A leg that cannot tell its
    candidates apart gives each its full weight: the hit scores the sum of the weights, 1."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "only.txt").write_text("The coolant pump vibration alarm rang twice last night.\n")
    db = str(tmp_path / "db")
    for name, encoder in (("lex", "none"), ("hyb", "hashing")):
        assert not index_into(db, docs, name, encoder=encoder, max_tokens=40).failed
    for name, mode in (("lex", "lexical"), ("hyb", "hybrid"), ("hyb", "lexical")):
        hits = Retriever(name, db=db).search(QUERY, k=5, mode=mode)
        assert len(hits) == 1
        assert hits[0].score == pytest.approx(1.0), (name, mode)
        assert hits[0].scores["fused"]["score"] == pytest.approx(1.0)


def test_a_short_list_of_key_terms_is_ranked_by_the_lexical_legs_alone(
    corpus: tuple[str, Path],
) -> None:
    """A short hybrid query written as a list of terms ranks by zscore(whole-document BM25,
    chunk BM25 lse@0.1), 1 : 1 scaled by each leg's confidence (TERM_LIST_RULE), without
    encoding the query; the same words as a sentence keep the dense legs."""
    db, _ = corpus
    retriever = Retriever("hyb", db=db)
    retriever._encoder = CountingEncoder(max_tokens=40)
    CountingEncoder.calls = 0
    terms = "coolant pump; vibration; shift"
    hits = retriever.search(terms, k=5)
    assert CountingEncoder.calls == 0
    assert {"doc_lexical", "lexical", "fused"} == set(hits[0].scores)
    whole = {d.doc_id: d.raw_score for d in retriever.store.search_documents_text(terms, 500, None)}
    lse = _lse(_chunk_bm25(retriever, terms))
    keys = set(whole) | set(lse)
    z_whole, z_lse = _zscores(whole, keys), _zscores(lse, keys)
    w_whole, w_lse = _confident((0.5, 0.5), [z_whole, z_lse], TERM_LIST_CONFIDENCE)
    expected = {key: w_whole * z_whole[key] + w_lse * z_lse[key] for key in keys}
    assert [h.doc_id for h in hits] == sorted(keys, key=lambda key: (-expected[key], key))[:5]
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.doc_id], rel=1e-5, abs=1e-6)
    sentence = retriever.search("the coolant pump vibration in a shift", k=5)
    assert CountingEncoder.calls == 1
    assert {"doc_dense", "dense"} <= set(sentence[0].scores)


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("capital gains; transfer of capital asset; agricultural land", True),
        ("income, assessee, capital gain, house property", True),
        ("burden of proof\nreasonable doubt\ncircumstantial evidence", True),
        ("capital gains, transfer", False),  # two parts: a phrase with a comma, not yet a list
        ("What did the committee decide about the budget, the staff and the timetable?", False),
        (
            "Consider the License Agreement between Fox Mobile Entertainment, Inc. and Glu; "
            "What is the expiration date of this contract?",
            False,
        ),
    ],
)
def test_which_queries_are_lists_of_terms(query: str, terms: bool) -> None:
    assert is_term_list(query) is terms
    rule = document_rule("hybrid", query)
    assert (rule is TERM_LIST_RULE) is (terms and len(query.split()) < LONG_QUERY_WORDS)


@pytest.mark.parametrize(
    ("query", "keywords"),
    [
        ("capital gains agricultural land income tax exemption", True),  # terms, no commas
        ('"reasonable doubt" circumstantial evidence murder conviction appeal', True),
        ("Tirasemtiv targets cardiac muscle fibres directly", True),  # six words: the floor
        ("Improved Statistical Alignment Models", False),  # a title: a search box's length
        ("capital gains agricultural land exemption", False),  # five words: under the floor
        ("burden of proof reasonable doubt circumstantial evidence", True),  # "of" inside a term
        ("administration of justice criminal contempt appeal", True),
        ("burden of proof res judicata", False),  # a joiner, but five words: under the floor
        ("right to die right to live suicide", False),  # "to" is no joiner (claims hold it)
        ("of burden proof res judicata estoppel", False),  # "of" at the edge joins nothing
        ("law of the land public order maintenance", False),  # "of the": two stop words
        ("burden of proof of guilt of accused persons", False),  # three joiners in 8 words
        ("Deletion of Crb1 causes retinal degeneration in mice", False),  # "in": a sentence
        ("What did the committee decide about the budget", False),
    ],
)
def test_which_queries_are_key_terms_without_separators(query: str, keywords: bool) -> None:
    """Six or more words, none a stop word but an "of" inside a term, are key terms typed
    without commas: the short hybrid query takes TERM_LIST_RULE as a comma list does; titles
    and sentences do not."""
    assert is_keyword_query(query) is keywords
    assert not is_term_list(query)
    assert (document_rule("hybrid", query) is TERM_LIST_RULE) is keywords
    assert document_rule("lexical", query) is not TERM_LIST_RULE


def test_key_terms_without_commas_are_not_encoded(corpus: tuple[str, Path]) -> None:
    """A hybrid search for space-separated key terms runs the lexical legs alone, as the same
    terms with commas do, and gives the same ranking."""
    db, _ = corpus
    retriever = Retriever("hyb", db=db)
    retriever._encoder = CountingEncoder(max_tokens=40)
    CountingEncoder.calls = 0
    spaced = retriever.search("coolant pump vibration night shift bearing", k=5)
    assert CountingEncoder.calls == 0
    assert {"doc_lexical", "lexical", "fused"} == set(spaced[0].scores)
    listed = retriever.search("coolant pump, vibration, night shift, bearing", k=5)
    assert [h.doc_id for h in spaced] == [h.doc_id for h in listed]
    assert [h.score for h in spaced] == pytest.approx([h.score for h in listed], rel=1e-6)


def test_key_terms_with_a_joiner_are_not_encoded(corpus: tuple[str, Path]) -> None:
    """Key terms holding "of" inside a term run the lexical legs alone too; the same words
    with a second stop word ("the") are a phrase of prose and take the four legs."""
    db, _ = corpus
    retriever = Retriever("hyb", db=db)
    retriever._encoder = CountingEncoder(max_tokens=40)
    CountingEncoder.calls = 0
    joined = retriever.search("vibration of coolant pump night shift bearing", k=5)
    assert CountingEncoder.calls == 0
    assert {"doc_lexical", "lexical", "fused"} == set(joined[0].scores)
    prose = retriever.search("vibration of the coolant pump night shift bearing", k=5)
    assert CountingEncoder.calls == 1
    assert {"doc_dense", "dense"} <= set(prose[0].scores)


def test_a_key_term_list_ranks_the_judgment_that_holds_its_terms_throughout(
    tmp_path: Path,
) -> None:
    """Catchphrases name a judgment's topics, spread through it: the document that holds every
    term across its paragraphs ranks above one whose single paragraph holds three of them. The
    key-term rule z-scores whole-document BM25 and chunk BM25 (lse@0.1) and weighs them alike,
    each then by its confidence; with chunk BM25 leading 2 : 1 the dense paragraph won."""
    root = tmp_path / "docs"
    root.mkdir()
    terms = ["coolant pump", "vibration", "night shift", "bearing"]
    spread = [f"The {terms[i % 4]} again. {FILLER[i]}." for i in range(8)]
    dense = "Coolant pump vibration on the night shift."  # its best paragraph by far
    (root / "spread.txt").write_text("\n\n".join(spread) + "\n")
    (root / "single.txt").write_text("\n\n".join([dense, *(f"{f}." for f in FILLER[:7])]) + "\n")
    (root / "weak.txt").write_text("\n\n".join([*(f"{f}." for f in FILLER), "A bearing."]) + "\n")
    db = str(tmp_path / "db")
    assert not index_into(db, root, "terms", encoder="hashing", max_tokens=40).failed
    retriever = Retriever("terms", db=db)
    query = ", ".join(terms)
    hits = retriever.search(query, k=3)
    assert _names(hits) == ["spread.txt", "single.txt", "weak.txt"]
    assert set(hits[0].scores) == {"doc_lexical", "lexical", "fused"}  # no dense leg
    whole = {d.doc_id: d.raw_score for d in retriever.store.search_documents_text(query, 500, None)}
    chunks = _lse(_chunk_bm25(retriever, query))
    assert max(chunks, key=chunks.__getitem__) == hits[1].doc_id  # best by its one paragraph
    keys = set(whole) | set(chunks)
    doc_z, chunk_z = _zscores(whole, keys), _zscores(chunks, keys)
    doc_w, chunk_w = _confident((0.5, 0.5), [doc_z, chunk_z], TERM_LIST_CONFIDENCE)
    for hit in hits:
        expected = doc_w * doc_z[hit.doc_id] + chunk_w * chunk_z[hit.doc_id]
        assert hit.score == pytest.approx(expected, rel=1e-6, abs=1e-9)
