"""The docs table: one row per file, made from its chunks, searched whole (BM25 over the full
text, cosine over the mean chunk vector), on the real store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docsearch.errors import UsageError
from docsearch.indexer.chunk import Chunker, ChunkerSettings
from docsearch.indexer.collection import word_count, word_spans
from docsearch.indexer.extract import build_document
from docsearch.indexer.filters import ChunkFilter
from docsearch.indexer.pipeline import chunk_rows
from docsearch.store.documents import document_rows
from docsearch.store.reads import Store
from docsearch.store.writes import Writer
from tests.helpers import documents, index_into

FILLER = "The parties met on Tuesday and read the minutes of the previous session aloud."


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """'spread.md' names four rare words, one per section; 'dense.md' two of them in one
    sentence. Sections are cut into chunks of their own (12-word cap)."""
    root = tmp_path_factory.mktemp("documents") / "docs"
    root.mkdir()
    words = ["walrus", "saxophone", "glacier", "lighthouse"]
    sections = [f"## Part {i}\n\n{FILLER} A {word} was noted." for i, word in enumerate(words)]
    (root / "spread.md").write_text("# Minutes\n\n" + "\n\n".join(sections) + "\n")
    (root / "dense.md").write_text("# Note\n\nThe walrus saxophone.\n")
    (root / "other.txt").write_text(f"{FILLER}\n\nNothing rare here at all.\n")
    db = str(root.parent / "db")
    index_into(db, root, options={"max_tokens": 12})
    return db, root


def test_whole_document_bm25_finds_a_document_whose_terms_are_spread_over_chunks(
    collection: tuple[str, Path],
) -> None:
    db, _ = collection
    store = Store.open(db, "c")
    query = "walrus saxophone glacier lighthouse"
    spread = store.rows("path LIKE '%spread.md'", ["text"])
    assert len(spread) > 4 and not any(
        sum(w in r["text"] for w in query.split()) > 1 for r in spread
    )
    assert Path(store.search_text(query, 1, None)[0].path).name == "dense.md"  # best chunk
    found = store.search_documents_text(query, 3, None)
    assert [Path(d.path).name for d in found] == ["spread.md", "dense.md"]
    best = found[0]
    assert best.score == best.raw_score > found[1].score
    assert (best.n_chunks, best.page_start, best.page_end) == (len(spread), 1, 1)
    assert (
        Writer(store).docs.index_stats("text_idx").num_unindexed_rows == 0
    )  # the run's end indexed all


def test_documents_match_words_as_written_where_chunks_are_stemmed(
    collection: tuple[str, Path],
) -> None:
    store = Store.open(collection[0], "c")
    assert store.search_text("walruses", 5, None)  # the chunk index stems
    assert store.search_documents_text("walruses", 5, None) == []
    assert store.search_documents_text("the", 5, None)  # and keeps stop words


def test_path_filters_apply_to_documents_and_chunk_columns_leave_them_empty(
    collection: tuple[str, Path],
) -> None:
    store = Store.open(collection[0], "c")
    only_dense = store.search_documents_text("walrus", 5, ChunkFilter(path="*dense.md"))
    assert [Path(d.path).name for d in only_dense] == ["dense.md"]
    spread = [p for p in documents(collection[0]) if p.endswith("spread.md")]
    listed = store.search_documents_text("walrus", 5, ChunkFilter(paths=spread))
    assert [d.path for d in listed] == spread
    assert store.search_documents_text("walrus", 5, ChunkFilter(paths=[])) == []
    assert store.search_documents_text("walrus", 5, ChunkFilter(where="page_start >= 1")) == []
    vector = np.ones(64, dtype=np.float32)
    assert store.search_documents_vector(vector, 5, ChunkFilter(where="ordinal > 0")) == []


def test_a_documents_vector_is_the_normalised_mean_of_its_chunk_vectors(
    collection: tuple[str, Path],
) -> None:
    db, _ = collection
    store = Store.open(db, "c")
    for path, row in documents(db).items():
        chunks = np.asarray([r["vector"] for r in store.rows(f"path = '{path}'", ["vector"])])
        mean = chunks.mean(axis=0)
        # float32 inputs and output: agreement to float32 rounding of a unit vector
        assert np.allclose(row["vector"], mean / np.linalg.norm(mean), atol=1e-6)
        nearest = store.search_documents_vector(np.asarray(row["vector"]), 1, None)[0]
        assert nearest.path == path and nearest.score == pytest.approx(1.0, abs=1e-5)


def test_whole_text_puts_every_character_at_its_offset_even_with_overlapping_chunks() -> None:
    pages = [
        "# Title\n\n  First page, first sentence. Second sentence here.\n\n\n",
        "Page two starts.\tTabbed words follow. The last sentence ends it.  ",
    ]
    doc = build_document("x.pdf", "Title", pages)
    chunker = Chunker(ChunkerSettings(max_tokens=8, overlap_tokens=4), word_count, word_spans)
    chunks = chunker.chunk(doc)
    assert any(b.char_start < a.char_end for a, b in zip(chunks, chunks[1:], strict=False))
    [row] = document_rows(chunk_rows(doc, chunks, "sha"))
    text = row["text"]
    assert len(text) == len(doc.text.rstrip())
    assert all(a == b or (a == " " and b.isspace()) for a, b in zip(text, doc.text, strict=False))
    assert (row["page_start"], row["page_end"], row["n_chunks"]) == (1, 2, len(chunks))


def _one_lexical_file(tmp_path: Path) -> tuple[str, Path]:
    """A lexical-only collection 'c' of one Markdown file: (database, the file)."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nThe indemnification clause survives termination.\n")
    db = str(tmp_path / "db")
    index_into(db, root, encoder="none", options={})
    return db, root / "a.md"


