"""Huge files in bounded memory: a file larger than a commit group is written a group at a time
and committed once, yet indexes as it would in one piece; text is decoded a block at a time;
long documents are spooled to disk and chunked a section at a time; large DOCX files are read
a paragraph at a time; extraction runs ahead of the encoder."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from docsearch.indexer import chunk as chunk_module
from docsearch.indexer import docx_stream
from docsearch.indexer.extract import Limits, decode_stream, decode_text, extract
from docsearch.indexer.prefetch import prefetched
from docsearch.store.documents import DocumentBuilder, document_rows, whole_text
from docsearch.store.reads import Store
from docsearch.store.writes import Writer
from tests.helpers import documents, index_into, make_docx
from tests.indexer.test_crash import snapshot
from tests.scale.equality import assert_same_search

OPTIONS = {"max_tokens": 64}
QUERIES = ["depot 17 within", "supplier ships lot", "Schedule 3 deliveries", "llamas"]


def big_text(paragraphs: int) -> str:
    """A schedule of numbered sections with distinct paragraphs (a few MB at 20,000)."""
    parts = ["# Supply schedule"]
    for i in range(paragraphs):
        if i % 500 == 0:
            parts.append(f"## Schedule {i // 500} deliveries")
        parts.append(
            f"Paragraph {i}: the supplier ships lot {i * 7} to depot {i % 13} within {i % 29} "
            f"days, and invoices item {i} at {i % 97} dollars per unit. Late lots pay {i % 5}%."
        )
    return "\n\n".join(parts) + "\n"


def fragments(db: str) -> int:
    return len(Store.open(db, "c").dataset("chunks").get_fragments())


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stream") / "docs"
    root.mkdir()
    (root / "big.md").write_text(big_text(20_000))  # about 3 MB, 6,000 chunks
    (root / "small.md").write_text("# Small\n\nNo llamas may be shipped to depot 17.\n")
    return root


def test_a_file_larger_than_a_group_is_written_in_fragments_and_indexes_as_one_piece(
    big_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, streamed = str(tmp_path / "whole"), str(tmp_path / "streamed")
    assert not index_into(whole, big_folder, options=OPTIONS, commit_chunks=10**7).failed
    written: list[int] = []  # chunk rows per fragment write
    commits: list[tuple[list[str], int]] = []  # (paths, fragments) per commit with files
    real_write, real_commit = Writer.write_fragments, Writer.commit

    def write(writer: Writer, rows: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        written.append(len(rows))
        return real_write(writer, rows, *args, **kwargs)

    def commit(writer: Writer, updates: Any, *args: Any, **kwargs: Any) -> Any:
        if updates:
            commits.append(([u.record.path for u in updates], len(kwargs.get("fragments", ()))))
        return real_commit(writer, updates, *args, **kwargs)

    monkeypatch.setattr(Writer, "write_fragments", write)
    monkeypatch.setattr(Writer, "commit", commit)
    report = index_into(streamed, big_folder, options=OPTIONS, commit_chunks=500)
    monkeypatch.undo()
    assert not report.failed and report.chunks_written > 5_000
    big = str(big_folder / "big.md")
    # Written a group of 500 chunks at a time, then its document row; committed once, alone.
    assert len(written) > 10 and max(written) == 500 and written[-1] == 0
    assert [paths for paths, _ in commits] == [[big], [str(big_folder / "small.md")]]
    assert commits[0][1] >= len(written)
    assert snapshot(streamed) == snapshot(whole)  # chunks, vectors, records, documents
    assert_same_search(whole, streamed, score_atol=1e-6)
    assert documents(streamed)[big]["n_chunks"] == report.chunks_written - 1


def test_documents_over_a_section_are_chunked_a_section_at_a_time_with_nothing_lost(
    big_folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Sections of 200,000 characters (the default is 4 million): every chunk within budget,
    at its own offsets in the text, pages and heading paths right across the seams."""
    from docsearch.indexer.chunk import ChunkerSettings
    from docsearch.indexer.collection import make_chunker

    text = big_text(6_000).replace("## Schedule 4", "\f## Schedule 4")  # a second page
    path = tmp_path / "two-pages.txt"
    path.write_text(text)
    doc = extract(path)
    chunker = make_chunker(None, ChunkerSettings(max_tokens=64))
    whole = chunker.chunk(doc)
    monkeypatch.setattr(chunk_module, "SECTION_CHARS", 200_000)
    chunks = chunker.chunk(doc)
    full = doc.text
    assert len(full) > 4 * 200_000
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert all(full[c.char_start : c.char_end] == c.text for c in chunks)
    assert all(c.n_tokens <= 64 for c in chunks)
    # Every word is in a chunk; only the chunks at the few seams may differ.
    assert " ".join(c.text for c in chunks).split() == full.split()
    spans = {(c.char_start, c.char_end) for c in chunks}
    assert len(spans ^ {(c.char_start, c.char_end) for c in whole}) < 10 * len(full) // 200_000
    second = full.index("## Schedule 4")
    assert {c.page_start for c in chunks if c.char_start >= second} == {2}
    assert {c.page_end for c in chunks if c.char_end < second} == {1}
    headings = chunk_module.HeadingIndex(full)  # of the whole text: carried across seams
    assert all(c.heading_path == headings.path_at(c.char_start) for c in chunks)
    assert chunks[-1].heading_path == "Supply schedule > Schedule 11 deliveries"


