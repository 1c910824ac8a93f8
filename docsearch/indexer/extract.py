"""Files -> `Document`s: text with page numbers, every character traceable to its page.

Supported: PDF (pypdf text layer; pages without one are OCR'd), images (PNG, JPEG, TIFF with
its pages: OCR'd), `.txt`, `.md`, `.html`/`.htm`, `.docx`. Headings found in
Markdown, HTML and DOCX are written as Markdown `#` lines so the chunker sees one structure.
Anything that cannot be read (encrypted, corrupt, empty, binary, not UTF-8, no text layer,
unreadable, over a size limit, or any exception from a parser) raises `ExtractionError` whose
message is the reason recorded in the `files` table. `Limits` bounds what one file may bring into
memory: its bytes, a DOCX's unpacked parts, its extracted text.
Not here: the time budget and the capture of third-party warnings (`extract_process`, which runs
this module in a child process), the OCR engines and their cache (`ocr`), layout or tables.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

from docsearch.defaults import (
    DEFAULT_EXTRACT_MEMORY_MB,
    DEFAULT_EXTRACT_SECONDS,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_TEXT_MB,
)
from docsearch.errors import ExtractionError
from docsearch.indexer.ocr import OcrOptions, PageReader, missing_engine, page_reader

if TYPE_CHECKING:
    from PIL import Image

PAGE_SEPARATOR = "\n\n"
MB = 1_000_000


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
    ocr_pages: list[int] = field(default_factory=list)  # pages whose text OCR read
    ocr_read: int = 0  # of those, pages the engine read (the others came from its cache)

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


def _document(path: Path, title: str, page_texts: list[str], warnings: list[str]) -> Document:
    """A file's Document; without a title of its own, its first line (or its name) is one."""
    doc = build_document(str(path), title, page_texts)
    doc.title = title or _title_from_text(doc.text, path.stem)
    doc.warnings.extend(warnings)
    return doc


@dataclass(frozen=True)
class Limits:
    """What one file may cost; the defaults are the settings' (`docsearch.config`).

    `max_file_mb`: bytes read from disk, and bytes a DOCX unpacks to (python-docx holds every
    part in memory). `max_text_mb`: millions of characters of extracted text (for plain-text and
    HTML files, the file's size), because a file's chunks and vectors are held in memory until
    it is written: measured, about 18 bytes per character lexical-only and 130 with MiniLM on
    top of the model (16 MB of text: 0.5 GB and about 3 GB). `seconds`: wall-clock time to
    extract one file, enforced by `extract_process` (0: no time limit, in this process); each
    page OCR'd starts that time again. `memory_mb`: the address space of that process (with the
    programs it starts, such as `tesseract`), 0 for no cap. `ocr`: how pages without text are read.
    """

    max_file_mb: float = DEFAULT_MAX_FILE_MB
    max_text_mb: float = DEFAULT_MAX_TEXT_MB
    seconds: float = DEFAULT_EXTRACT_SECONDS
    memory_mb: float = DEFAULT_EXTRACT_MEMORY_MB
    ocr: OcrOptions = field(default_factory=OcrOptions)

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * MB)

    @property
    def max_text_chars(self) -> int:
        return int(self.max_text_mb * MB)


def _shown(size: int, unit: str) -> str:
    if size < MB // 10:
        return f"{size:,} {unit}"
    return f"{size / MB:,.1f} MB" if unit == "bytes" else f"{size / MB:,.1f} million {unit}"


def file_too_big(size: int, limits: Limits, what: str = "the file") -> ExtractionError:
    """The refusal of a file over `max_file_mb`, saying how to raise the limit."""
    return ExtractionError(
        f"{what} is {_shown(size, 'bytes')}, over the {limits.max_file_mb:g} MB limit; "
        "set DOCSEARCH_MAX_FILE_MB higher to index it"
    )


def text_too_big(size: int, limits: Limits, what: str, unit: str = "characters") -> ExtractionError:
    """The refusal of a text over `max_text_mb` (`unit`: what `size` counts)."""
    return ExtractionError(
        f"{what} is {_shown(size, unit)}, over the {limits.max_text_mb:g} MB text limit; "
        "set DOCSEARCH_MAX_TEXT_MB higher to index it"
    )


# ---------------------------------------------------------------------------------------------
# Plain text


