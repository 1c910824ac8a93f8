"""Switching a collection to another encoder (`docsearch index --switch`) without downtime.

The new version is built beside the serving one; searches answer from the old version until
the swap and from the new one after; a switch killed half-way leaves the old version serving
and the next run resumes it; the retired version's tables are dropped. The two encoders are the
hashing fake at 64 and 32 dimensions: the same chunks, different vectors, so a hit's dense score
says which version answered.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from docsearch.app.collections_cmd import collection_info
from docsearch.config import Settings
from docsearch.errors import EncoderMismatchError, UsageError
from docsearch.indexer.service import writing
from docsearch.retriever import Hit, Retriever
from docsearch.store.database import Database
from docsearch.store.reads import Store
from docsearch.store.versions import Versions
from tests.helpers import index_into, run_cli
from tests.indexer.cli_hooks import run_hooked
from tests.indexer.test_crash import make_corpus, snapshot

OLD = {"max_tokens": 12, "dim": 64}
NEW = {"max_tokens": 12, "dim": 32}
QUERY = "party shall deliver the item within days"
SWITCH_ARGS = ["index", "--collection", "c", "--encoder", "hashing", "-o", "max_tokens=12"]
SWITCH_ARGS += ["-o", "dim=32", "--switch"]
ENV = {"DOCSEARCH_COMMIT_CHUNKS": "4"}
# Cosine scores of float32 vectors: the same computation on the same vectors, up to the order
# of a float32 sum.
SCORE_TOL = 1e-5


def answer(hits: list[Hit]) -> list[tuple[str, float]]:
    """What a search answered: each hit's document and its dense score."""
    return [(hit.doc_id, hit.scores["dense"]["score"]) for hit in hits]


def same_answer(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
    return [d for d, _ in got] == [d for d, _ in want] and all(
        abs(a - b) <= SCORE_TOL for (_, a), (_, b) in zip(got, want, strict=True)
    )


def reference(tmp_path: Path, root: Path, options: dict[str, Any], label: str) -> str:
    """A collection built from scratch with `options` (what a switch must end up as)."""
    db = str(tmp_path / f"reference-{label}")
    index_into(db, root, options=options, commit_chunks=4)
    return db


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, str]:
    """The corpus, indexed with the old encoder."""
    root = make_corpus(tmp_path / "docs")
    db = str(tmp_path / "db")
    index_into(db, root, options=OLD, commit_chunks=4)
    return root, db


def tables(db: str) -> set[str]:
    return {p.name.removesuffix(".lance") for p in Path(db).glob("*.lance")}


def interrupted_switch(db: str, options: dict[str, Any] = NEW) -> None:
    """A switch whose run failed before writing anything: its version is created, not swapped."""
    settings = Settings(db=db)
    run = writing("c", settings=settings, encoder="hashing", options=options, switch=True)
    with pytest.raises(RuntimeError, match="stopped"), run:
        raise RuntimeError("stopped")


# ---------------------------------------------------------------------------------------------
# In this process


def test_without_switch_another_encoder_is_refused_with_the_way_to_switch(
    built: tuple[Path, str],
) -> None:
    root, db = built
    with pytest.raises(EncoderMismatchError, match="add --switch"):
        index_into(db, root, options=NEW)
    assert Database(db).versions("c").building is None and tables(db) == {
        "c__chunks",
        "c__docs",
        "c__files",
    }


