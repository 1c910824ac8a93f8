"""A fault in any per-file step (extract, chunk, embed, write) fails that file alone, with the
step and the error as its reason; the run goes on (exit 3) and the collection stays "ok".

The faults are injected (an exception raised for one file) into the real stages, over the real
store; the hashing fake encoder embeds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from docsearch.indexer import pipeline
from docsearch.store import writes
from docsearch.store.reads import Store
from tests.fakes import HashingEncoder
from tests.helpers import index_into

FAULT_WORD = "wombat"  # only the faulty file holds it


class InjectedFault(RuntimeError):
    pass


def _extract(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pipeline.extract_guarded

    def faulty(path: Path, *args: Any, **kwargs: Any) -> Any:
        if FAULT_WORD in path.name:
            raise InjectedFault("extract fault")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "extract_guarded", faulty)


def _chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pipeline.iter_chunk_rows

    def faulty(doc: Any, *args: Any, **kwargs: Any) -> Any:
        for row in real(doc, *args, **kwargs):
            if FAULT_WORD in doc.path:
                raise InjectedFault("chunk fault")
            yield row

    monkeypatch.setattr(pipeline, "iter_chunk_rows", faulty)


def _embed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = HashingEncoder.encode_documents

    def faulty(self: HashingEncoder, texts: list[str]) -> Any:
        if any(FAULT_WORD in text for text in texts):
            raise InjectedFault("embed fault")
        return real(self, texts)

    monkeypatch.setattr(HashingEncoder, "encode_documents", faulty)


def _write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs commit fails for the faulty file's rows: its chunks are already committed."""
    real = writes._replace

    def faulty(table: Any, key: str, rows: list[dict[str, Any]], paths: Any) -> None:
        if table.name.endswith("__docs") and any(FAULT_WORD in r["path"] for r in rows):
            raise InjectedFault("write fault")
        real(table, key, rows, paths)

    monkeypatch.setattr(writes, "_replace", faulty)


STEPS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "extract": _extract,
    "chunk": _chunk,
    "embed": _embed,
    "write": _write,
}
REASONS = {"extract": "could not be read", "chunk": "chunking", "embed": "embedding"}
REASONS["write"] = "writing"


def folder(root: Path) -> Path:
    root.mkdir()
    for i, word in enumerate(["heron", "otter", "badger"]):
        (root / f"good{i}.md").write_text(f"# Note {i}\n\nA note about the {word}.\n")
    (root / f"{FAULT_WORD}.md").write_text(f"# Faulty\n\nA note about the {FAULT_WORD}.\n")
    return root


def health(db: str) -> dict[str, Any]:
    from docsearch.app.cli import app

    result = CliRunner().invoke(app, ["doctor", "--json", "--db", db])
    return dict(json.loads(result.stdout)["collections"]["c"])


@pytest.mark.parametrize("step", list(STEPS))
def test_a_fault_in_one_step_fails_only_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    root, db = folder(tmp_path / "docs"), str(tmp_path / "db")
    STEPS[step](monkeypatch)
    report = index_into(db, root)
    assert report.exit_code == 3
    assert [Path(p).name for p, _ in report.failed] == [f"{FAULT_WORD}.md"]
    reason = report.failed[0][1]
    assert REASONS[step] in reason and "fault" in reason, reason
    assert (report.new, report.changed) == (3, 0)
    stored = Store.open(db, "c")
    paths = {row["path"] for row in stored.rows("ordinal >= 0", ["path"])}
    assert {Path(p).name for p in paths} == {"good0.md", "good1.md", "good2.md"}
    state = health(db)
    assert state["state"] == "ok" and state["pending_files"] == []
    assert list(state["failed_files"]) == [str(root / f"{FAULT_WORD}.md")]
    monkeypatch.undo()
    retried = index_into(db, root)  # the fault gone, the next run indexes the file
    assert (retried.exit_code, retried.new) == (0, 1)
    assert health(db)["failed_files"] == {}


@pytest.mark.parametrize("step", ["chunk", "embed"])
def test_a_changed_file_that_faults_before_it_is_written_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    root, db = folder(tmp_path / "docs"), str(tmp_path / "db")
    assert index_into(db, root).exit_code == 0
    (root / f"{FAULT_WORD}.md").write_text(f"# Faulty\n\nAn edited note about the {FAULT_WORD}.\n")
    STEPS[step](monkeypatch)
    report = index_into(db, root)
    assert report.exit_code == 3 and "still serving" in report.failed[0][1]
    texts = [r["text"] for r in Store.open(db, "c").rows("ordinal >= 0", ["path", "text"])]
    assert any(f"A note about the {FAULT_WORD}" in text for text in texts)  # the old version
    assert health(db)["state"] == "ok"


class RayStagesInline:
    """The Ray engine's stages (extract task, embedding actor, one commit) in this process, as
    tests/scale/test_ray_engine.py's InlineRay runs them, without needing Ray installed."""

    embeds_here = False

    def run(self, job: Any, work: Any) -> None:
        import pickle

        from docsearch.indexer import ray_engine

        outcomes = [
            pickle.loads(ray_engine.extract_task(row, job.limits, work.deleted_shas)["payload"])
            for row in ray_engine.task_rows(work)
        ]
        worker = ray_engine.EmbedWorker(**ray_engine.EmbedWorker.arguments(job))
        ray_engine.commit_results(job, work, [worker.process(outcomes)])
        job.writer.refresh_indexes()


@pytest.mark.parametrize("step", ["chunk", "embed"])
def test_the_ray_engines_actor_fails_only_the_faulty_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    ray_engine = pytest.importorskip("docsearch.indexer.ray_engine")
    monkeypatch.setattr(ray_engine, "_node_id", lambda: "local")  # no Ray runtime to ask
    root, db = folder(tmp_path / "docs"), str(tmp_path / "db")
    STEPS[step](monkeypatch)
    report = index_into(db, root, engine=RayStagesInline())
    assert [Path(p).name for p, _ in report.failed] == [f"{FAULT_WORD}.md"]
    assert "chunking and embedding" in report.failed[0][1]
    stored = Store.open(db, "c")
    paths = {Path(row["path"]).name for row in stored.rows("ordinal >= 0", ["path"])}
    assert paths == {"good0.md", "good1.md", "good2.md"}
    assert health(db)["state"] == "ok"