def decode_text(data: bytes, warnings: list[str] | None = None) -> str:
    """UTF-8 (with or without BOM) or BOM-marked UTF-16; anything else is refused, not guessed.

    The whole file is judged, not its start: more than 5% control bytes (NUL included) is
    binary content and refused; fewer NULs are stray bytes in a text file, removed with a
    warning (added to `warnings`) so that the rest of the file is still found.
    """
    if not data.strip():
        raise ExtractionError("empty file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _drop_nuls(data.decode("utf-16"), warnings)
    if len(data.translate(None, _NOT_CONTROL)) > 0.05 * len(data):  # C speed, whole file
        raise ExtractionError("binary content (NUL or control bytes) in a text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert the file to UTF-8"
        ) from exc
    text = _drop_nuls(text, warnings)
    return text.replace("\r\n", "\n").replace("\r", "\n")


# Control bytes are those below 0x20 other than tab, newline, form feed and carriage return. In
# UTF-8 they never occur inside a multi-byte character, so counting bytes counts characters.
_NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in b"\t\n\f\r")


def _drop_nuls(text: str, warnings: list[str] | None) -> str:
    nuls = text.count("\x00")
    if not nuls:
        return text
    if warnings is not None:
        warnings.append(f"removed {nuls} NUL byte{'s' * (nuls != 1)} from the text")
    text = text.replace("\x00", "")
    if not text.strip():
        raise ExtractionError("binary content (only NUL bytes) in a text file")
    return text


def _title_from_text(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:200]
    return fallback


def extract_text(path: Path, data: bytes, limits: Limits) -> Document:
    warnings: list[str] = []
    text = decode_text(data, warnings)
    # Form feeds are page breaks in text exports of paginated documents.
    return _document(path, "", text.split("\f"), warnings)


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
        raise ExtractionError(f"corrupt PDF: {describe(exc)}") from exc
    if reader.is_encrypted:
        try:  # many "encrypted" PDFs only restrict printing and open with an empty password
            ok = reader.decrypt("")
        except Exception as exc:  # noqa: BLE001 - pypdf raises several types here
            raise ExtractionError(f"encrypted PDF ({exc})") from exc
        if not ok:
            raise ExtractionError("encrypted PDF (a password is required)")
    return reader


def _pdf_title(reader) -> str:  # type: ignore[no-untyped-def]
    try:
        return str((reader.metadata or {}).get("/Title") or "").strip()
    except Exception:  # noqa: BLE001 - broken info dicts are common and harmless
        return ""


def _page_text(page) -> str:  # type: ignore[no-untyped-def]
    text = page.extract_text() or ""
    text = text.replace("\r\n", "\n").replace("\x00", "")
    return re.sub(r"[ \t]+\n", "\n", text).strip()


def _pdf_page_texts(reader, limits: Limits) -> list[str]:  # type: ignore[no-untyped-def]
    """Each page's text, stopping as soon as the text passes the limit (a small PDF can hold
    millions of characters in compressed content streams)."""
    texts, total = [], 0
    try:
        for page in reader.pages:
            texts.append(_page_text(page))
            total += len(texts[-1])
            if total > limits.max_text_chars:
                raise text_too_big(total, limits, f"the text of pages 1-{len(texts)}")
    except ExtractionError:
        raise
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types on broken streams
        raise ExtractionError(f"corrupt PDF: {describe(exc)}") from exc
    return texts


def extract_pdf(path: Path, data: bytes, limits: Limits) -> Document:
    reader = _pdf_reader(path, data)
    page_texts = _pdf_page_texts(reader, limits)
    if not page_texts:
        raise ExtractionError("PDF has no pages")
    title = _pdf_title(reader)
    blank = [i + 1 for i, t in enumerate(page_texts) if not t.strip()]
    ocr = page_reader(limits.ocr) if blank else None
    if ocr is None and len(blank) == len(page_texts):
        raise ExtractionError(
            f"no text layer on any of {len(page_texts)} pages (scanned?); "
            + missing_engine(limits.ocr)
        )
    if ocr is None:
        unread = f"pages without a text layer (scanned?): {ranges(blank)}; "
        warnings = [unread + missing_engine(limits.ocr)] if blank else []
        return _document(path, title, page_texts, warnings)
    for number, image in zip(blank, _pdf_page_images(data, blank), strict=True):
        page_texts[number - 1] = ocr.text(image)
    return _ocr_document(path, title, page_texts, blank, ocr)


OCR_DPI = 300  # scanned PDF pages are rendered at this resolution to be read


def _pdf_page_images(data: bytes, numbers: list[int]) -> Iterator[Image.Image]:
    """The pages `numbers` rendered in grayscale, one at a time (a page is 8 MB at 300 dpi)."""
    try:
        import pypdfium2 as pdfium  # type: ignore[import-untyped]
    except ImportError:
        raise ExtractionError(
            "rendering scanned pages to OCR them needs pypdfium2: pip install 'docsearch[ocr]'"
        ) from None
    pdf = pdfium.PdfDocument(data)
    try:
        for number in numbers:
            page = pdf[number - 1]
            yield page.render(scale=OCR_DPI / 72, grayscale=True).to_pil()
            page.close()
    finally:
        pdf.close()


