"""A collection whose creation (or drop) was killed half-way: reported, repaired by the next
`index`, and never in the way of the other collections in the database. A collection without
its documents table (built before it existed, or its creation killed) gets it from the next
`index`, made from the stored chunks."""

from __future__ import annotations

import logging
import shutil
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docsearch.app.cli import app
from docsearch.errors import CollectionNotFoundError
from docsearch.store.database import Database
from docsearch.store.reads import Store
from docsearch.store.schema import files_schema
from tests.helpers import documents
from tests.indexer.cli_hooks import run_hooked

INDEX = ["index", "--encoder", "hashing", "-o", "max_tokens=12"]


def run_cli(*args: str):  # type: ignore[no-untyped-def]
    """The CLI in this process (the kills below need their own processes: `run_hooked`)."""
    result = CliRunner().invoke(app, list(args))
    result.returncode = result.exit_code
    return result


def folder(root: Path, word: str) -> Path:
    root.mkdir(parents=True)
    for i in range(3):
        (root / f"{word}{i}.md").write_text(f"# {word} {i}\n\nThe {word} clause number {i}.\n")
    return root


def interrupted_create(db: Path, table: str) -> None:
    """What a kill inside `create_table` leaves: the table's folder holding only the
    transaction file, which Lance writes before the manifest that makes it a table."""
    import lancedb

    scratch = db.parent / f"scratch-{table}"
    lancedb.connect(str(scratch)).create_table("t", schema=files_schema())
    target = db / f"{table}.lance"
    target.mkdir(parents=True)
    shutil.copytree(scratch / "t.lance" / "_transactions", target / "_transactions")
    assert sorted(p.name for p in target.iterdir()) == ["_transactions"]


@pytest.fixture
def healthy(tmp_path: Path) -> tuple[Path, Path]:
    """A database holding one good collection, 'good'; returns (database, tmp folder)."""
    db = tmp_path / "db"
    done = run_cli(*INDEX, str(folder(tmp_path / "good", "walrus")), "--collection", "good",
                   "--db", str(db))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return db, tmp_path


