"""Hostile files: each fails or is skipped alone, with its reason, and the good files are indexed.

Malformed DOCX XML, zip bombs, pathologically nested HTML, files over the size and time limits,
NUL bytes, third-party warnings, and paths that are not regular files (symlinks, loops, FIFOs,
devices, unreadable folders). Real files, the real LanceDB store, the hashing fake encoder.
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
import time
import zipfile
from pathlib import Path

import pytest

from docsearch.errors import ExtractionError
from docsearch.indexer.extract import Limits, extract
from docsearch.indexer.pipeline import IndexReport
from docsearch.store.reads import Store
from tests.helpers import index_into, make_docx, make_pdf, run_cli, running_as_root


def index(root: Path, db: str, **limits: float) -> IndexReport:
    """Index `root` with the hashing encoder; `limits`: max_file_mb, max_text_mb, extract_seconds."""
    return index_into(db, root, options={"max_tokens": 40}, **limits)


def indexed_names(db: str) -> set[str]:
    return {Path(row["path"]).name for row in Store.open(db, "c").rows("ordinal >= 0", ["path"])}


def failed(report: IndexReport) -> dict[str, str]:
    return {Path(path).name: reason for path, reason in report.failed}


def warned(report: IndexReport) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, warning in report.warnings:
        out.setdefault(Path(path).name, []).append(warning)
    return out


def good_files(root: Path) -> set[str]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a-good.md").write_text("# Terms\n\nThe licensee shall pay royalties quarterly.\n")
    (root / "z-good.txt").write_text("Warranty claims must be made within ninety days.\n")
    make_docx(root / "m-good.docx", [(1, "Supply"), (0, "Deliveries are due on Mondays.")])
    return {"a-good.md", "z-good.txt", "m-good.docx"}


def rewrite_docx(source: Path, target: Path, replace: dict[str, bytes]) -> Path:
    """A copy of the DOCX `source` with some members' bytes replaced (or added)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info.filename, replace.pop(info.filename, old.read(info.filename)))
        for name, data in replace.items():
            new.writestr(name, data)
    return target


def nested_list_html(depth: int) -> str:
    """<ul><li>item 0<ul><li>item 1 ... nested `depth` deep, every level with its own text."""
    opening = "".join(f"<ul><li>item{i} " for i in range(depth))
    return f"<html><body>{opening}{'</li></ul>' * depth}</body></html>"


# ---------------------------------------------------------------------------------------------
# A. One bad file never stops the run


