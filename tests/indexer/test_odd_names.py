"""File names are bytes to the OS: names that are not UTF-8, with a newline, a tab, an ESC, or
255 bytes long are indexed, found, shown escaped (CLI, JSON, API) and followed through renames
and deletes, by a run and by `watch`. Real files with those names, the real store."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docsearch.paths import real, stored
from tests.helpers import index_into, run_cli

# name on disk -> a word only that file holds
ODD = {
    b"good-caf\xe9-latin1-name.txt": "quetzal",
    b"line\nbreak.txt": "pangolin",
    b"tab\there.txt": "axolotl",
    b"esc\x1b[31mred.txt": "narwhal",
    b"l" * 251 + b".txt": "okapi",  # 255 bytes: the longest name Linux allows
}


def write(folder: Path, name: bytes, word: str) -> str:
    """Write a file named with raw bytes; its path as the index stores and shows it."""
    path = os.path.join(os.fsencode(folder), name)
    with open(path, "wb") as handle:
        handle.write(f"A note about the {word}, and nothing else.\n".encode())
    return stored(os.fsdecode(path))


@pytest.fixture
def odd_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "odd"
    folder.mkdir()
    shown = {word: write(folder, name, word) for name, word in ODD.items()}
    (folder / "plain.txt").write_text("A plain note about the heron.\n")
    return folder, shown


def test_stored_names_are_one_line_utf8_and_map_back_to_the_bytes() -> None:
    for name in [*ODD, b"back\\slash\\x41.txt", b"c1-\xc2\x85.txt", b"plain.txt"]:
        decoded = os.fsdecode(name)
        shown = stored(decoded)
        shown.encode("utf-8")  # valid UTF-8: Lance can store it
        assert shown.isprintable()
        assert os.fsencode(real(shown)) == name
    assert stored("/a/plain name.txt") == "/a/plain name.txt"  # most names are kept as they are
    assert stored(os.fsdecode(b"caf\xe9")) == "caf\\xe9"
    assert stored("a\nb") == "a\\nb" and stored("a\\nb") == "a\\\\nb"  # escapes never collide


def _search(db: str, query: str, *args: str) -> Iterator[str]:
    from docsearch.app.cli import app

    result = CliRunner().invoke(app, ["search", query, "--db", db, "-c", "c", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_odd_names_index_with_exit_0_and_are_found_and_shown_escaped(
    odd_folder: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    folder, shown = odd_folder
    db = str(tmp_path / "db")
    result = run_cli("index", str(folder), "-c", "c", "--encoder", "hashing", "--db", db)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for word, path in shown.items():
        hits = json.loads(_search(db, word, "--json", "--mode", "lexical"))
        assert [hit["path"] for hit in hits][:1] == [path], (word, hits)
        text = _search(db, word, "--mode", "lexical")
        assert path.rsplit("/", 1)[-1] in text  # the escaped name, as stored
        assert not any(c in text for c in "\t\x1b\udce9")  # nothing raw reaches the terminal
        assert all(line.isprintable() for line in text.splitlines())


def test_the_api_shows_escaped_names_and_serves_the_files_they_name(
    odd_folder: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    from urllib.parse import urlencode

    from tests.app.server import served

    folder, shown = odd_folder
    db = str(tmp_path / "db")
    index_into(db, folder)
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_HOME": str(tmp_path / "home")}
    with served(env, "--root", str(folder), log=tmp_path / "serve.log") as client:
        for word, path in shown.items():
            reply = client.post("/api/v1/collections/c/search", {"query": word, "k": 1})
            assert reply.status == 200, reply.body[:300]
            assert b"\\u001b" not in reply.body  # an ESC would reach the client raw
            hit = reply.json()["hits"][0]
            assert hit["path"] == path
            query = urlencode({"collection": "c", "path": path})
            original = client.get(f"/docsearch/file?{query}")
            assert original.status == 200, original.body[:300]
            assert word.encode() in original.body
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_renames_and_deletes_of_odd_names_are_picked_up_by_the_next_run(
    odd_folder: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    from docsearch.store.reads import Store

    folder, shown = odd_folder
    db = str(tmp_path / "db")
    assert index_into(db, folder).exit_code == 0
    base = os.fsencode(folder)
    renamed = os.path.join(base, b"renamed-\xff\n\x1b.txt")
    os.rename(os.path.join(base, b"good-caf\xe9-latin1-name.txt"), renamed)
    os.unlink(os.path.join(base, b"esc\x1b[31mred.txt"))
    report = index_into(db, folder)
    assert (report.renamed, report.deleted, len(report.failed)) == (1, 1, 0)
    records = Store.open(db, "c").file_records()
    assert stored(os.fsdecode(renamed)) in records
    assert shown["quetzal"] not in records and shown["narwhal"] not in records
    assert len(records) == len(ODD) + 1 - 1


def test_watch_follows_renames_and_deletes_of_odd_names(
    odd_folder: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    from docsearch.config import Settings
    from docsearch.indexer.watch import watch
    from docsearch.store.reads import Store

    folder, _ = odd_folder
    db = str(tmp_path / "db")
    base = os.fsencode(folder)

    def on_disk() -> set[str]:
        return {stored(os.fsdecode(os.path.join(base, name))) for name in os.listdir(base)}

    def converges() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if set(Store.open(db, "c").file_records()) == on_disk():
                    return
            except Exception:  # noqa: BLE001 - not created yet
                pass
            time.sleep(0.2)
        raise AssertionError("the index did not follow the folder")

    stop = threading.Event()
    kwargs = {"settings": Settings(db=db), "collection": "c", "encoder": "hashing", "quiet": 0.2}
    thread = threading.Thread(target=watch, args=(folder,), kwargs={**kwargs, "stop": stop})
    thread.start()
    try:
        converges()
        os.rename(os.path.join(base, b"tab\there.txt"), os.path.join(base, b"moved\t\xfe.txt"))
        os.unlink(os.path.join(base, b"line\nbreak.txt"))
        converges()
        assert len(on_disk()) == len(ODD)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_the_ui_shows_escaped_names_and_previews_the_files_they_name(
    odd_folder: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    import html

    from docsearch.app.web.actions import Filters, Picked, UIContext, results_html
    from docsearch.config import Settings

    folder, shown = odd_folder
    db = str(tmp_path / "db")
    index_into(db, folder)
    ui = UIContext(db, Settings(db=db), "c", folder)
    for word, path in shown.items():
        found = ui.search(word, "c", "lexical", 1, Filters())
        assert [hit.path for hit in found.hits] == [path]
        page = results_html(found)
        assert html.escape(path.rsplit("/", 1)[-1]) in page
        assert not any(c in page for c in "\t\x1b\udce9")
        preview = ui.preview(Picked(found.hits[0], "c", word))  # opens the file by its bytes
        assert word in preview.body