def test_a_long_document_is_spooled_to_disk_and_reads_back_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("\n\n" + big_text(8_000).replace("Schedule 5", "\fSchedule 5"))
    in_memory = extract(path)
    spooled = extract(path, spool=str(tmp_path))
    assert spooled.spool and not spooled.pages
    assert len(list(spooled.iter_pages())) > 2  # pieces, not pages
    loaded = spooled.loaded()
    assert loaded.pages == in_memory.pages and loaded.title == in_memory.title == "Supply schedule"
    assert [p.number for p in loaded.pages] == [1, 2]
    spool = Path(spooled.spool)
    assert spool.parent == tmp_path and spool.exists()
    spooled.discard()
    assert not spool.exists()


@pytest.mark.parametrize(
    "data",
    [
        "line one\r\nline two\rline three\r\n" * 5,
        "\ufeffcafé, naïve, 日本語 and € signs\n" * 4,
        "a\x00 stray NUL in a line long enough to be text\r\n" * 3,
    ],
)
def test_text_decoded_a_block_at_a_time_equals_the_whole_decoded(
    data: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = data.encode()
    expected, warnings = decode_text(raw, []), []  # one block
    for size in (1, 2, 3, 7):  # every split of CRLF pairs and multi-byte characters
        blocks = lambda size=size: (raw[i : i + size] for i in range(0, len(raw), size))  # noqa: E731
        got: list[str] = []
        assert "".join(decode_stream(blocks, got)) == expected
        warnings.append(got)
    assert "\r" not in expected and not expected.startswith("\ufeff")
    assert all(w == warnings[0] for w in warnings)


def test_a_latin1_byte_deep_in_a_big_file_is_judged_with_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "late.txt"
    path.write_bytes(b"fine text " * 1_000_000 + b"caf\xe9")  # past two 4 MB blocks
    doc = extract(path, limits=Limits(max_text_mb=100, max_file_mb=100))
    assert doc.text.endswith("fine text café") and doc.encoding == "cp1252"


def test_docs_rows_built_a_group_at_a_time_equal_those_built_at_once() -> None:
    rows = [
        {
            "doc_id": "d", "path": "/p", "title": "t", "text": f"chunk {i}", "ordinal": i,
            "page_start": 1 + i // 10, "page_end": 1 + i // 10, "char_start": 10 * i,
            "char_end": 10 * i + 7, "vector": [((i * 7919) % 101) / 101.0, 1.0, -0.5],
        }
        for i in range(95)
    ]  # fmt: skip
    builder = DocumentBuilder()
    for start in range(0, len(rows), 8):
        builder.add(rows[start : start + 8])
    assert builder.row() == document_rows(rows)[0]  # exactly: the same sums in the same order
    capped = DocumentBuilder(max_chars=500)
    capped.add(rows)
    text = capped.row()["text"]
    assert text == whole_text(rows, max_chars=500) == whole_text(rows[:50])  # ends at 497
    assert capped.row()["n_chunks"] == 95 and capped.row()["page_end"] == 10


def test_a_large_docx_read_a_paragraph_at_a_time_gives_python_docx_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docx

    path = tmp_path / "tables.docx"
    make_docx(path, [(1, "Master agreement"), (0, "Clause one.\tTabbed."), (2, "Fees")])
    document = docx.Document(str(path))
    document.core_properties.title = "The agreement"
    table = document.add_table(rows=3, cols=3)
    for r in range(3):
        for c in range(3):
            table.cell(r, c).text = f"r{r}c{c}"
    table.cell(0, 0).merge(table.cell(0, 1))  # across
    table.cell(1, 2).merge(table.cell(2, 2))  # down
    document.add_paragraph("After the table, a line\nbreak.")
    document.save(str(path))
    expected = extract(path)
    monkeypatch.setattr(docx_stream, "STREAM_BODY_BYTES", 0)
    streamed = extract(path)
    assert streamed.text == expected.text
    assert streamed.title == expected.title == "The agreement"
    assert "r0c0\nr0c1 | r0c0\nr0c1 | r0c2" in expected.text  # merged cells, as python-docx


def test_extraction_runs_ahead_of_a_slow_consumer_and_stops_when_left() -> None:
    started: dict[int, float] = {}

    def work(i: int) -> int:
        started[i] = time.monotonic()
        return i

    consumed: list[tuple[int, float]] = []
    with prefetched(work, range(5), ahead=2) as results:
        for i in results:
            consumed.append((i, time.monotonic()))
            time.sleep(0.1)  # the encoder
    assert [i for i, _ in consumed] == list(range(5))
    assert started[1] < consumed[0][1] + 0.05 and started[2] < consumed[1][1]  # ahead

    def failing(i: int) -> int:
        if i == 1:
            raise ValueError("bad file")
        return i

    with pytest.raises(ValueError, match="bad file"), prefetched(failing, range(3), 1) as it:
        list(it)
    with prefetched(work, range(1000), ahead=1) as it:
        next(it)
    assert not any(t.name == "docsearch-extract" for t in threading.enumerate())


def test_a_big_file_killed_while_streamed_is_untouched_then_finished(
    big_folder: Path, tmp_path: Path
) -> None:
    """SIGKILL while the big file's groups are being written: nothing of it is visible (it
    was not committed), and the rerun builds what a clean run builds."""
    import signal

    from tests.helpers import run_cli

    clean, db = str(tmp_path / "clean"), str(tmp_path / "db")
    args = ["index", str(big_folder), "--collection", "c", "--encoder", "hashing",
            "-o", "max_tokens=64"]  # fmt: skip
    env = {"DOCSEARCH_COMMIT_CHUNKS": "500", "DOCSEARCH_TOKEN_BUDGET": "4096"}
    assert run_cli(*args, "--db", clean, env=env).returncode == 0
    killed = run_cli(*args, "--db", db, env={**env, "DOCSEARCH_FAKE_KILL_AFTER": "40"})
    assert killed.returncode == -signal.SIGKILL
    store = Store.open(db, "c")  # the big file comes first: nothing is committed yet
    assert store.count_chunks() == 0 and fragments(db) == 0 and store.file_records() == {}
    assert run_cli(*args, "--db", db, env=env).returncode == 0
    assert snapshot(db) == snapshot(clean)


def test_spool_folders_of_killed_runs_are_swept_by_the_next_one(tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves its spool folder (no exit handler runs); the next run
    that spools removes it, and leaves those of live processes alone."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    from docsearch.indexer import extract_process

    dead = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    root = Path(tempfile.gettempdir())
    left = root / f"{extract_process.SPOOL_PREFIX}{dead.pid}-abc"
    live = root / f"{extract_process.SPOOL_PREFIX}{os.getppid()}-abc"
    for folder in (left, live):
        folder.mkdir()
        (folder / "x.pages").write_bytes(b"spooled text")
    try:
        extract_process._sweep_spool_folders()
        assert not left.exists() and live.exists()
    finally:
        for folder in (left, live):
            if folder.exists():
                (folder / "x.pages").unlink()
                folder.rmdir()