def test_a_lexical_only_collection_has_documents_without_vectors(tmp_path: Path) -> None:
    db, _ = _one_lexical_file(tmp_path)
    store = Store.open(db, "c")
    assert store.has_documents and "vector" not in next(iter(documents(db).values()))
    assert len(store.search_documents_text("indemnification", 5, None)) == 1
    with pytest.raises(UsageError, match="lexical only"):
        store.search_documents_vector(np.ones(8, dtype=np.float32), 5, None)


def test_vector_search_deeper_than_the_ann_beam_answers_on_an_indexed_table(
    tmp_path: Path,
) -> None:
    """Document search asks the vector legs for 500 rows; past VECTOR_INDEX_MIN_ROWS the tables
    have an HNSW index, which refuses k above its beam (ef) unless the query widens it."""
    from docsearch.search_plan import CHUNK_POOL, DOC_POOL
    from docsearch.store.indexes import IndexBuild
    from docsearch.store.reads import ANN_SEARCH

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(40):
        (root / f"d{i}.md").write_text(f"# Doc {i}\n\n{FILLER} Item {i}.\n\n{FILLER}\n")
    db = str(tmp_path / "db")
    index_into(db, root, options={"max_tokens": 12})
    store = Store.open(db, "c")
    writer = Writer(store)
    writer.refresh_indexes(IndexBuild(vector_min_rows=1))
    assert {"vector_idx"} <= {i.name for i in writer.chunks.list_indices()}
    assert min(CHUNK_POOL, DOC_POOL) > ANN_SEARCH["ef"]  # the case that failed
    query = np.asarray(next(iter(documents(db).values()))["vector"], dtype=np.float32)
    chunks = store.search_vector(query, CHUNK_POOL, None)
    assert len(chunks) == store.count_chunks()  # fewer rows than k: every one of them
    assert len(store.search_documents_vector(query, DOC_POOL, None)) == 40


def test_a_rebuilt_docs_table_is_indexed_and_searched_through_the_same_store(
    tmp_path: Path,
) -> None:
    """A Store that already read its docs table keeps working after the table is rebuilt."""
    from docsearch.store.database import Database

    db, file = _one_lexical_file(tmp_path)
    store = Store.open(db, "c")
    writer = Writer(store)
    assert writer.docs.count_rows() == 1  # the old table's handle is now held
    Database(db).drop_tables("c", ["docs"])
    writer.ensure_documents()
    fresh = Store.open(db, "c")
    assert fresh.has_documents
    assert [d.path for d in store.search_documents_text("indemnification", 5, None)] == [str(file)]


def test_a_quoted_query_searches_documents_by_its_words(collection: tuple[str, Path]) -> None:
    """The documents' index keeps no word positions, so quotes cannot ask it for a phrase."""
    db, root = collection
    store = Store.open(db, "c")
    quoted = {d.path for d in store.search_documents_text('"walrus saxophone"', 5, None)}
    assert quoted == {str(root / "dense.md"), str(root / "spread.md")}
    assert store.search_documents_text('""', 5, None) == []
