"""`docsearch watch` keeps a collection in line with a folder, run as a real process.

Create, edit, write-temp-then-rename (as editors save), rename and delete; a folder that goes
away (its index kept) and comes back; a watcher SIGKILLed in the middle of a run and started
again. After each step the collection must match the folder within CONVERGE_SECONDS: the same
files, each with its current bytes' hash, and its chunks once each (no duplicates).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import REPO

# The stated delay: --quiet (0.3 s here) plus one incremental run, with room for a busy machine.
CONVERGE_SECONDS = 30.0
NAME = "w"


@contextmanager
def watcher(folder: Path, db: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOCSEARCH_PLUGINS": "tests.fakes"}
    env |= {"DOCSEARCH_DB": db, "DOCSEARCH_COMMIT_CHUNKS": "4"}
    argv = ["watch", str(folder), "-c", NAME, "-e", "hashing", "--quiet", "0.3"]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "docsearch.app.cli", *argv],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=20)


def indexed(db: str) -> dict[str, str] | None:
    """File name -> recorded sha256, if every chunk is there exactly once; else None."""
    from docsearch.errors import DocsearchError
    from docsearch.indexer.filters import ChunkFilter
    from docsearch.store.reads import Store

    try:
        store = Store.open(db, NAME)
        records = store.file_records()
        rows = store.rows(ChunkFilter(), columns=["id", "path", "ordinal"])
    except (DocsearchError, OSError, ValueError):
        return None
    ids = [r["id"] for r in rows]
    spots = {(r["path"], r["ordinal"]) for r in rows}
    per_file = {p: sum(r["path"] == p for r in rows) for p in records}
    assert len(ids) == len(set(ids)) == len(spots), "duplicate chunks"
    # The two tables are read one after the other: a commit between them is not a verdict.
    if not {r["path"] for r in rows} <= set(records) or any(
        per_file[p] != r.n_chunks or r.status != "indexed" for p, r in records.items()
    ):
        return None
    return {Path(p).relative_to(_root(p)).as_posix(): r.sha256 for p, r in records.items()}


def _root(path: str) -> Path:
    return next(p for p in Path(path).parents if p.name == "watched")


def on_disk(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*.md"))
        if not p.name.startswith(".")
    }


def converges(db: str, folder: Path, log: Path) -> None:
    expected = on_disk(folder)
    deadline = time.monotonic() + CONVERGE_SECONDS
    while time.monotonic() < deadline:
        if indexed(db) == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"index {indexed(db)} != folder {expected}\n{log.read_text()[-3000:]}")


@pytest.mark.slow  # about 30 s: a dozen index runs
def test_the_index_follows_creates_edits_saves_renames_and_deletes(tmp_path: Path) -> None:
    folder, db, log = tmp_path / "watched", str(tmp_path / "db"), tmp_path / "watch.log"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha clause.\n")
    with watcher(folder, db, log):
        converges(db, folder, log)
        (folder / "b.md").write_text("# B\n\nBeta clause.\n")
        converges(db, folder, log)
        (folder / "a.md").write_text("# A\n\nAlpha clause, amended with a zebra.\n")
        converges(db, folder, log)
        temp = folder / ".b.md.swp"  # write-temp-then-rename, as editors save
        temp.write_text("# B\n\nBeta clause, saved by an editor: giraffe.\n")
        os.replace(temp, folder / "b.md")
        converges(db, folder, log)
        (folder / "sub").mkdir()
        (folder / "b.md").rename(folder / "sub" / "c.md")
        converges(db, folder, log)
        (folder / "a.md").unlink()
        converges(db, folder, log)
        assert set(on_disk(folder)) == {"sub/c.md"}
        # The folder goes away: its index is kept; it comes back with other files.
        kept = indexed(db)
        shutil.rmtree(folder)
        time.sleep(3)
        assert indexed(db) == kept
        folder.mkdir()
        (folder / "d.md").write_text("# D\n\nDelta clause.\n")
        converges(db, folder, log)
    assert "Traceback" not in log.read_text()


@pytest.mark.slow  # about 30 s
def test_a_watcher_killed_mid_run_converges_when_started_again(tmp_path: Path) -> None:
    folder, db, log = tmp_path / "watched", str(tmp_path / "db"), tmp_path / "watch.log"
    folder.mkdir()
    (folder / "first.md").write_text("# First\n\nThe first memo.\n")
    with watcher(folder, db, log) as process:
        converges(db, folder, log)
        for i in range(150):
            words = " ".join(f"w{i}x{j}" for j in range(120))
            (folder / f"doc{i:03}.md").write_text(f"# Doc {i}\n\n{words}\n")
        _kill_once_partly_written(process, db, log)
    with watcher(folder, db, log):
        converges(db, folder, log)
    assert "Traceback" not in log.read_text()


def _kill_once_partly_written(process: subprocess.Popen[bytes], db: str, log: Path) -> None:
    from docsearch.store.reads import Store

    deadline = time.monotonic() + CONVERGE_SECONDS
    while time.monotonic() < deadline:
        if 1 < len(Store.open(db, NAME).file_records()) < 151:
            process.send_signal(signal.SIGKILL)
            process.wait()
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw the run part-way\n{log.read_text()[-3000:]}")


def test_watch_in_process_follows_a_new_and_a_deleted_file_and_stops(tmp_path: Path) -> None:
    import threading

    from docsearch.config import Settings
    from docsearch.indexer.watch import watch

    folder, db = tmp_path / "watched", str(tmp_path / "db")
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha clause.\n")
    stop, log = threading.Event(), tmp_path / "none.log"
    log.write_text("")
    settings = Settings(db=db)
    kwargs = {"settings": settings, "collection": NAME, "encoder": "hashing", "quiet": 0.2}
    thread = threading.Thread(target=watch, args=(folder,), kwargs={**kwargs, "stop": stop})
    thread.start()
    try:
        converges(db, folder, log)
        (folder / "b.md").write_text("# B\n\nBeta clause.\n")
        converges(db, folder, log)
        (folder / "a.md").unlink()
        converges(db, folder, log)
        assert set(on_disk(folder)) == {"b.md"}
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
