"""Unfiltered nearest searches on a table without a vector index are answered from the vectors in
memory: the same chunks and documents, with the same similarities, as Lance's own exact search,
and a write makes the next search read the table again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docsearch.indexer.filters import ChunkFilter
from docsearch.store.exact import ExactVectors
from docsearch.store.reads import HeldVectors, Store
from tests.fakes import HashingEncoder
from tests.helpers import index_into

TOPICS = ["coolant pump", "rent review", "data breach", "ferry timetable", "choir rehearsal"]
# Lets every chunk through, but is SQL: the search goes to Lance, the reference here.
EVERY_CHUNK = ChunkFilter(where="ordinal >= 0")


def _write(root: Path, count: int) -> None:
    root.mkdir(exist_ok=True)
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"Note {i}.{j}: the {topic} was discussed again, item {i * 7 + j}." for j in range(4)
        ]
        (root / f"doc{i}.txt").write_text("\n\n".join(paragraphs) + "\n")


@pytest.fixture
def store(tmp_path: Path) -> tuple[Store, Path, str]:
    _write(tmp_path / "docs", 12)
    db = str(tmp_path / "db")
    assert not index_into(db, tmp_path / "docs", options={"max_tokens": 16}).failed
    return Store.open(db, "c"), tmp_path / "docs", db


@pytest.fixture
def mapped(monkeypatch: pytest.MonkeyPatch) -> list[list[int] | None]:
    """What each `ExactVectors.at_row_ids` call answered: a search served from the held rows
    calls it once (None: a row was not held)."""
    answers: list[list[int] | None] = []
    at_row_ids = ExactVectors.at_row_ids
    monkeypatch.setattr(
        ExactVectors,
        "at_row_ids",
        lambda self, ids: answers.append(at_row_ids(self, ids)) or answers[-1],
    )
    return answers


def _query() -> np.ndarray:
    return HashingEncoder().encode_queries(["coolant pump discussed"])[0]


def test_chunks_in_memory_match_lances_exact_search(store: tuple[Store, Path, str]) -> None:
    chunks, _, _ = store
    ours = chunks.search_vector(_query(), 15, None)
    lance = chunks.search_vector(_query(), 15, EVERY_CHUNK)
    assert chunks._exact["chunks"].seen[1] is not None  # type: ignore[index]  # the unfiltered search was answered in memory
    assert len(ours) == len(lance) == 15
    # float32 dot products of unit vectors: a few ulps apart from Lance's own arithmetic
    assert [o.score for o in ours] == pytest.approx([x.score for x in lance], abs=1e-5)
    assert {o.chunk_id for o in ours[:10]} <= {x.chunk_id for x in lance}
    by_id = {x.chunk_id: x for x in lance}
    for one in (o for o in ours if o.chunk_id in by_id):  # described the same, text included
        assert replace(one, score=0.0, raw_score=0.0) == replace(
            by_id[one.chunk_id], score=0.0, raw_score=0.0
        )


def test_documents_in_memory_match_lances_exact_search(store: tuple[Store, Path, str]) -> None:
    chunks, _, _ = store
    ours = chunks.search_documents_vector(_query(), 100, None)  # every document
    assert chunks._exact["docs"].seen[1] is not None  # type: ignore[index]
    chunks._exact["docs"] = HeldVectors()
    lance = chunks.search_documents_vector(_query(), 100, ChunkFilter(path="*"))  # in Lance
    assert chunks._exact["docs"].seen is None
    assert len(ours) == 12 and {d.doc_id for d in ours} == {d.doc_id for d in lance}
    # in rank order (near-equal neighbours may swap between float kernels; their scores do not)
    assert [d.score for d in ours] == pytest.approx([d.score for d in lance], abs=1e-5)


def test_held_tables_load_their_full_text_indexes_so_new_words_read_no_postings(
    store: tuple[Store, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holding the chunks and the documents loads their (small) full-text indexes into the
    process's Lance cache: BM25 searches of words not searched before then add nothing to it.
    With the bound at 0 bytes the indexes stay cold and the same kind of search adds its words'
    posting lists; the answers are the same either way."""
    from docsearch.store import reads
    from docsearch.store.tables import _session

    _, _, db = store
    cache = _session().index_cache_size_bytes

    def searched(words: str) -> tuple[list[str], list[str], int]:
        opened = Store.open(db, "c")  # its tables not held yet
        opened.search_vector(_query(), 5, None)
        opened.search_documents_vector(_query(), 5, None)
        before = cache()
        chunks = [c.chunk_id for c in opened.search_text(words, 10, None, text=False)]
        docs = [d.doc_id for d in opened.search_documents_text(words, 10, None)]
        assert chunks and docs
        return chunks, docs, cache() - before

    monkeypatch.setattr(reads, "WARM_TEXT_INDEX_BYTES", 0)
    *cold, grew = searched("ferry timetable")
    assert grew > 0
    monkeypatch.undo()
    *_, grew = searched("choir rehearsal")
    assert grew == 0
    *again, _ = searched("ferry timetable")
    assert again == cold


