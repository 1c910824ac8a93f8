"""Progress survives kills: a large file killed again and again while it embeds still finishes,
each restart embedding only the chunks no earlier run embedded; small files commit on a clock."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from docsearch.config import Settings
from docsearch.indexer import pipeline
from docsearch.indexer.collection import Prepared, prepare
from docsearch.indexer.extract import build_document
from docsearch.indexer.pipeline import NEW, FileOutcome, Indexer, Job
from docsearch.store.database import Database
from docsearch.store.reads import Store
from docsearch.store.schema import FileRecord
from tests.helpers import index_into
from tests.indexer.cli_hooks import run_hooked
from tests.indexer.test_crash import snapshot

ARGS = ["index", "--collection", "c", "--encoder", "hashing", "-o", "max_tokens=12"]
ENV = {"DOCSEARCH_TOKEN_BUDGET": "48"}  # about 4 chunks of 12 tokens per encoder call
KILL_AFTER = 6  # encoder calls a killed run completes
KILLS = 2


def prepared(db: str) -> Prepared:
    settings = Settings(db=db)
    return prepare(
        Database(db), "c", encoder_name="hashing", options={"max_tokens": 12}, settings=settings
    )


def large_file(root: Path, paragraphs: int = 120) -> Path:
    root.mkdir(parents=True)
    body = "\n\n".join(
        f"Paragraph {i}: the supplier ships lot {i * 7} to depot {i % 13} within {i} days."
        for i in range(paragraphs)
    )
    (root / "large.md").write_text(f"# Supply schedule\n\n{body}\n")
    return root


def embedded(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_each_restart_embeds_only_what_no_killed_run_embedded(tmp_path: Path) -> None:
    root = large_file(tmp_path / "docs")
    clean_db, db = str(tmp_path / "clean"), str(tmp_path / "db")
    assert index_into(clean_db, root, options={"max_tokens": 12}, token_budget=48).exit_code == 0
    expected = snapshot(clean_db)
    total = len(
        {r["text_sha"] for r in Store.open(clean_db, "c").rows("ordinal >= 0", ["text_sha"])}
    )
    assert total > KILLS * KILL_AFTER * 4  # the kills below stop it before the end

    runs: list[list[str]] = []
    for _ in range(KILLS):
        log = tmp_path / f"run{len(runs)}.log"
        killed = run_hooked(*ARGS, str(root), "--db", db, env={**ENV,
            "DOCSEARCH_FAKE_KILL_AFTER": str(KILL_AFTER), "DOCSEARCH_TEST_CHECKPOINT_SECONDS": "0",
            "DOCSEARCH_TEST_EMBED_LOG": str(log)})  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        runs.append(embedded(log))
        assert len(runs[-1]) >= KILL_AFTER  # every killed run made progress
    log = tmp_path / "final.log"
    final = run_hooked(*ARGS, str(root), "--db", db,
                       env={**ENV, "DOCSEARCH_TEST_EMBED_LOG": str(log)})  # fmt: skip
    assert final.returncode == 0, final.stderr
    runs.append(embedded(log))

    every = [sha for run in runs for sha in run]
    assert len(every) == len(set(every)) == total  # no chunk embedded twice, none missed
    counts = re.search(r"(\d+) embedded", final.stderr)
    assert counts is not None and int(counts[1]) == len(runs[-1])
    assert snapshot(db) == expected
    assert not (Path(db) / "c__pending_vectors.lance").exists()  # dropped at the end of the run


def test_a_checkpoint_table_left_half_created_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill while the checkpoint table itself was being created: the next run just works."""
    from tests.indexer.test_store_repair import interrupted_create

    root, db = large_file(tmp_path / "docs", paragraphs=20), tmp_path / "db"
    assert index_into(str(db), root, options={"max_tokens": 12}).exit_code == 0
    (root / "large.md").write_text((root / "large.md").read_text() + "\nA new closing line.\n")
    interrupted_create(db, "c__pending_vectors")
    monkeypatch.setattr(pipeline, "CHECKPOINT_SECONDS", 0.0)  # checkpoint after every batch
    report = index_into(str(db), root, options={"max_tokens": 12}, token_budget=48)
    assert report.changed == 1 and report.chunks_embedded > 0
    assert not (db / "c__pending_vectors.lance").exists()


def test_groups_commit_on_a_clock_when_files_come_slowly(tmp_path: Path) -> None:
    p = prepared(str(tmp_path / "db"))

    def add(indexer: Indexer, i: int) -> None:
        path = f"/docs/f{i}.md"
        doc = build_document(path, f"f{i}", [f"File {i} mentions clause {i}."])
        indexer.write(FileOutcome(FileRecord(path, f"sha{i}", 10, 1.0, "indexed"), NEW, doc))

    by_size_only = Indexer(Job(p.writer, p.encoder, p.chunker))  # no clock: by size only
    add(by_size_only, 0)
    time.sleep(0.3)
    add(by_size_only, 1)
    assert p.store.count_chunks() == 0  # nothing committed before flush
    by_size_only.flush()
    timed = Indexer(Job(p.writer, p.encoder, p.chunker), commit_seconds=0.2)
    add(timed, 2)
    assert p.store.count_chunks() == 2  # within the time bound: still queued
    time.sleep(0.3)
    add(timed, 3)
    assert p.store.count_chunks() == 4  # the bound passed: files 2 and 3 committed together
    assert set(p.store.file_records()) == {f"/docs/f{i}.md" for i in range(4)}


def test_vectors_checkpointed_before_a_failed_commit_are_reused_then_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = prepared(str(tmp_path / "db"))
    doc = build_document("/docs/big.md", "big", [" ".join(f"word{i}" for i in range(200))])

    def indexer() -> Indexer:
        return Indexer(Job(p.writer, p.encoder, p.chunker, token_budget=24), checkpoint_seconds=0)

    def power_cut(*args: object, **kwargs: object) -> None:
        raise RuntimeError("power cut before the commit")

    first = indexer()
    monkeypatch.setattr(p.writer, "commit", power_cut)
    first.write(FileOutcome(FileRecord("/docs/big.md", "s", 1, 1.0, "indexed"), NEW, doc))
    with pytest.raises(RuntimeError, match="power cut"):
        first.flush()
    monkeypatch.undo()
    assert first.report.chunks_embedded > 0 and p.writer.pending.exists()
    second = indexer()
    second.write(FileOutcome(FileRecord("/docs/big.md", "s", 1, 1.0, "indexed"), NEW, doc))
    second.flush()
    assert second.report.chunks_embedded == 0
    assert second.report.chunks_reused == first.report.chunks_embedded == p.store.count_chunks()
    assert p.store.dataset("pending_vectors").count_rows() == 0  # committed: no longer pending
