"""Builders for real test inputs: PDFs (reportlab), encrypted PDFs (pypdf), DOCX, bad files,
scans (text drawn by Pillow into images, and PDFs made only of such images)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from docsearch.indexer.pipeline import Engine, IndexReport

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "docsearch" / "corpora" / "samples"


def make_pdf(path: Path, pages: list[str], title: str = "") -> Path:
    """A real PDF with one text page per string ('' gives a page with no text layer)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    if title:
        pdf.setTitle(title)
    for text in pages:
        if text:
            y = 800
            for line in text.splitlines():
                pdf.drawString(50, y, line)
                y -= 14
        else:  # a drawing only, like a scanned page without OCR
            pdf.rect(50, 400, 300, 200, fill=1)
        pdf.showPage()
    pdf.save()
    return path


def scan_image(text: str, dpi: int = 150):  # type: ignore[no-untyped-def]
    """A page image with `text` drawn on it in 12 pt type, as a scanner at `dpi` would see it
    (a third of a letter page: enough for a few lines, quick to OCR)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (int(8.5 * dpi), int(11 * dpi / 3)), 255)
    font = ImageFont.load_default(size=dpi // 6)
    ImageDraw.Draw(image).multiline_text((dpi // 2, dpi // 2), text, fill=0, font=font)
    return image


def make_scanned_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF whose pages are images of `pages` only: no text layer, as a scanner writes them."""
    first, *rest = [scan_image(text) for text in pages]
    first.save(path, "PDF", resolution=150, save_all=True, append_images=rest)
    return path


def make_encrypted_pdf(path: Path, password: str = "secret") -> Path:
    from pypdf import PdfReader, PdfWriter

    plain = make_pdf(path.with_suffix(".plain.pdf"), ["Top secret merger terms."])
    writer = PdfWriter()
    for page in PdfReader(plain).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password)
    with path.open("wb") as handle:
        writer.write(handle)
    plain.unlink()
    return path


def make_docx(path: Path, blocks: list[tuple[int, str]]) -> Path:
    import docx

    document = docx.Document()
    for level, text in blocks:
        if level:
            document.add_heading(text, level=level)
        else:
            document.add_paragraph(text)
    document.save(str(path))
    return path


def bad_folder(root: Path) -> dict[str, str]:
    """A folder of good and bad files; returns {bad file name: expected reason fragment}."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "good.md").write_text("# Good\n\nThe indemnification clause survives termination.\n")
    make_pdf(root / "good.pdf", ["Page one about warranties.", "Page two about liability caps."])
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <</Type /Catalog>> garbage\x00\xff" * 3)
    make_encrypted_pdf(root / "encrypted.pdf")
    (root / "empty.txt").write_bytes(b"")
    (root / "binary.txt").write_bytes(bytes(range(256)) * 8)
    expected = {
        "corrupt.pdf": "PDF",
        "encrypted.pdf": "encrypted",
        "empty.txt": "empty",
        "binary.txt": "binary",
    }
    if not running_as_root():  # root reads whatever chmod forbids: see test_unreadable_file
        unreadable = root / "unreadable.txt"
        unreadable.write_text("you cannot read me")
        unreadable.chmod(0)
        expected["unreadable.txt"] = "unreadable"
    return expected


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def copy_samples(target: Path) -> Path:
    shutil.copytree(SAMPLES, target)
    return target


def index_into(
    db: str,
    root: Path,
    name: str = "c",
    *,
    encoder: str = "hashing",
    options: dict[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    engine: Engine | None = None,
    switch: bool = False,
    **settings: Any,
) -> IndexReport:
    """Index `root` into collection `name` through the indexing service, as `docsearch index`
    does (`switch`: as `--switch`); `settings` are Settings fields (`commit_chunks=4`...)."""
    from docsearch.config import Settings
    from docsearch.indexer.service import index

    configured = Settings(db=db, **settings)
    return index(
        root,
        settings=configured,
        collection=name,
        encoder=encoder,
        options=options,
        include=include,
        exclude=exclude,
        engine=engine,
        switch=switch,
    )


def index_samples(folder: Path) -> str:
    """A copy of the sample corpus under `folder`, indexed as collection 'samples' with the
    hashing fake encoder (120-token chunks); returns the database path."""
    root = copy_samples(folder / "samples")
    db = str(folder / "db")
    report = index_into(db, root, "samples", options={"max_tokens": 120})
    assert not report.failed
    return db


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    module: str = "docsearch.app.cli",
) -> subprocess.CompletedProcess[str]:
    """`docsearch ARGS` in a fresh interpreter, with the test fakes importable (`module`: another
    entry point that runs the CLI, such as one with test hooks)."""
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DOCSEARCH_PLUGINS": "tests.fakes",
        **(env or {}),
    }
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired as exc:
        # The hung command's own output is the only clue to why it hung; show its end.
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(
            f"docsearch {' '.join(args)} ran past {timeout} s; its stderr ended:\n{(said or '')[-3000:]}"
        )


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def documents(db: str, name: str = "c") -> dict[str, dict[str, Any]]:
    """The collection's docs-table rows by path, each checked to be the row that its file's
    stored chunks make (what a backfill writes). Compared exactly: both are `document_rows`
    over the same float32 vectors in the same order."""
    from docsearch.store.documents import document_rows
    from docsearch.store.reads import Store
    from docsearch.store.writes import Writer

    store = Store.open(db, name)
    stored = {row["path"]: row for row in Writer(store).docs.to_arrow().to_pylist()}
    derived = {row["path"]: row for row in document_rows(store.rows("ordinal >= 0"))}
    assert stored == derived
    return stored