def test_a_search_begun_before_the_full_text_index_reads_again_where_it_landed(
    store: tuple[Store, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose read began on a collection's first chunks version (empty, its full-text
    index not made yet) and failed there is run again on the latest version, which has the
    index and the rows, within `tables.reading()` too (there it raised: the retry read the
    pinned version again, and a server polled while `--watch` created a collection logged a
    500). test_first_build_search.py has the same outside a reading block."""
    from docsearch.store.reads import text_index_state
    from docsearch.store.tables import OpenedTables

    chunks, _, _ = store
    first = chunks.tables.latest("chunks").checkout_version(1)
    assert text_index_state(first) == (False, True)
    real, pins = OpenedTables.latest, [first]  # the search's first open of the chunks: `first`

    def latest(self: OpenedTables, table: str) -> Any:
        return pins.pop() if table == "chunks" and pins else real(self, table)

    monkeypatch.setattr(OpenedTables, "latest", latest)
    with chunks.tables.reading():
        assert chunks.dataset("chunks") is first
        again = [chunks.search_text("coolant pump", 10, None, text=t) for t in (True, False)]
    fresh = [c.chunk_id for c in chunks.search_text("coolant pump", 10, None)]
    assert len(fresh) == 10
    assert [[c.chunk_id for c in found] for found in again] == [fresh, fresh]


def test_a_write_makes_the_next_search_read_the_vectors_again(
    store: tuple[Store, Path, str],
) -> None:
    chunks, root, db = store
    before = chunks.search_vector(_query(), 1000, None)
    (root / "late.txt").write_text("The coolant pump discussed coolant pump discussed.\n")
    assert index_into(db, root, options={"max_tokens": 16}).new == 1
    after = chunks.search_vector(_query(), 1000, None)
    assert len(after) == len(before) + 1
    assert after[0].path.endswith("late.txt")  # the new chunk is the nearest


def test_exact_vectors_rank_by_cosine_and_keep_zero_vectors_at_zero() -> None:
    import pyarrow as pa

    vectors = [[3.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, -2.0]]
    table = pa.table({"id": ["a", "zero", "b", "c"], "vector": vectors})
    held = ExactVectors.of(table)
    found = held.nearest(np.array([2.0, 0.0]), 3)
    assert [r["id"] for r in found] == ["a", "b", "zero"]
    assert [r["_similarity"] for r in found] == pytest.approx([1.0, 2**-0.5, 0.0], abs=1e-6)
    assert held.nearest(np.array([1.0, 0.0]), 10)[-1]["id"] == "c"  # k above the rows: all
    assert ExactVectors.of(table.slice(0, 0)).nearest(np.array([1.0, 0.0]), 3) == []


def test_exact_similarities_equal_a_numpy_reference() -> None:
    import pyarrow as pa

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 24)).astype(np.float32)
    table = pa.table({"id": [f"c{i}" for i in range(300)], "vector": vectors.tolist()})
    query = rng.standard_normal(24).astype(np.float32)
    found = ExactVectors.of(table).nearest(query, 300)
    units = vectors.astype(np.float64) / np.linalg.norm(vectors, axis=1, keepdims=True)
    reference = units @ (query / np.linalg.norm(query))
    by_id = {r["id"]: r["_similarity"] for r in found}
    # float32 products of unit vectors against float64: a few float32 ulps
    assert [by_id[f"c{i}"] for i in range(300)] == pytest.approx(reference.tolist(), abs=1e-5)
    order = [r["_similarity"] for r in found]
    assert order == sorted(order, reverse=True)


def test_held_texts_are_the_chunks_text_and_not_returned_by_nearest() -> None:
    import pyarrow as pa

    table = pa.table(
        {"id": ["a", "b"], "text": ["alpha text", "beta text"], "vector": [[1.0, 0.0], [0.0, 1.0]]}
    )
    held = ExactVectors.of(table, texts=True)
    assert held.texts == {"a": "alpha text", "b": "beta text"}
    assert "text" not in held.nearest(np.array([1.0, 0.0]), 1)[0]
    assert ExactVectors.of(table).texts is None


def test_passages_read_their_text_from_the_held_chunks_as_from_lance(
    store: tuple[Store, Path, str],
) -> None:
    from docsearch.store.reads import read_texts

    chunks, _, _ = store
    found = chunks.search_vector(_query(), 20, None, text=False)
    assert all(one.text == "" for one in found)
    filled = chunks.with_text(found)
    assert chunks._exact["chunks"].seen[1].texts is not None  # type: ignore[index,union-attr]
    from_lance = read_texts(chunks.dataset("chunks"), found)
    assert [one.text for one in filled] == [from_lance[one.chunk_id] for one in found]
    assert all(one.text for one in filled)


def test_passages_of_a_file_indexed_again_since_are_left_out(
    store: tuple[Store, Path, str],
) -> None:
    chunks, root, db = store
    found = chunks.search_vector(_query(), 1000, None, text=False)
    chunks.with_text(found)  # the texts of this version are held
    (root / "doc0.txt").write_text("Something else entirely, about ferries.\n")
    assert index_into(db, root, options={"max_tokens": 16}).changed == 1
    filled = chunks.with_text(found)
    gone = {one.chunk_id for one in found if one.path.endswith("doc0.txt")}
    assert gone and not gone & {one.chunk_id for one in filled}
    assert len(filled) == len(found) - len(gone)


def test_bm25_pool_from_held_rows_is_lances_own_read(
    store: tuple[Store, Path, str], mapped: list[list[int] | None]
) -> None:
    chunks, _, _ = store
    ours = chunks.search_text("coolant pump item", 30, None, text=False)
    assert len(mapped) == 1 and mapped[0] is not None  # answered from the held rows
    lance = chunks.search_text("coolant pump item", 30, EVERY_CHUNK, text=False)
    assert len(ours) == len(lance) > 5
    assert _by_rank(ours) == _by_rank(lance)  # the same chunks, scores and described fields


def test_bm25_pool_after_a_write_holds_the_new_rows(store: tuple[Store, Path, str]) -> None:
    chunks, root, db = store
    chunks.search_text("coolant", 100, None, text=False)
    (root / "late.txt").write_text("The coolant coolant coolant pump, in a late note.\n")
    assert index_into(db, root, options={"max_tokens": 16}).new == 1
    found = chunks.search_text("coolant", 100, None, text=False)
    assert found[0].path.endswith("late.txt")
    assert _by_rank(found) == _by_rank(chunks.search_text("coolant", 100, EVERY_CHUNK, text=False))


def _by_rank(found: list[Any]) -> list[Any]:
    """Best first, equal BM25 scores (Lance orders ties as its read goes) by chunk id."""
    return sorted(found, key=lambda one: (-one.score, one.chunk_id))


def test_held_rows_share_repeated_strings_and_map_row_ids() -> None:
    import pyarrow as pa

    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "path": ["x/one.txt", "x/one.txt", "x/two.txt"],
            "ordinal": [0, 1, 0],
            "vector": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
            "_rowid": [7, 8, 4294967296],
        }
    )
    held = ExactVectors.of(table)
    assert held.names == ("id", "path", "ordinal")
    assert held.values[0][1] is held.values[1][1]  # one string for the document's chunks
    assert held.at_row_ids([4294967296, 7]) == [2, 0]
    assert held.at_row_ids([7, 9]) is None  # a row not held: read it from Lance
    assert held.row(2) == {"id": "c", "path": "x/two.txt", "ordinal": 0}


def test_one_search_reads_one_version_of_each_table(store: tuple[Store, Path, str]) -> None:
    """Within `tables.reading()` a table is read at the version the block opened first, whatever lands
    meanwhile; the next block (the next search) reads the new version."""
    chunks, root, db = store
    with chunks.tables.reading():
        before = chunks.search_text("ferries", 100, None, text=False)
        (root / "late.txt").write_text("Ferries ferries ferries: the late timetable.\n")
        assert index_into(db, root, options={"max_tokens": 16}).new == 1
        assert chunks.search_text("ferries", 100, None, text=False) == before
        assert chunks.dataset("chunks") is chunks.dataset("chunks")
    after = chunks.search_text("ferries", 100, None, text=False)
    assert after[0].path.endswith("late.txt") and len(after) == len(before) + 1


@pytest.mark.parametrize("at_once", [True, False])
def test_candidates_from_held_rows_are_independent_of_each_other_and_of_the_cache(
    store: tuple[Store, Path, str], monkeypatch: pytest.MonkeyPatch, at_once: bool
) -> None:
    """A held row's fields are made once (all when the table is read, for a small table; else
    when a search first meets the row) and copied into each candidate: two searches meeting the
    same chunks keep their own scores, and a candidate is the one a Lance row would make."""
    from docsearch.store import exact

    if not at_once:
        monkeypatch.setattr(exact, "FIELDS_AT_ONCE_ROWS", 0)
    chunks, _, _ = store
    first = chunks.search_text("coolant pump item", 30, None, text=False)
    held = chunks._exact["chunks"].seen[1]  # type: ignore[index]
    assert held is not None
    if at_once:  # every row's, the rows no search met too
        assert len(held.fields) == len(held.values) > len(first)
    else:  # the rows met only
        assert len(held.fields) == len(first)
    second = chunks.search_text("coolant", 30, None, text=False)
    shared = {one.chunk_id for one in first} & {one.chunk_id for one in second}
    assert shared
    before = {one.chunk_id: one.score for one in first}
    assert {one.chunk_id: one.score for one in second if one.chunk_id in shared} != {
        key: before[key] for key in shared
    }  # other words, other BM25 scores
    assert {one.chunk_id: one.score for one in first} == before  # the first search's kept
    for one in first:
        assert one.__dict__ is not held.fields[held.row_ids[_row_id(chunks, one)]]  # type: ignore[index]
    by_lance = {
        one.chunk_id: one for one in chunks.search_text("coolant", 30, EVERY_CHUNK, text=False)
    }
    for one in second:
        assert one == by_lance[one.chunk_id]  # every field and both scores


def _row_id(chunks: Store, one: Any) -> int:
    """Lance's row id of the chunk `one`."""
    table = chunks.dataset("chunks").to_table(
        columns=["id"], filter=f"id = '{one.chunk_id}'", with_row_id=True
    )
    return int(table.column("_rowid")[0].as_py())


def test_whole_document_bm25_from_held_rows_is_lances_own_read(
    store: tuple[Store, Path, str], mapped: list[list[int] | None]
) -> None:
    """Whole-document BM25 reads only Lance's row ids and scores where the documents are held:
    the same documents, scores and fields as a read of every column (a path filter: Lance's)."""
    chunks, root, _ = store
    ours = chunks.search_documents_text("coolant pump item", 20, None)
    assert len(mapped) == 1 and mapped[0] is not None  # answered from the held rows
    every_file = ChunkFilter(paths=sorted(str(p) for p in root.iterdir()))
    lance = chunks.search_documents_text("coolant pump item", 20, every_file)
    assert len(mapped) == 1  # the filtered search read Lance
    assert len(ours) == len(lance) > 5
    by_rank = sorted(ours, key=lambda d: (-d.score, d.doc_id))
    assert by_rank == sorted(lance, key=lambda d: (-d.score, d.doc_id))
