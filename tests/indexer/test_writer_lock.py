"""One writer per collection, whatever spelling names the database folder.

`flock` locks belong to an open file description, so two `writer_lock`s in one process conflict
exactly as two processes do; the last test uses two real processes anyway.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from docsearch.errors import UsageError
from docsearch.store.database import Database
from tests.helpers import REPO, run_cli


def spellings(db: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every way to name `db` that LanceDB opens as the same folder."""
    link = db.parent / "link-to-db"
    link.symlink_to(db, target_is_directory=True)
    monkeypatch.chdir(db.parent)
    monkeypatch.setenv("HOME", str(db.parent))
    return {
        "path": str(db),
        "trailing slash": f"{db}/",
        "file URI": f"file://{db}",
        "file: URI": f"file:{db}",
        "relative": db.name,
        "dotted": f"./{db.name}/../{db.name}",
        "home": f"~/{db.name}",
        "symlink": str(link),
        "symlink URI": f"file://{link}",
    }


@pytest.mark.parametrize(
    "first, second",
    [("path", "file URI"), ("file URI", "path"), ("relative", "file: URI"),
     ("symlink", "path"), ("symlink URI", "dotted"), ("home", "trailing slash")],
)  # fmt: skip
def test_second_writer_is_refused_under_any_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, second: str
) -> None:
    db = tmp_path / "db"
    db.mkdir()
    names = spellings(db, monkeypatch)
    refused = pytest.raises(UsageError, match="being indexed by another process")
    with Database(names[first]).writer_lock("c"), refused, Database(names[second]).writer_lock("c"):
        pass
    with Database(names[second]).writer_lock("c"):  # released: the next writer gets it
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "link-to-db"]  # no 'file:' dir


def test_other_collections_and_databases_do_not_conflict(tmp_path: Path) -> None:
    with (
        Database(str(tmp_path / "db")).writer_lock("a"),
        Database(f"file://{tmp_path / 'db'}").writer_lock("b"),
        Database(str(tmp_path / "x")).writer_lock("a"),
    ):
        pass


def test_object_store_writes_warn_that_they_are_not_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING), Database("s3://bucket/db").writer_lock("c"):
        pass
    assert "cannot lock it" in caplog.text and "one indexing process" in caplog.text
    assert list(tmp_path.iterdir()) == []  # nothing made on the local disk


def test_index_through_a_file_uri_is_refused_while_another_process_writes(tmp_path: Path) -> None:
    db, docs = tmp_path / "db", tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome words to index.\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from docsearch.store.database import Database\n"
         "with Database(sys.argv[1]).writer_lock('c'):\n    print('held', flush=True); sys.stdin.read()",
         str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        second = run_cli("index", str(docs), "--collection", "c", "--encoder", "none",
                         "--db", f"file://{db}")  # fmt: skip
        assert second.returncode == 2, second.stderr
        assert "being indexed by another process" in second.stderr
    finally:
        holder.communicate("", timeout=30)
    assert not (db / "c__chunks.lance").exists()  # the refused writer wrote nothing
