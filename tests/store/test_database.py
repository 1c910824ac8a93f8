"""A Database opens one collection by reading that collection's tables only; the survey of
every collection is for listings and for saying what there is when a name is wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from docsearch.errors import CollectionNotFoundError
from docsearch.store.database import Database
from docsearch.store.reads import Store
from tests.helpers import index_into


@pytest.fixture
def two_collections(tmp_path: Path) -> str:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "a.md").write_text("# Lease\n\nThe walnut orchard lease runs ten years.\n")
    index_into(db, root, "one", encoder="none")
    index_into(db, root, "two", encoder="none")
    return db


def test_opening_a_collection_surveys_no_other(
    two_collections: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = two_collections
    shutil.rmtree(Path(db) / "two__chunks.lance" / "_versions")  # "two" is now incomplete
    read: list[str] = []
    real = Database.table_state

    def seen(self: Database, table: str) -> str:
        read.append(table)
        return real(self, table)

    monkeypatch.setattr(Database, "table_state", seen)
    monkeypatch.setattr(Database, "survey", lambda self: pytest.fail("surveyed"))
    store = Store.open(db, "one")
    assert store.count_chunks() == 1 and not any(t.startswith("two") for t in read)


def test_a_wrong_name_is_told_what_there_is(two_collections: str) -> None:
    shutil.rmtree(Path(two_collections) / "two__chunks.lance" / "_versions")
    with pytest.raises(CollectionNotFoundError, match=r"collections: one\)"):
        Store.open(two_collections, "three")
    with pytest.raises(CollectionNotFoundError, match="'two' is incomplete"):
        Store.open(two_collections, "two")