def _ocr_document(
    path: Path, title: str, texts: list[str], ocr_pages: list[int], ocr: PageReader
) -> Document:
    """A Document some of whose pages OCR read; pages where it found nothing are warned of."""
    empty = [n for n in ocr_pages if not texts[n - 1].strip()]
    if len(empty) == len(texts):
        raise ExtractionError(f"OCR ({ocr.engine}) found no text on any of {len(texts)} pages")
    warnings = [f"OCR ({ocr.engine}) found no text on pages {ranges(empty)}"] if empty else []
    doc = _document(path, title, texts, warnings)
    doc.ocr_pages, doc.ocr_read = ocr_pages, ocr.read
    return doc


def extract_image(path: Path, data: bytes, limits: Limits) -> Document:
    """An image file, each of its frames (a multi-page TIFF's pages) a page read by OCR."""
    import io

    from PIL import Image, ImageSequence

    ocr = page_reader(limits.ocr)
    if ocr is None:
        raise ExtractionError("an image, readable only by OCR; " + missing_engine(limits.ocr))
    with Image.open(io.BytesIO(data)) as image:
        texts = [ocr.text(frame) for frame in ImageSequence.Iterator(image)]
    return _ocr_document(path, "", texts, list(range(1, len(texts) + 1)), ocr)


def ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    # Numbers in one run of consecutive numbers all lie the same distance from their index.
    runs = [[n for _, n in run] for _, run in groupby(enumerate(numbers), lambda p: p[1] - p[0])]
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


# ---------------------------------------------------------------------------------------------
# HTML and DOCX, both rendered to Markdown-ish text with '#' headings


_HEADING_LEVELS = {f"h{n}": n for n in range(1, 7)}
# Elements that start and end a block of text. Text directly inside one (even around nested
# blocks, as in <li>Item<ul><li>Sub</li></ul></li>) is a block of its own.
_BLOCK_TAGS = frozenset(
    [*_HEADING_LEVELS, "p", "li", "pre", "td", "th", "dt", "dd", "div", "section", "article",
     "main", "header", "footer", "aside", "nav", "blockquote", "ul", "ol", "dl", "table", "tr",
     "caption", "figure", "figcaption", "address", "details", "summary", "form", "fieldset",
     "legend", "hr", "body", "html"]
)  # fmt: skip
_INVISIBLE_TAGS = frozenset(["head", "script", "style", "noscript", "template"])


def _marked(text: str, heading_level: int) -> str:
    """A block of text, with '#' marks when it is a heading."""
    return f"{'#' * heading_level} {text}" if heading_level else text


def _html_blocks(soup) -> list[str]:  # type: ignore[no-untyped-def]
    """The visible text of `soup` in blocks, in one pass over the tree.

    Iterative and linear in the size of the tree: a deeply nested file (100k levels of <li>)
    neither recurses nor searches each element's subtree again.
    """
    from bs4 import CData, NavigableString, Tag

    blocks: list[str] = []
    strings: list[str] = []  # the text of the block being read

    def cut(heading_level: int) -> None:
        if text := " ".join(" ".join(strings).split()):
            blocks.append(_marked(text, heading_level))
        strings.clear()

    stack = [(soup, iter(soup.contents), 0)]  # (element, its remaining children, heading level)
    while stack:
        element, children, level = stack[-1]
        child = next(children, None)
        if child is None:  # the element ends
            stack.pop()
            if element is not soup and element.name in _BLOCK_TAGS:
                cut(level)
            continue
        if isinstance(child, Tag):
            if child.name in _INVISIBLE_TAGS:
                continue
            if child.name in _BLOCK_TAGS:
                cut(level)  # what came before belongs to the enclosing block
                level = _HEADING_LEVELS.get(child.name, 0)
            stack.append((child, iter(child.contents), level))
        elif type(child) in (NavigableString, CData):  # not comments, doctypes, scripts
            strings.append(child)
    cut(0)
    return blocks


def extract_html(path: Path, data: bytes, limits: Limits) -> Document:
    from bs4 import BeautifulSoup

    warnings: list[str] = []
    soup = BeautifulSoup(decode_text(data, warnings), "html.parser")
    text = "\n\n".join(_html_blocks(soup))
    if not text.strip():
        raise ExtractionError("HTML without visible text")
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text().split()) if title_tag else ""
    return _document(path, title, [text], warnings)


def _docx_heading_level(style_name: str) -> int:
    match = re.match(r"(?:Heading|Überschrift|Titre)\s*(\d)", style_name or "")
    if match:
        return int(match.group(1))
    return 1 if style_name == "Title" else 0