def test_interrupted_chunks_creation_is_reported_repaired_and_harmless(
    healthy: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    db, tmp = healthy
    import lancedb

    lancedb.connect(str(db)).create_table("new__files", schema=files_schema())
    interrupted_create(db, "new__chunks")

    with caplog.at_level(logging.WARNING):
        listed = run_cli("collections", "list", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split("\t")[0] == "good"
    assert "collection 'new' is incomplete" in caplog.text
    found = run_cli("search", "walrus", "--mode", "lexical", "--json", "--db", str(db))
    assert found.returncode == 0, found.stderr  # no --collection: picks among healthy ones
    assert "walrus0.md" in found.stdout
    asked = run_cli("search", "walrus", "--collection", "new", "--db", str(db))
    assert asked.returncode == 2 and "incomplete" in asked.stderr

    new = folder(tmp / "new", "narwhal")
    repaired = run_cli(*INDEX, str(new), "--collection", "new", "--db", str(db))
    assert repaired.returncode == 0, repaired.stderr
    assert "3 new" in repaired.stderr
    assert Database(str(db)).list_collections() == ["good", "new"]
    assert Store.open(str(db), "new").count_chunks() == Store.open(str(db), "good").count_chunks()
    hits = run_cli("search", "narwhal", "--mode", "lexical", "--collection", "new",
                   "--db", str(db))  # fmt: skip
    assert hits.returncode == 0 and "narwhal0.md" in hits.stdout


def test_interrupted_files_creation_is_repaired(healthy: tuple[Path, Path]) -> None:
    db, tmp = healthy
    interrupted_create(db, "new__files")
    repaired = run_cli(*INDEX, str(folder(tmp / "new", "narwhal")), "--collection", "new",
                       "--db", str(db))  # fmt: skip
    assert repaired.returncode == 0, repaired.stderr
    assert Store.open(str(db), "new").count_chunks() > 0
    assert len(Store.open(str(db), "new").file_records()) == 3


def test_killed_right_after_the_files_table_is_created(healthy: tuple[Path, Path]) -> None:
    db, tmp = healthy
    new = folder(tmp / "new", "narwhal")
    args = [*INDEX, str(new), "--collection", "new", "--db", str(db)]
    killed = run_hooked(*args, env={"DOCSEARCH_TEST_KILL_AFTER_CREATE": "new__files"})
    assert killed.returncode == -signal.SIGKILL
    assert (db / "new__files.lance").is_dir() and not (db / "new__chunks.lance").exists()
    assert Database(str(db)).list_collections() == ["good"]
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert "3 new" in again.stderr
    assert Database(str(db)).list_collections() == ["good", "new"]


def test_killed_right_after_the_docs_table_is_created(healthy: tuple[Path, Path]) -> None:
    db, tmp = healthy
    args = [*INDEX, str(folder(tmp / "new", "narwhal")), "--collection", "new", "--db", str(db)]
    killed = run_hooked(*args, env={"DOCSEARCH_TEST_KILL_AFTER_CREATE": "new__docs"})
    assert killed.returncode == -signal.SIGKILL
    assert (db / "new__docs.lance").is_dir() and not (db / "new__chunks.lance").exists()
    assert Database(str(db)).list_collections() == ["good"]
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert "3 new" in again.stderr
    assert len(documents(str(db), "new")) == 3


def without_documents(db: Path, name: str = "good") -> dict[str, dict]:
    """Drop the docs table, as in a collection built before it existed; the rows it had."""
    built = documents(str(db), name)
    Database(str(db)).drop_tables(name, ["docs"])
    return built


def test_a_collection_without_documents_searches_then_its_next_run_backfills_them(
    healthy: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    db, tmp = healthy
    built = without_documents(db)
    old = Store.open(str(db), "good")
    assert not old.has_documents
    assert old.search_documents_text("walrus", 5, None) == []  # the retriever falls back
    found = run_cli("search", "walrus", "--mode", "lexical", "--json", "--db", str(db))
    assert found.returncode == 0 and "walrus0.md" in found.stdout

    with caplog.at_level(logging.INFO, logger="docsearch.store"):
        again = run_cli(*INDEX, str(tmp / "good"), "--collection", "good", "--db", str(db))
    assert again.returncode == 0, again.stderr
    assert "3 unchanged" in again.stderr  # nothing was read, chunked or embedded again
    assert "3 documents made from its stored chunks" in caplog.text
    assert documents(str(db), "good") == built  # what the first build wrote
    assert old.has_documents and len(old.search_documents_text("walrus", 5, None)) == 3


def test_a_backfill_killed_before_its_index_is_finished_by_the_next_run(
    healthy: tuple[Path, Path],
) -> None:
    db, tmp = healthy
    built = without_documents(db)
    args = [*INDEX, str(tmp / "good"), "--collection", "good", "--db", str(db)]
    killed = run_hooked(*args, env={"DOCSEARCH_TEST_KILL_AFTER_CREATE": "good__docs"})
    assert killed.returncode == -signal.SIGKILL
    assert not Store.open(str(db), "good").has_documents  # rows, but no full-text index yet
    assert run_cli(*args).returncode == 0
    assert Store.open(str(db), "good").has_documents
    assert documents(str(db), "good") == built


def test_an_interrupted_docs_creation_is_rebuilt(healthy: tuple[Path, Path]) -> None:
    db, tmp = healthy
    built = without_documents(db)
    interrupted_create(db, "good__docs")
    assert Database(str(db)).list_collections() == ["good"]
    assert not Store.open(str(db), "good").has_documents
    assert (
        run_cli(*INDEX, str(tmp / "good"), "--collection", "good", "--db", str(db)).returncode == 0
    )
    assert documents(str(db), "good") == built


def test_killed_drop_then_index_rebuilds_instead_of_trusting_stale_records(
    healthy: tuple[Path, Path],
) -> None:
    """An interrupted drop leaves file records without chunks: they must not count as indexed."""
    db, tmp = healthy
    source = tmp / "good"
    killed = run_hooked("collections", "drop", "good", "--yes", "--db", str(db),
                        env={"DOCSEARCH_TEST_KILL_AFTER_DROP": "good__chunks"})  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert (db / "good__files.lance").is_dir() and not (db / "good__chunks.lance").exists()
    with pytest.raises(CollectionNotFoundError, match="incomplete"):
        Store.open(str(db), "good")
    again = run_cli(*INDEX, str(source), "--collection", "good", "--db", str(db))
    assert again.returncode == 0, again.stderr
    assert "3 new" in again.stderr
    store = Store.open(str(db), "good")
    assert store.count_chunks() > 0
    assert {r.n_chunks > 0 for r in store.file_records().values()} == {True}
    assert len(documents(str(db), "good")) == 3  # the stale docs table was dropped with the rest


def test_an_incomplete_collection_can_be_dropped(healthy: tuple[Path, Path]) -> None:
    db, _ = healthy
    interrupted_create(db, "new__files")
    dropped = run_cli("collections", "drop", "new", "--yes", "--db", str(db))
    assert dropped.returncode == 0, dropped.stderr
    assert not (db / "new__files.lance").exists()
    listed = run_cli("collections", "list", "--db", str(db))
    assert listed.returncode == 0 and "incomplete" not in listed.stderr
