"""Crash safety: kill -9 an indexing process at several points; a rerun equals a clean build
(its chunks, vectors, file records and documents)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from docsearch.store.reads import Store
from tests.helpers import REPO, documents, index_into, make_pdf, run_cli


def make_corpus(root: Path, files: int = 12) -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        body = "\n\n".join(
            f"Clause {i}.{j}. Party {i} shall deliver item {j} within {i + j} days of notice."
            for j in range(4)
        )
        (root / f"doc{i:02d}.md").write_text(f"# Contract {i}\n\n{body}\n")
    make_pdf(root / "scan.pdf", ["Page one of the annex.", "Page two of the annex."])
    return root


def snapshot(db: str) -> dict[str, Any]:
    store = Store.open(db, "c")
    rows = store.rows("ordinal >= 0", ["id", "path", "vector", "text"])
    ids = [r["id"] for r in rows]
    files = {p: (r.sha256, r.status, r.n_chunks) for p, r in store.file_records().items()}
    return {
        "ids": sorted(ids),
        "duplicates": len(ids) - len(set(ids)),
        "files": files,
        "vectors": {r["id"]: [round(x, 6) for x in r["vector"]] for r in rows},
        "documents": {
            path: {**row, "vector": [round(x, 6) for x in row["vector"]]}
            for path, row in documents(db).items()
        },
    }


class PowerCut(BaseException):
    """Stops a run wherever it is, as pulling the plug would."""


INDEX_ARGS = ["index", "--collection", "c", "--encoder", "hashing", "-o", "max_tokens=12"]
ENV = {"DOCSEARCH_COMMIT_CHUNKS": "4"}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = make_corpus(tmp_path_factory.mktemp("crash") / "docs")
    db = str(root.parent / "clean-db")
    result = run_cli(*INDEX_ARGS, str(root), "--db", db, env=ENV)
    assert result.returncode == 0, result.stderr
    return root, snapshot(db)


@pytest.mark.parametrize("kill_after_batches", [0, 2, 5])
def test_killed_between_batches_then_rerun_equals_clean_build(
    clean: tuple[Path, dict[str, Any]], tmp_path: Path, kill_after_batches: int
) -> None:
    root, expected = clean
    db = str(tmp_path / "db")
    killed = run_cli(
        *INDEX_ARGS,
        str(root),
        "--db",
        db,
        env={**ENV, "DOCSEARCH_FAKE_KILL_AFTER": str(kill_after_batches)},
    )
    assert killed.returncode == -signal.SIGKILL
    finished = run_cli(*INDEX_ARGS, str(root), "--db", db, env=ENV)
    assert finished.returncode == 0, finished.stderr
    got = snapshot(db)
    assert got["duplicates"] == 0
    assert got == expected


@pytest.mark.parametrize("delay", [1.5, 3.0])
def test_killed_at_a_random_moment_then_rerun_equals_clean_build(
    clean: tuple[Path, dict[str, Any]], tmp_path: Path, delay: float
) -> None:
    root, expected = clean
    db = str(tmp_path / "db")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DOCSEARCH_PLUGINS": "tests.fakes",
        **ENV,
        "DOCSEARCH_FAKE_SLEEP": "0.1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "docsearch.app.cli", *INDEX_ARGS, str(root), "--db", db],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    finished = run_cli(*INDEX_ARGS, str(root), "--db", db, env=ENV)
    assert finished.returncode == 0, finished.stderr
    assert snapshot(db) == expected


@pytest.mark.parametrize("table", ["__docs", "__files"])
def test_crash_between_chunk_and_file_commits(
    clean: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
) -> None:
    """Chunks written, documents or files table not: the rerun redoes those files without
    duplicates. Files of more than 4 chunks are streamed (their chunks and documents are
    committed as fragments), the others merged: the second commit of `table` is cut off, by
    whichever way it comes (a BaseException, as a power cut stops everything: an Exception
    would only fail the files being written)."""
    from lancedb.table import LanceTable

    from docsearch.store.writes import Writer

    root, expected = clean
    db = str(tmp_path / "db")
    real_merge, real_fragments = LanceTable.merge_insert, Writer._commit_fragments
    calls = 0

    def power_cut(name: str) -> None:
        nonlocal calls
        if name.endswith(table):
            calls += 1
            if calls == 2:
                raise PowerCut("simulated power cut after the chunks commit")

    def merge(target: LanceTable, *args: Any, **kwargs: Any) -> Any:
        power_cut(target.name)
        return real_merge(target, *args, **kwargs)

    def fragments(writer: Writer, kind: str, *args: Any, **kwargs: Any) -> Any:
        power_cut(f"__{kind}")
        return real_fragments(writer, kind, *args, **kwargs)

    monkeypatch.setattr(LanceTable, "merge_insert", merge)
    monkeypatch.setattr(Writer, "_commit_fragments", fragments)
    with pytest.raises(PowerCut, match="power cut"):
        index_into(db, root, options={"max_tokens": 12}, commit_chunks=4)
    monkeypatch.undo()
    report = index_into(db, root, options={"max_tokens": 12}, commit_chunks=4)
    assert report.chunks_reused > 0  # the orphaned chunks' vectors were found, not re-embedded
    assert snapshot(db) == expected


def _cli(*args: str) -> Any:
    """`docsearch ARGS` in this process (quicker than a subprocess for reads)."""
    from typer.testing import CliRunner

    from docsearch.app.cli import app

    return CliRunner().invoke(app, list(args))


def _killed_before_file_records(tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A folder of one file, indexed by a run SIGKILLed after its chunks and documents were
    committed and before its file record was: the root, the database, the index arguments."""
    from tests.indexer.cli_hooks import run_hooked

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Lease\n\nThe tenant keeps a marmoset in the garden.\n")
    db = str(tmp_path / "db")
    args = [*INDEX_ARGS, str(root), "--db", db]
    killed = run_hooked(*args, env={"DOCSEARCH_TEST_KILL_BEFORE_MERGE": "__files"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = Store.open(db, "c")
    assert store.count_chunks() > 0 and store.count_documents() > 0  # what the kill left
    assert not store.file_records()
    return root, db, args


def test_killed_before_its_file_records_a_file_is_hidden_then_repaired(tmp_path: Path) -> None:
    """Searches see none of a half-written file, `doctor` names the repair pending (not "needs
    attention"), and the next run redoes it."""
    import json

    root, db, args = _killed_before_file_records(tmp_path)
    for mode in ("lexical", "hybrid", "vector"):
        for granularity in ([], ["--passages"]):
            found = _cli("search", "marmoset", "--db", db, "--mode", mode, *granularity, "--json")
            assert found.exit_code == 0, found.output
            assert json.loads(found.stdout) == [], (mode, granularity)
    doctor = _cli("doctor", "--db", db)
    assert "repair pending" in doctor.stdout and "needs attention" not in doctor.stdout
    assert f"pending: {root / 'a.md'}" in doctor.stdout, doctor.stdout
    health = json.loads(_cli("doctor", "--json", "--db", db).stdout)["collections"]["c"]
    assert health["state"] == "repair pending"
    assert health["pending_files"] == [str(root / "a.md")]
    rerun = run_cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    found = _cli("search", "marmoset", "--db", db, "--mode", "lexical", "--json")
    assert [hit["path"] for hit in json.loads(found.stdout)] == [str(root / "a.md")]
    healthy = _cli("doctor", "--db", db)
    assert healthy.exit_code == 0 and "c: ok" in healthy.stdout, healthy.stdout


@pytest.mark.slow  # about 10-15 s: two index runs in subprocesses
def test_a_half_written_file_deleted_before_the_rerun_is_dropped(tmp_path: Path) -> None:
    root, db, args = _killed_before_file_records(tmp_path)
    (root / "a.md").unlink()
    (root / "b.md").write_text("# Memo\n\nNothing about animals.\n")
    assert run_cli(*args).returncode == 0
    store = Store.open(db, "c")
    assert {row["path"] for row in store.rows("ordinal >= 0", ["path"])} == {str(root / "b.md")}
    assert store.pending_paths() == [] and set(store.file_records()) == {str(root / "b.md")}


@pytest.mark.slow  # about 10-15 s: two index runs in subprocesses
def test_a_crash_state_from_before_pending_paths_is_reported_and_repaired(tmp_path: Path) -> None:
    """Chunks and documents of a file with no record and not marked pending (what a kill left
    before commits marked their paths): `doctor` says the next run redoes it, and it does."""
    import json

    from docsearch.store.pending import PENDING_PATHS_KEY

    root, db, args = _killed_before_file_records(tmp_path)
    store = Store.open(db, "c")
    for kind in ("chunks", "docs"):  # as an earlier docsearch would have left it
        store.dataset(kind).update_config({PENDING_PATHS_KEY: None})
    health = json.loads(_cli("doctor", "--json", "--db", db).stdout)["collections"]["c"]
    assert health["state"] == "repair pending"
    assert (health["pending_files"], health["unrecorded_files"]) == ([], [str(root / "a.md")])
    assert run_cli(*args).returncode == 0
    store = Store.open(db, "c")
    assert store.unrecorded_paths() == [] and list(store.file_records()) == [str(root / "a.md")]
    assert _cli("doctor", "--db", db).exit_code == 0