def test_a_switch_ends_as_a_build_from_scratch_and_drops_the_old_tables(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    root, db = built
    report = index_into(db, root, options=NEW, commit_chunks=4, switch=True)
    assert report.new == 13 and report.chunks_embedded > 0 and not report.failed
    assert Database(db).versions("c").active == 1
    assert tables(db) == {"c.v1__chunks", "c.v1__docs", "c.v1__files", "c__versions"}
    assert snapshot(db) == snapshot(reference(tmp_path, root, NEW, "new"))
    info = collection_info(db, "c")
    assert info["encoder_spec"]["dim"] == 32 and info["version"] == 1 and info["switch"] is None
    # Later runs are incremental on the new version.
    (root / "doc00.md").write_text("# Contract 0\n\nA new clause.\n")
    again = index_into(db, root, options=NEW)
    assert (again.changed, again.unchanged) == (1, 12) and Database(db).versions("c").active == 1


def test_searches_during_a_switch_all_answer_old_until_the_swap_then_new(
    built: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, db = built
    old = answer(Retriever("c", db=db).search(QUERY, k=5))
    new = answer(Retriever("c", db=reference(tmp_path, root, NEW, "new")).search(QUERY, k=5))
    assert not same_answer(old, new)
    retriever = Retriever("c", db=db)  # opened before the switch, as a server holds one
    seen: list[tuple[bool, bool, list[tuple[str, float]]]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def search_all_along() -> None:
        while not stop.is_set():
            try:
                building = Database(db).versions("c").building is not None  # before it searches
                both = collection_info(db, "c")["switch"] is not None
                seen.append((building, both, answer(retriever.search(QUERY, k=5))))
            except Exception as exc:  # noqa: BLE001 - any failed search fails the test
                errors.append(exc)

    def searches_after(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(seen) < count and not errors and time.monotonic() < deadline:
            time.sleep(0.01)

    monkeypatch.setenv("DOCSEARCH_FAKE_SLEEP", "0.1")  # each embedding batch of the switch
    searcher = threading.Thread(target=search_all_along)
    searcher.start()
    try:
        searches_after(1)
        report = index_into(db, root, options=NEW, commit_chunks=4, switch=True)
        searches_after(len(seen) + 3)
    finally:
        stop.set()
        searcher.join()
    assert not errors, repr(errors[0])
    assert not report.failed and Database(db).versions("c").active == 1
    answers = [got for _, _, got in seen]
    kinds = [
        "old" if same_answer(a, old) else "new" if same_answer(a, new) else "?" for a in answers
    ]
    assert "?" not in kinds
    swap = kinds.index("new")
    assert set(kinds[:swap]) == {"old"} and set(kinds[swap:]) == {"new"}
    assert kinds[-3:] == ["new"] * 3
    # Searches kept answering from the old version while the new one was being built, and
    # `collections info` showed both versions meanwhile.
    assert any(
        building and kind == "old" for (building, _, _), kind in zip(seen, kinds, strict=True)
    )
    assert any(both for _, both, _ in seen)
    assert retriever.encoder().dim == 32


def test_a_search_the_swap_interrupts_is_answered_by_the_new_version(
    built: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap drops the old tables under a search reading them: it runs again, on the new."""
    root, db = built
    new = answer(Retriever("c", db=reference(tmp_path, root, NEW, "new")).search(QUERY, k=5))
    retriever = Retriever("c", db=db)
    old_store, read = retriever.store, retriever.store.search_text

    def switch_then_read(*args: Any, **kwargs: Any) -> Any:
        index_into(db, root, options=NEW, switch=True)  # between this search's reads
        return read(*args, **kwargs)

    monkeypatch.setattr(old_store, "search_text", switch_then_read)
    assert same_answer(answer(retriever.search(QUERY, k=5)), new)
    assert Database(db).versions("c").active == 1


def test_an_unfinished_switch_resumes_on_a_run_that_names_no_encoder(
    built: tuple[Path, str],
) -> None:
    root, db = built
    interrupted_switch(db)
    assert Database(db).versions("c").building == 1
    assert collection_info(db, "c")["switch"]["encoder_spec"]["dim"] == 32
    assert answer(Retriever("c", db=db).search(QUERY, k=5))  # the old version still serves
    report = index_into(db, root, encoder=None)  # type: ignore[arg-type]
    assert report.new == 13
    assert Database(db).versions("c") == Versions(active=1, building=None)
    assert Store.open(db, "c").meta.encoder["dim"] == 32  # type: ignore[index]


def test_an_unfinished_switch_decides_what_other_runs_may_do(built: tuple[Path, str]) -> None:
    root, db = built
    interrupted_switch(db)
    with pytest.raises(UsageError, match="unfinished switch"):
        index_into(db, root, options=OLD)  # the serving encoder, named, without --switch
    with pytest.raises(EncoderMismatchError, match="add --switch"):
        index_into(db, root, options={"max_tokens": 12, "dim": 16})
    # --switch to a third encoder: the unfinished version goes, a new one is built and swapped.
    index_into(db, root, options={"max_tokens": 12, "dim": 16}, switch=True)
    assert Database(db).versions("c").active == 2 and not any(".v1__" in t for t in tables(db))
    assert Store.open(db, "c").meta.encoder["dim"] == 16  # type: ignore[index]


def test_switching_to_the_serving_encoder_cancels_an_unfinished_switch(
    built: tuple[Path, str],
) -> None:
    root, db = built
    interrupted_switch(db)
    report = index_into(db, root, options=OLD, switch=True)
    assert report.unchanged == 13
    assert Database(db).versions("c").building is None and not any(".v1" in t for t in tables(db))
    assert Store.open(db, "c").meta.encoder["dim"] == 64  # type: ignore[index]


def test_a_file_the_new_version_fails_to_read_holds_the_swap_back(
    built: tuple[Path, str],
) -> None:
    """Swapping would lose a file the serving version has: the switch waits for a run that
    reads it (or for the file to go)."""
    root, db = built
    (root / "big.md").write_text("# Big\n\n" + "a party delivers an item. " * 50_000)
    index_into(db, root, options=OLD)
    held = index_into(db, root, options=NEW, switch=True, max_file_mb=1)
    assert [p for p, _ in held.failed] == [str(root / "big.md")]
    assert any("switch waits" in why for _, why in held.warnings)
    assert Database(db).versions("c") == Versions(active=0, building=1)
    done = index_into(db, root, encoder=None)  # type: ignore[arg-type]
    assert done.new == 1 and not done.failed and Database(db).versions("c").active == 1


def test_dropping_a_switched_collection_drops_every_version(built: tuple[Path, str]) -> None:
    from docsearch.store.database import Database

    root, db = built
    index_into(db, root, options=NEW, switch=True)
    interrupted_switch(db, {"max_tokens": 12, "dim": 16})
    assert {"c.v1__chunks", "c.v2__chunks", "c__versions"} <= tables(db)
    Database(db).drop_collection("c")
    assert tables(db) == set() and Database(db).list_collections() == []
    index_into(db, root, options=OLD)  # a new collection of that name starts at version 0
    assert Database(db).versions("c") == Versions() and "c__chunks" in tables(db)


# ---------------------------------------------------------------------------------------------
# Real processes, killed


def unchanged(stderr: str) -> int:
    found = re.search(r"(\d+) unchanged", stderr)
    assert found, stderr
    return int(found.group(1))


@pytest.mark.parametrize(
    "rerun", ["same command", pytest.param("plain index", marks=pytest.mark.slow)]
)
def test_a_switch_killed_half_way_leaves_the_old_version_serving_and_resumes(
    built: tuple[Path, str], tmp_path: Path, rerun: str
) -> None:
    root, db = built
    old = answer(Retriever("c", db=db).search(QUERY, k=5))
    killed = run_cli(
        *SWITCH_ARGS, str(root), "--db", db, env={**ENV, "DOCSEARCH_FAKE_KILL_AFTER": "4"}
    )
    assert killed.returncode == -signal.SIGKILL
    assert Database(db).versions("c").active == 0
    shown = json.loads(run_cli("collections", "info", "c", "--db", db).stdout)
    assert shown["encoder_spec"]["dim"] == 64 and shown["files"] == 13
    built_before_kill = shown["switch"]["files"]
    assert shown["switch"]["encoder_spec"]["dim"] == 32 and 0 < built_before_kill < 13
    searched = run_cli("search", QUERY, "--collection", "c", "--db", db, "-k", "5", "--json")
    assert searched.returncode == 0, searched.stderr
    cli = [(h["doc_id"], h["scores"]["dense"]["score"]) for h in json.loads(searched.stdout)]
    assert same_answer(cli, old)

    args = SWITCH_ARGS if rerun == "same command" else ["index", "--collection", "c"]
    finished = run_cli(*args, str(root), "--db", db, env=ENV)
    assert finished.returncode == 0, finished.stderr
    assert unchanged(finished.stderr) == built_before_kill  # resumed, not rebuilt
    assert "switched; searches now use hashing (dim=32" in finished.stderr
    assert snapshot(db) == snapshot(reference(tmp_path, root, NEW, "new"))
    assert not any(t.startswith("c__") and t != "c__versions" for t in tables(db))


@pytest.mark.slow
def test_a_kill_while_the_old_tables_are_dropped_leaves_the_new_version_serving(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    root, db = built
    env = {**ENV, "DOCSEARCH_TEST_KILL_AFTER_DROP": "c__chunks"}  # the old version's first table
    killed = run_hooked(*SWITCH_ARGS, str(root), "--db", db, env=env)
    assert killed.returncode == -signal.SIGKILL
    assert Database(db).versions("c").active == 1 and "c__files" in tables(db)
    new = answer(Retriever("c", db=reference(tmp_path, root, NEW, "new")).search(QUERY, k=5))
    assert same_answer(answer(Retriever("c", db=db).search(QUERY, k=5)), new)
    again = run_cli("index", "--collection", "c", str(root), "--db", db, env=ENV)
    assert again.returncode == 0, again.stderr
    assert unchanged(again.stderr) == 13
    assert tables(db) == {"c.v1__chunks", "c.v1__docs", "c.v1__files", "c__versions"}


@pytest.mark.slow
def test_the_api_server_answers_old_through_a_killed_switch_and_new_after_its_rerun(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """The server holds the collection open: a switch killed half-way changes none of its
    answers; the rerun that finishes it moves them, every search succeeding meanwhile."""
    from tests.app.server import Client, served

    root, db = built
    old = answer(Retriever("c", db=db).search(QUERY, k=5))
    new = answer(Retriever("c", db=reference(tmp_path, root, NEW, "new")).search(QUERY, k=5))
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(tmp_path / "keys.json")}
    env["DOCSEARCH_HOME"] = str(tmp_path / "home")
    log = tmp_path / "serve.log"
    with served(env, log=log) as server:

        def search(client: Client) -> tuple[int, list[tuple[str, float]]]:
            reply = client.post("/api/v1/collections/c/search", {"query": QUERY, "k": 5})
            if reply.status != 200:
                return reply.status, []
            hits = reply.json()["hits"]
            return 200, [(h["doc_id"], h["scores"]["dense"]["score"]) for h in hits]

        status, first = search(server)
        assert status == 200 and same_answer(first, old)
        killed = run_cli(
            *SWITCH_ARGS, str(root), "--db", db, env={**ENV, "DOCSEARCH_FAKE_KILL_AFTER": "4"}
        )
        assert killed.returncode == -signal.SIGKILL
        status, after_kill = search(server)
        assert status == 200 and same_answer(after_kill, old)
        info = server.get("/api/v1/collections/c").json()
        assert info["encoder_spec"]["dim"] == 64 and info["switch"]["encoder_spec"]["dim"] == 32

        seen: list[tuple[int, list[tuple[str, float]]]] = []
        stop = threading.Event()

        def search_all_along() -> None:
            client = Client(server.host, server.port)
            while not stop.is_set():
                seen.append(search(client))

        searcher = threading.Thread(target=search_all_along)
        searcher.start()
        try:
            slowed = {**ENV, "DOCSEARCH_FAKE_SLEEP": "0.1"}
            finished = run_cli(*SWITCH_ARGS, str(root), "--db", db, env=slowed)
            count = len(seen)
            deadline = time.monotonic() + 60
            while len(seen) < count + 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            searcher.join()
    assert finished.returncode == 0, finished.stderr
    assert [status for status, _ in seen] == [200] * len(seen)
    kinds = [
        "old" if same_answer(a, old) else "new" if same_answer(a, new) else "?" for _, a in seen
    ]
    swap = kinds.index("new")
    assert set(kinds[:swap]) <= {"old"} and set(kinds[swap:]) == {"new"}
    assert kinds[-3:] == ["new"] * 3
    assert "Traceback" not in log.read_text()
