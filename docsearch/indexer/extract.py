"""Files -> `Document`s: text with page numbers, every character traceable to its page.

Supported: PDF (pypdf text layer), `.txt`, `.md`, `.html`/`.htm`, `.docx`. Headings found in
Markdown, HTML and DOCX are written as Markdown `#` lines so the chunker sees one structure.
Anything that cannot be read (encrypted, corrupt, empty, binary, not UTF-8, no text layer,
unreadable) raises `ExtractionError` whose message is the reason recorded in the `files` table.
Not here: OCR of scanned pages (reported, not guessed), layout or table recovery.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from docsearch.errors import ExtractionError

log = logging.getLogger(__name__)

PAGE_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Page:
    number: int  # 1-based page number as the reader sees it
    text: str
    char_offset: int  # where this page starts in Document.text


@dataclass
class Document:
    """A file's text; `pages` partition `text` (pages joined by PAGE_SEPARATOR)."""

    path: str
    title: str
    pages: list[Page]
    warnings: list[str] = field(default_factory=list)  # e.g. scanned pages skipped

    @property
    def text(self) -> str:
        return PAGE_SEPARATOR.join(p.text for p in self.pages)

    def page_at(self, char: int) -> int:
        """Page number holding character offset `char` of `text`."""
        starts = [p.char_offset for p in self.pages]
        return self.pages[max(0, bisect_right(starts, char) - 1)].number


def build_document(path: str, title: str, page_texts: list[str]) -> Document:
    """Lay pages end to end with PAGE_SEPARATOR and record each page's offset."""
    pages, offset = [], 0
    for number, text in enumerate(page_texts, start=1):
        pages.append(Page(number, text, offset))
        offset += len(text) + len(PAGE_SEPARATOR)
    return Document(path, title, pages)


# ---------------------------------------------------------------------------------------------
# Plain text


