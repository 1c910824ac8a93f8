"""Search answers while a collection's first build is still running (between group commits)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from docsearch.config import Settings
from docsearch.indexer.collection import Prepared, prepare
from docsearch.indexer.extract import build_document
from docsearch.indexer.pipeline import NEW, FileOutcome, Indexer, Job
from docsearch.retriever import Retriever
from docsearch.store.database import Database
from docsearch.store.indexes import index_health
from docsearch.store.schema import FileRecord

TEXTS = {
    "a.md": "The walrus clause covers delivery of frozen goods to the harbour.",
    "b.md": "A narwhal warranty applies to every tusk shipped after the first year.",
    "c.md": "Penalties for late walrus deliveries are capped at ten percent.",
}


def prepared(db: str) -> Prepared:
    settings = Settings(db=db)
    return prepare(
        Database(db), "c", encoder_name="hashing", options={"max_tokens": 12}, settings=settings
    )


def add(indexer: Indexer, name: str) -> None:
    text = TEXTS[name]
    sha = hashlib.sha256(text.encode()).hexdigest()
    record = FileRecord(f"/docs/{name}", sha, len(text), 1.0, "indexed")
    indexer.write(FileOutcome(record, NEW, build_document(f"/docs/{name}", name, [text])))


def found(retriever: Retriever, query: str, mode: str) -> list[str]:
    return [Path(hit.path).name for hit in retriever.search(query, k=5, mode=mode)]


def build(db: str, during: list[tuple[str, str]] | None = None) -> Retriever:
    """Index TEXTS one commit per file; search `during` (query, mode) after each commit."""
    p = prepared(db)
    indexer = Indexer(Job(p.writer, p.encoder, p.chunker, group_chunks=1))  # every add commits
    retriever = Retriever("c", db=db, encoder=p.encoder)
    for name in TEXTS:
        add(indexer, name)
        for query, mode in during or []:
            assert name in found(retriever, query, mode)
    indexer.flush()
    p.writer.refresh_indexes()
    return retriever


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_search_finds_each_group_as_soon_as_it_is_committed(tmp_path: Path, mode: str) -> None:
    """The first commit builds the full-text index; later commits are searched unindexed."""
    db = str(tmp_path / "db")
    p = prepared(db)
    indexer = Indexer(Job(p.writer, p.encoder, p.chunker, group_chunks=1))
    retriever = Retriever("c", db=db, encoder=p.encoder)
    add(indexer, "a.md")
    assert found(retriever, "walrus", mode) == ["a.md"]
    add(indexer, "b.md")  # committed after the index was built
    assert index_health(p.store)["fts_unindexed_rows"] > 0
    assert found(retriever, "narwhal tusk", mode)[0] == "b.md"
    add(indexer, "c.md")
    assert sorted(found(retriever, "walrus", "lexical")) == ["a.md", "c.md"]


def test_end_of_a_first_build_indexes_everything_as_a_clean_build(tmp_path: Path) -> None:
    during = build(str(tmp_path / "during"), [("walrus narwhal", "lexical")])
    health = index_health(during.store)
    assert health["fts_index"] and health["fts_unindexed_rows"] == 0
    p = prepared(str(tmp_path / "once"))
    indexer = Indexer(Job(p.writer, p.encoder, p.chunker))  # one commit, indexed at the end only
    for name in TEXTS:
        add(indexer, name)
    indexer.flush()
    p.writer.refresh_indexes()
    once = Retriever("c", db=str(tmp_path / "once"), encoder=p.encoder)
    for query in ("walrus", "narwhal warranty", "late deliveries capped"):
        got, want = during.search(query, mode="lexical"), once.search(query, mode="lexical")
        assert [h.path for h in got] == [h.path for h in want]
        # float32 BM25 scores from the same index over the same rows; summation order may vary
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-5)


def test_a_collection_is_searchable_before_its_first_commit(tmp_path: Path) -> None:
    """A run that has not committed anything yet (here: an empty folder) answers, with nothing."""
    from tests.helpers import index_into

    db, docs = str(tmp_path / "db"), tmp_path / "docs"
    docs.mkdir()
    assert index_into(db, docs, options={"max_tokens": 12}).exit_code == 0
    retriever = Retriever("c", db=db)
    assert retriever.search("walrus", mode="lexical") == []
    assert retriever.search("walrus", mode="hybrid") == []


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_collection_just_created_answers_before_its_indexes_exist(
    tmp_path: Path, mode: str
) -> None:
    """Between a new collection's tables and its first run's indexes (a watcher or an API job
    creating it while someone searches) a search finds nothing instead of failing."""
    db = str(tmp_path / "db")
    p = prepared(db)  # opens (creates) the collection; the indexes come as a run starts
    assert not p.store.search_text("walrus", 10, None)
    assert Retriever("c", db=db, encoder=p.encoder).search("walrus", mode=mode) == []


def test_a_search_that_read_before_the_index_landed_is_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search reads the new collection's version without the full-text index, and the run's
    first commit (the index, then the rows) lands before the search looks at why it failed: it
    is run again on the version that has both, instead of failing (HTTP 500 in `serve`)."""
    db = str(tmp_path / "db")
    p = prepared(db)
    indexer = Indexer(Job(p.writer, p.encoder, p.chunker, group_chunks=1))
    scan, failed = p.store._scan, []

    def read_then_commit(where: object, **how: object) -> object:
        try:
            return scan(where, **how)  # type: ignore[arg-type]
        except ValueError:
            failed.append(True)
            add(indexer, "a.md")
            raise

    monkeypatch.setattr(p.store, "_scan", read_then_commit)
    assert [Path(c.path).name for c in p.store.search_text("walrus", 10, None)] == ["a.md"]
    assert failed == [True]