def test_malformed_docx_xml_fails_alone_and_the_cli_exits_3(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    rewrite_docx(
        root / "m-good.docx",
        root / "b-broken.docx",
        {"word/document.xml": b"<?xml version='1.0'?><w:document><w:body><w:p>unclosed"},
    )
    db = str(tmp_path / "db")
    result = run_cli("index", str(root), "--collection", "c", "--encoder", "hashing", "--db", db)
    assert result.returncode == 3, result.stderr
    line = next(x for x in result.stderr.splitlines() if x.startswith("failed:"))
    assert str((root / "b-broken.docx").absolute()) in line
    assert "corrupt DOCX" in line and "XMLSyntaxError" in line
    assert "Traceback" not in result.stderr
    assert indexed_names(db) == good


# ---------------------------------------------------------------------------------------------
# B. Per-file budgets: unpacked size, time


def test_zip_bomb_docx_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    zeros = b"\0" * 5_000_000  # deflates to about 5 KB
    bomb = rewrite_docx(root / "m-good.docx", root / "bomb.docx", {"word/media/x.bin": zeros})
    assert bomb.stat().st_size < 100_000
    report = index(root, str(tmp_path / "db"), max_file_mb=1)
    assert list(failed(report)) == ["bomb.docx"]
    assert re.fullmatch(  # python-docx's own template unpacks to 0.8 MB
        r"its unpacked content is 5\.8 MB, over the 1 MB limit; "
        r"set DOCSEARCH_MAX_FILE_MB higher to index it",
        failed(report)["bomb.docx"],
    )
    assert indexed_names(str(tmp_path / "db")) == good


def declare_size(data: bytearray, member: str, size: int) -> None:
    """Patch the uncompressed size a zip declares for `member` (local header and directory)."""
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        local = archive.getinfo(member).header_offset
    struct.pack_into("<I", data, local + 22, size)
    entry = data.index(b"PK\x01\x02")  # the central directory's entries, in order
    while not data[entry + 46 :].startswith(member.encode()):
        entry = data.index(b"PK\x01\x02", entry + 4)
    struct.pack_into("<I", data, entry + 24, size)


def test_zip_member_lying_about_its_size_is_not_inflated_past_it(tmp_path: Path) -> None:
    """The unpacked-size check trusts the zip directory; a part declaring less than it holds is
    cut at its declared size and fails its CRC check instead of inflating further."""
    source = make_docx(tmp_path / "d.docx", [(0, "Body.")])
    document = zipfile.ZipFile(source).read("word/document.xml")
    padded = document.replace(b"Body.", b"Body." + b" " * 20_000_000)
    built = rewrite_docx(source, tmp_path / "padded.docx", {"word/document.xml": padded})
    data = bytearray(built.read_bytes())
    declare_size(data, "word/document.xml", len(document))
    lying = tmp_path / "lying.docx"
    lying.write_bytes(bytes(data))
    with pytest.raises(ExtractionError, match="corrupt DOCX: BadZipFile: Bad CRC-32"):
        extract(lying, limits=Limits(max_file_mb=1))


@pytest.mark.timeout(20)  # before the fix: tens of seconds, quadratic in the depth
def test_deeply_nested_html_keeps_every_level_in_linear_time(tmp_path: Path) -> None:
    path = tmp_path / "nested.html"
    path.write_text(nested_list_html(20_000))
    started = time.perf_counter()
    doc = extract(path)
    assert doc.text.split("\n\n") == [f"item{i}" for i in range(20_000)]
    assert time.perf_counter() - started < 15


def test_container_text_around_nested_blocks_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "list.html"
    path.write_text(
        "<html><head><title>T</title></head><body><div>Intro <b>bold</b></div>"
        "<ul><li>Item one<ul><li>Sub item</li></ul>tail</li></ul><!-- hidden --></body></html>"
    )
    assert extract(path).text == "Intro bold\n\nItem one\n\nSub item\n\ntail"


def test_a_file_over_the_time_budget_fails_alone(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    (root / "b-slow.html").write_text(nested_list_html(300_000))  # parses for many seconds
    started = time.perf_counter()
    report = index(root, str(tmp_path / "db"), extract_seconds=2)
    assert failed(report) == {
        "b-slow.html": "extracting took longer than 2 s; "
        "set DOCSEARCH_EXTRACT_SECONDS higher to index it"
    }
    assert indexed_names(str(tmp_path / "db")) == good  # m-good and z-good came after it
    assert time.perf_counter() - started < 30


def test_a_killed_extraction_process_fails_only_its_file(tmp_path: Path) -> None:
    """The extraction child dying (as under the OOM killer) fails the file it was reading."""
    import signal
    import threading

    from docsearch.indexer import extract_process

    root = tmp_path / "docs"
    good = good_files(root)
    (root / "0-slow.html").write_text(nested_list_html(300_000))  # first, for many seconds
    process = extract_process._shared_process()
    process.close()  # the run below starts a fresh child

    def kill_the_child_while_it_reads_the_slow_file() -> None:
        while process._child is None:
            time.sleep(0.01)
        time.sleep(0.5)
        os.kill(process._child.pid, signal.SIGKILL)

    threading.Thread(target=kill_the_child_while_it_reads_the_slow_file, daemon=True).start()
    report = index(root, str(tmp_path / "db"), extract_seconds=60)
    assert failed(report) == {
        "0-slow.html": "the extraction process was killed by SIGKILL (out of memory?)"
    }
    assert indexed_names(str(tmp_path / "db")) == good


# ---------------------------------------------------------------------------------------------
# D. Size limits on the file and on its text


def test_files_and_texts_over_the_size_limits_are_refused_with_the_setting_to_raise(
    tmp_path: Path,
) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    (root / "big.txt").write_text("word " * 4_000)  # 20,000 bytes
    make_docx(root / "wordy.docx", [(0, "clause " * 3_000)])  # a small file, 21,000 characters
    make_pdf(root / "wide.pdf", ["\n".join(["y" * 80] * 50)] * 4)  # about 4,000 characters a page
    report = index(root, str(tmp_path / "db"), max_text_mb=0.015)
    reasons = failed(report)
    assert reasons["big.txt"] == (
        "the file is 20,000 bytes, over the 0.015 MB text limit; "
        "set DOCSEARCH_MAX_TEXT_MB higher to index it"
    )
    assert reasons["wordy.docx"].startswith("its text is 20,999 characters, over the 0.015 MB")
    assert reasons["wide.pdf"].startswith("the text of pages 1-4 is 16,")
    assert set(reasons) == {"big.txt", "wordy.docx", "wide.pdf"}
    assert indexed_names(str(tmp_path / "db")) == good
    report = index(root, str(tmp_path / "db2"), max_file_mb=0.012)
    assert failed(report)["big.txt"].endswith("set DOCSEARCH_MAX_FILE_MB higher to index it")
    assert "m-good.docx" in failed(report)  # a DOCX of ~36 KB


def test_the_cli_reads_the_limit_from_the_environment(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    (root / "big.md").write_text("# Big\n\n" + "term " * 10_000)
    db = str(tmp_path / "db")
    result = run_cli(
        "index", str(root), "--collection", "c", "--encoder", "hashing", "--db", db,
        env={"DOCSEARCH_MAX_TEXT_MB": "0.02"},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert (
        f"failed: {(root / 'big.md').absolute()}: the file is 50,007 bytes, over the 0.02 MB "
        "text limit; set DOCSEARCH_MAX_TEXT_MB higher to index it"
    ) in result.stderr
    assert indexed_names(db) == good


# ---------------------------------------------------------------------------------------------
# C. Skipped paths, NUL bytes, third-party warnings


def test_paths_that_are_not_regular_files_are_skipped_with_a_reason(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    (root / "broken.md").symlink_to(root / "missing.md")
    (root / "loop.md").symlink_to(root / "loop.md")
    os.mkfifo(root / "x.txt")  # opening it would block the run until a writer came
    (root / "sub").mkdir()
    (root / "sub" / "inner.md").write_text("# Inner\n\nIndexed once, not through the link.\n")
    (root / "linked").symlink_to(root / "sub")
    (root / "to-fifo.txt").symlink_to(root / "x.txt")
    expected = {
        "broken.md": f"skipped: broken symlink (its target {root / 'missing.md'} does not exist)",
        "loop.md": "skipped: symlink loop",
        "x.txt": "skipped: a FIFO (named pipe), not a regular file (not read)",
        "linked": "skipped: symlink to a folder (not followed)",
        "to-fifo.txt": "skipped: symlink to a FIFO (named pipe), not a regular file (not read)",
    }
    try:  # a device (the null device's numbers): needs root or CAP_MKNOD
        os.mknod(root / "dev.txt", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        expected["dev.txt"] = "skipped: a character device, not a regular file (not read)"
    except PermissionError:
        pass
    report = index(root, str(tmp_path / "db"))
    assert warned(report) == {name: [why] for name, why in expected.items()}
    assert not report.failed
    assert indexed_names(str(tmp_path / "db")) == good | {"inner.md"}


@pytest.mark.timeout(60)
def test_the_cli_prints_each_skipped_path_and_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good_files(root)
    os.mkfifo(root / "x.txt")
    (root / "loop.md").symlink_to(root / "loop.md")
    result = run_cli(
        "index", str(root), "--collection", "c", "--encoder", "hashing",
        "--db", str(tmp_path / "db"), timeout=50,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"warning: {root / 'x.txt'}: skipped: a FIFO (named pipe)" in result.stderr
    assert f"warning: {root / 'loop.md'}: skipped: symlink loop" in result.stderr


def test_unreadable_folder_is_reported(tmp_path: Path) -> None:
    if running_as_root():
        pytest.skip("root lists folders whatever their mode; see the next test for the report")
    root = tmp_path / "docs"
    good = good_files(root)
    (root / "locked").mkdir()
    (root / "locked" / "secret.md").write_text("# Secret\n")
    (root / "locked").chmod(0)
    try:
        report = index(root, str(tmp_path / "db"))
    finally:
        (root / "locked").chmod(0o755)
    assert warned(report) == {"locked": ["skipped: folder not readable (permission denied)"]}
    assert indexed_names(str(tmp_path / "db")) == good


def test_folder_that_cannot_be_listed_is_reported_even_as_root(tmp_path: Path) -> None:
    """A folder whose path is longer than the system allows (PATH_MAX) cannot be listed by
    anyone, root included: it takes the same path through the walk as a permission error."""
    root = tmp_path / "docs"
    good = good_files(root)
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(20):  # 20 x 250 characters: past Linux's PATH_MAX of 4096
            os.mkdir("d" * 250, dir_fd=fd)
            inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    report = index(root, str(tmp_path / "db"))
    (path, reason), *_ = [(p, w) for p, w in report.warnings if "folder not readable" in w]
    assert reason == "skipped: folder not readable (File name too long)"
    assert path.startswith(str(root)) and len(path) > 4096
    assert indexed_names(str(tmp_path / "db")) == good


def test_nul_bytes_get_the_same_treatment_wherever_they_are(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    prose = "# Notes\n\n" + "The parties agree to arbitrate disputes in Geneva. " * 400  # 20 KB
    (root / "nul.md").write_text(prose[:100] + "\0\0" + prose[100:])
    (root / "nul-late.md").write_text(prose[:15_000] + "\0\0" + prose[15_000:])
    (root / "binary-late.txt").write_bytes(prose.encode()[:9000] + b"\0" * 9000)
    report = index(root, str(tmp_path / "db"))
    assert warned(report) == {
        "nul.md": ["removed 2 NUL bytes from the text"],
        "nul-late.md": ["removed 2 NUL bytes from the text"],
    }
    assert failed(report) == {
        "binary-late.txt": "binary content (NUL or control bytes) in a text file"
    }
    texts = [
        r["text"] for r in Store.open(str(tmp_path / "db"), "c").rows("ordinal >= 0", ["text"])
    ]
    assert texts and not any("\0" in t for t in texts)
    assert indexed_names(str(tmp_path / "db")) == {"nul.md", "nul-late.md"}


def pdf_with_shifted_offsets(path: Path) -> Path:
    """A PDF that pypdf reads after complaining (a comment line moves every xref offset)."""
    make_pdf(path, ["Indemnity is capped at the fees paid."])
    data = path.read_bytes()
    first_line = data.index(b"\n") + 1
    path.write_bytes(
        data[:first_line] + b"% this comment shifts every offset\n" + data[first_line:]
    )
    return path


def pdf_without_eof_marker(path: Path) -> Path:
    """A truncated PDF: pypdf warns that the EOF marker is missing, then fails."""
    make_pdf(path, ["Indemnity is capped at the fees paid."])
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"%%EOF")])
    return path


@pytest.mark.parametrize("seconds", [60.0, 0.0], ids=["child process", "in process"])
def test_third_party_warnings_name_their_file(tmp_path: Path, seconds: float, capfd) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "docs"
    good = good_files(root)
    pdf_with_shifted_offsets(root / "shifted.pdf")
    report = index(root, str(tmp_path / "db"), extract_seconds=seconds)
    warnings = warned(report)
    assert list(warnings) == ["shifted.pdf"]
    assert any("startxref" in w for w in warnings["shifted.pdf"])
    assert all(w.startswith("pypdf: ") for w in warnings["shifted.pdf"])
    assert indexed_names(str(tmp_path / "db")) == good | {"shifted.pdf"}
    assert "startxref" not in capfd.readouterr().err  # not printed without the file's name


def test_the_cli_prints_third_party_warnings_with_the_path(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    pdf = pdf_without_eof_marker(root / "no-eof.pdf")
    db = str(tmp_path / "db")
    result = run_cli("index", str(root), "--collection", "c", "--encoder", "hashing", "--db", db)
    assert result.returncode == 3, result.stderr
    lines = [x for x in result.stderr.splitlines() if "EOF marker" in x]
    assert lines == [f"warning: {pdf.absolute()}: pypdf: EOF marker not found"]
    assert f"failed: {pdf.absolute()}: corrupt PDF" in result.stderr
    assert indexed_names(db) == good


@pytest.mark.slow
def test_the_100k_nested_list_from_the_probe_finishes_within_the_default_budget(
    tmp_path: Path,
) -> None:
    root = tmp_path / "docs"
    good = good_files(root)
    (root / "nested.html").write_text(nested_list_html(100_000))
    report = index(root, str(tmp_path / "db"))
    assert not report.failed
    assert indexed_names(str(tmp_path / "db")) == good | {"nested.html"}


# ---------------------------------------------------------------------------------------------
# D. The whole hostile folder at once, as a new user would meet it


BILLION_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE w:document ['
    b'<!ENTITY a "lol lol lol lol lol lol lol lol lol lol">'
    + b"".join(
        f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">'.encode() for i in range(9)
    )
    + b']><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>&j;</w:t></w:r></w:p></w:body></w:document>"
)


def hostile_folder(root: Path) -> tuple[set[str], set[str]]:
    """Good files (some with odd names) among corrupt, truncated, bomb and unreadable ones, as
    the names the index shows: (good, bad)."""
    from docsearch.paths import stored

    good = good_files(root)
    make_pdf(root / "g-good.pdf", ["The lessor repairs the roof.", "Rent is paid monthly."])
    (root / "deep.html").write_text(nested_list_html(5_000))
    for name in (b"odd-caf\xe9.txt", b"odd\nline.txt", b"odd\x1b.txt"):
        with open(os.path.join(os.fsencode(root), name), "wb") as handle:
            handle.write(b"A memo about the escrow account.\n")
        good.add(stored(os.fsdecode(name)))
    good |= {"deep.html", "g-good.pdf"}
    pdf = (root / "g-good.pdf").read_bytes()
    (root / "truncated.pdf").write_bytes(pdf[: len(pdf) // 3])
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <</Type /Catalog>> garbage\x00\xff" * 3)
    docx = (root / "m-good.docx").read_bytes()
    (root / "truncated.docx").write_bytes(docx[: len(docx) // 2])
    (root / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 50)
    zeros = {"word/media/x.bin": b"\0" * 60_000_000}  # deflates to about 60 KB
    rewrite_docx(root / "m-good.docx", root / "zip-bomb.docx", zeros)
    rewrite_docx(root / "m-good.docx", root / "laughs.docx", {"word/document.xml": BILLION_LAUGHS})
    os.mkfifo(root / "fifo.txt")
    (root / "loop.md").symlink_to(root / "loop.md")
    bad = {"truncated.pdf", "corrupt.pdf", "truncated.docx", "corrupt.png", "zip-bomb.docx"}
    return good, bad | {"laughs.docx", "fifo.txt", "loop.md"}


@pytest.mark.timeout(240)
def test_the_hostile_folder_indexes_every_good_file_and_names_every_bad_one(
    tmp_path: Path,
) -> None:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    good, bad = hostile_folder(root)
    args = ("index", str(root), "--collection", "c", "--encoder", "hashing", "--db", db)
    result = run_cli(*args, env={"DOCSEARCH_MAX_FILE_MB": "50"}, timeout=220)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert indexed_names(db) == good
    named = {
        line.split(": ", 2)[1].rsplit("/", 1)[-1]
        for line in result.stderr.splitlines()
        if line.startswith(("failed: ", "warning: "))
    }
    assert bad <= named, result.stderr
    assert not good & named, result.stderr
    assert all(line.isprintable() for line in result.stderr.splitlines())