def _check_unpacked_size(data: bytes, limits: Limits) -> None:
    """Refuse a DOCX whose parts unpack to more than the limit, before anything is inflated.

    The sizes come from the zip's directory; Python's zipfile never inflates a part beyond its
    declared size (a part that lies fails its CRC check), so the sum bounds the memory used.
    """
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError) as exc:
        raise ExtractionError(f"corrupt DOCX: {describe(exc)}") from exc
    if unpacked > limits.max_file_bytes:
        raise file_too_big(unpacked, limits, "its unpacked content")


def extract_docx(path: Path, data: bytes, limits: Limits) -> Document:
    import io

    import docx

    if not data:
        raise ExtractionError("empty file")
    _check_unpacked_size(data, limits)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - bad XML, missing parts, wrong content types...
        raise ExtractionError(f"corrupt DOCX: {describe(exc)}") from exc
    blocks = [
        _marked(para.text.strip(), _docx_heading_level(para.style.name if para.style else ""))
        for para in document.paragraphs
        if para.text.strip()
    ]
    for table in document.tables:
        for row in table.rows:
            cells = [c.text.strip() for c in row.cells if c.text.strip()]
            if cells:
                blocks.append(" | ".join(cells))
    text = "\n\n".join(blocks)
    if not text.strip():
        raise ExtractionError("DOCX without text")
    return _document(path, (document.core_properties.title or "").strip(), [text], [])


# ---------------------------------------------------------------------------------------------

EXTRACTORS: dict[str, Callable[[Path, bytes, Limits], Document]] = {
    ".pdf": extract_pdf,
    **dict.fromkeys([".txt", ".text", ".md", ".markdown", ".rst"], extract_text),
    ".html": extract_html,
    ".htm": extract_html,
    ".docx": extract_docx,
    **dict.fromkeys([".png", ".jpg", ".jpeg", ".tif", ".tiff"], extract_image),
}
FORMAT_NAMES: dict[Callable[[Path, bytes, Limits], Document], str] = {
    extract_pdf: "PDF",
    extract_text: "text",
    extract_html: "HTML",
    extract_docx: "DOCX",
    extract_image: "image",
}


def supported(path: Path) -> bool:
    return path.suffix.lower() in EXTRACTORS


def check_size(path: Path, size: int, limits: Limits) -> None:
    """Refuse a file whose size alone passes a limit. A text or HTML file is its text (HTML's
    parse tree takes about 50 bytes per byte), so its size is held to the text limit too."""
    is_text = EXTRACTORS.get(path.suffix.lower()) in (extract_text, extract_html)
    if is_text and size > limits.max_text_chars:
        raise text_too_big(size, limits, "the file", unit="bytes")
    if size > limits.max_file_bytes:
        raise file_too_big(size, limits)


def describe(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line: its type and its message, cut at `limit` characters."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def extract(
    path: Path,
    data: bytes | None = None,
    *,
    display_path: str | None = None,
    limits: Limits | None = None,
) -> Document:
    """Read `path` (or the bytes already read from it) into a Document; ExtractionError if unusable.

    Any exception a parser raises on this file becomes an ExtractionError naming it, so one bad
    file cannot stop a run. MemoryError is left alone: in this process it says the machine is
    short of memory, not that the file is bad (`extract_process` turns it into the file's
    failure, where the child's memory is the file's alone).
    """
    limits = limits or Limits()
    extractor = EXTRACTORS.get(path.suffix.lower())
    if extractor is None:
        raise ExtractionError(f"unsupported file type {path.suffix or '(none)'!r}")
    if data is None:
        data = read_limited(path, limits)
    check_size(path, len(data), limits)
    try:
        doc = extractor(path, data, limits)
    except (ExtractionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - see the docstring
        raise ExtractionError(
            f"cannot read this {FORMAT_NAMES[extractor]} file ({describe(exc)})"
        ) from exc
    chars = sum(len(page.text) for page in doc.pages)
    if chars > limits.max_text_chars:
        raise text_too_big(chars, limits, "its text")
    doc.path = display_path or doc.path
    return doc


def read_limited(path: Path, limits: Limits) -> bytes:
    """The bytes of a regular file; one over a size limit is refused without being read.

    Checked just before opening, so that a FIFO or device put in the file's place since the
    folder was walked is refused instead of waited on.
    """
    import stat

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ExtractionError("not a regular file (a FIFO, device, socket or folder)")
        check_size(path, st.st_size, limits)
        data = path.read_bytes()
    except OSError as exc:
        raise ExtractionError(f"unreadable: {exc.strerror or exc}") from exc
    check_size(path, len(data), limits)  # it may have grown since it was measured
    return data