def decode_text(data: bytes) -> str:
    """UTF-8 (with or without BOM) or BOM-marked UTF-16; anything else is refused, not guessed."""
    if not data.strip():
        raise ExtractionError("empty file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    if b"\x00" in data[:8192]:
        raise ExtractionError("binary content (NUL bytes) in a text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert the file to UTF-8"
        ) from exc
    if _control_share(text) > 0.05:
        raise ExtractionError("binary content (control characters) in a text file")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _control_share(text: str) -> float:
    sample = text[:8192]
    bad = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\n\r\t\f")
    return bad / max(1, len(sample))


def _title_from_text(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:200]
    return fallback


def extract_text(path: Path, data: bytes) -> Document:
    text = decode_text(data)
    # Form feeds are page breaks in text exports of paginated documents.
    pages = text.split("\f") if "\f" in text else [text]
    return build_document(str(path), _title_from_text(text, path.stem), pages)


# ---------------------------------------------------------------------------------------------
# PDF


def _pdf_reader(path: Path, data: bytes):  # type: ignore[no-untyped-def]
    import io

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    if not data:
        raise ExtractionError("empty file")
    if not data.lstrip()[:5].startswith(b"%PDF"):
        raise ExtractionError("not a PDF (no %PDF header)")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ExtractionError(f"corrupt PDF: {exc}") from exc
    if reader.is_encrypted:
        try:  # many "encrypted" PDFs only restrict printing and open with an empty password
            ok = reader.decrypt("")
        except Exception as exc:  # noqa: BLE001 - pypdf raises several types here
            raise ExtractionError(f"encrypted PDF ({exc})") from exc
        if not ok:
            raise ExtractionError("encrypted PDF (a password is required)")
    return reader


def _pdf_title(reader, fallback: str) -> str:  # type: ignore[no-untyped-def]
    try:
        title = (reader.metadata or {}).get("/Title")
    except Exception:  # noqa: BLE001 - broken info dicts are common and harmless
        title = None
    return str(title).strip() if title and str(title).strip() else fallback


def _page_text(page) -> str:  # type: ignore[no-untyped-def]
    text = page.extract_text() or ""
    text = text.replace("\r\n", "\n").replace("\x00", "")
    return re.sub(r"[ \t]+\n", "\n", text).strip()


def extract_pdf(path: Path, data: bytes) -> Document:
    reader = _pdf_reader(path, data)
    try:
        page_texts = [_page_text(page) for page in reader.pages]
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types on broken streams
        raise ExtractionError(f"corrupt PDF: {exc}") from exc
    if not page_texts:
        raise ExtractionError("PDF has no pages")
    blank = [i + 1 for i, t in enumerate(page_texts) if not t.strip()]
    if len(blank) == len(page_texts):
        raise ExtractionError(
            f"no text layer on any of {len(page_texts)} pages (scanned?); OCR it first"
        )
    doc = build_document(str(path), "", page_texts)
    doc.title = _pdf_title(reader, _title_from_text(doc.text, path.stem))
    if blank:
        doc.warnings.append(f"pages without a text layer (scanned?): {_ranges(blank)}")
    return doc


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if n is not None:
            start = prev = n
    return ", ".join(out)


# ---------------------------------------------------------------------------------------------
# HTML and DOCX, both rendered to Markdown-ish text with '#' headings


_BLOCK_TAGS = ["h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "pre", "td", "th", "dt", "dd"]


def extract_html(path: Path, data: bytes) -> Document:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(decode_text(data), "html.parser")
    for tag in soup(["script", "style", "noscript", "template"]):
        tag.decompose()
    blocks = []
    for el in soup.find_all(_BLOCK_TAGS):
        if el.find(_BLOCK_TAGS):  # a container of other blocks; its children speak for it
            continue
        text = " ".join(el.get_text(" ").split())
        if not text:
            continue
        level = int(el.name[1]) if el.name in _BLOCK_TAGS[:6] else 0
        blocks.append(("#" * level + " " + text) if level else text)
    if not blocks:  # no block markup at all: keep the visible text
        blocks = [" ".join(soup.get_text(" ").split())]
    text = "\n\n".join(b for b in blocks if b)
    if not text.strip():
        raise ExtractionError("HTML without visible text")
    title_tag = soup.find("title")
    title = title_tag.get_text().strip() if title_tag else ""
    return build_document(str(path), title or _title_from_text(text, path.stem), [text])


def _docx_heading_level(style_name: str) -> int:
    match = re.match(r"(?:Heading|Überschrift|Titre)\s*(\d)", style_name or "")
    if match:
        return int(match.group(1))
    return 1 if style_name == "Title" else 0


def extract_docx(path: Path, data: bytes) -> Document:
    import io
    import zipfile

    import docx

    if not data:
        raise ExtractionError("empty file")
    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractionError(f"corrupt DOCX: {exc}") from exc
    blocks = []
    for para in document.paragraphs:
        text = para.text.strip()
        if text:
            level = _docx_heading_level(para.style.name if para.style else "")
            blocks.append(("#" * level + " " + text) if level else text)
    for table in document.tables:
        for row in table.rows:
            cells = [c.text.strip() for c in row.cells if c.text.strip()]
            if cells:
                blocks.append(" | ".join(cells))
    text = "\n\n".join(blocks)
    if not text.strip():
        raise ExtractionError("DOCX without text")
    title = (document.core_properties.title or "").strip()
    return build_document(str(path), title or _title_from_text(text, path.stem), [text])


# ---------------------------------------------------------------------------------------------

EXTRACTORS: dict[str, Callable[[Path, bytes], Document]] = {
    ".pdf": extract_pdf,
    ".txt": extract_text,
    ".text": extract_text,
    ".md": extract_text,
    ".markdown": extract_text,
    ".rst": extract_text,
    ".html": extract_html,
    ".htm": extract_html,
    ".docx": extract_docx,
}


def supported(path: Path) -> bool:
    return path.suffix.lower() in EXTRACTORS


def extract(path: Path, data: bytes | None = None, *, display_path: str | None = None) -> Document:
    """Read `path` (or the bytes already read from it) into a Document; ExtractionError if unusable."""
    extractor = EXTRACTORS.get(path.suffix.lower())
    if extractor is None:
        raise ExtractionError(f"unsupported file type {path.suffix or '(none)'!r}")
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ExtractionError(f"unreadable: {exc.strerror or exc}") from exc
    doc = extractor(path, data)
    doc.path = display_path or doc.path
    return doc
