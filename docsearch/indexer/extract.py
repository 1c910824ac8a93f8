"""Files -> `Document`s: text with page numbers, every character traceable to its page.

Supported: PDF (pypdf text layer; pages without one are OCR'd), images (PNG, JPEG, TIFF with
its pages: OCR'd), `.txt`, `.md`, `.html`/`.htm`, `.docx`. Headings found in
Markdown, HTML and DOCX are written as Markdown `#` lines so the chunker sees one structure.
Anything that cannot be read (encrypted, corrupt, empty, binary, not UTF-8, no text layer,
unreadable, over a size limit, or any exception from a parser) raises `ExtractionError` whose
message is the reason recorded in the `files` table. `Limits` bounds what one file may cost.

Text files are read in blocks and decoded as they are read (`decode_stream`), never whole. With
`spool=True` (the indexer) a document whose text passes SPOOL_CHARS is handed over in a spool
file on disk instead of in memory (`PageSink`): `Document.iter_pages` reads it back a piece at a
time, so neither the extraction process nor the indexer holds a huge file's text.
Not here: the time budget and the capture of third-party warnings (`extract_process`, which runs
this module in a child process), the OCR engines and their cache (`ocr`), layout or tables.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import pickle
import re
import tempfile
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import groupby
from pathlib import Path
from typing import IO, TYPE_CHECKING

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
BLOCK_BYTES = 4 * 2**20  # a text file is read this much at a time
# A document with more text than this is spooled to disk when the caller asks for it (`spool`).
SPOOL_CHARS = 1_000_000


@dataclass(frozen=True)
class Page:
    number: int  # 1-based page number as the reader sees it
    text: str
    char_offset: int  # where this page starts in Document.text


@dataclass
class Document:
    """A file's text; `pages` partition `text` (pages joined by PAGE_SEPARATOR).

    A spooled document (`spool` is set) keeps its pages in that file instead of `pages`: pieces
    of pages in order (a long page in several pieces with its number, each at its own offset),
    read back by `iter_pages`; `loaded()` is the same document in memory, `discard()` removes
    the file (whoever consumes the document does, once done with it)."""

    path: str
    title: str
    pages: list[Page]
    warnings: list[str] = field(default_factory=list)  # e.g. scanned pages skipped
    ocr_pages: list[int] = field(default_factory=list)  # pages whose text OCR read
    ocr_read: int = 0  # of those, pages the engine read (the others came from its cache)
    spool: str = ""

    @property
    def text(self) -> str:
        return PAGE_SEPARATOR.join(p.text for p in self.loaded().pages)

    def iter_pages(self) -> Iterator[Page]:
        """The pages in order, or the pieces of pages a spooled document holds."""
        if not self.spool:
            yield from self.pages
            return
        with open(self.spool, "rb") as spool:
            while True:
                try:
                    yield pickle.load(spool)  # noqa: S301 - written by our own PageSink
                except EOFError:
                    return

    def loaded(self) -> Document:
        """This document with its pages in memory (itself unless spooled)."""
        if not self.spool:
            return self
        pages: list[Page] = []
        for piece in self.iter_pages():
            if pages and pages[-1].number == piece.number:
                pages[-1] = Page(piece.number, pages[-1].text + piece.text, pages[-1].char_offset)
            else:
                pages.append(piece)
        return replace(self, pages=pages, spool="")

    def discard(self) -> None:
        """Remove the spool file, if any (the document keeps nothing after)."""
        if self.spool:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.spool)
            self.spool = ""

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


class PageSink:
    """Takes a document's text a piece at a time and lays it out as `build_document` does:
    in memory, or, once past `spool_chars` characters, as pieces in a spool file (see
    `Document`). Also finds the first non-blank line (the title of a document without one of
    its own) as the text goes by."""

    def __init__(self, spool_chars: int | None = None, folder: str | None = None) -> None:
        self.spool_chars = spool_chars  # None: always in memory
        self.folder = folder  # where spool files go (None: the temporary folder)
        self.pages: list[Page] = []
        self.chars = 0  # characters of page text so far (separators aside)
        self.spool = ""
        self.first_line = ""
        self._file: IO[bytes] | None = None
        self._number = 0  # the page being written (0: none yet)
        self._start = 0  # where it starts in the document's text
        self._parts: list[str] = []  # its text held in memory
        self._spooled = 0  # characters of it already in the spool
        self._line = ""  # the line being read, until one is not blank

    def new_page(self) -> None:
        if self._number:
            self._end_page()
            self._look(PAGE_SEPARATOR)
        self._number += 1

    def write(self, text: str) -> None:
        if not self._number:
            self._number = 1
        self._look(text)
        self.chars += len(text)
        if self._file is not None:
            self._dump(text)
            return
        self._parts.append(text)
        if self.spool_chars is not None and self.chars > self.spool_chars:
            self._start_spool()

    def _dump(self, text: str) -> None:
        assert self._file is not None
        piece = Page(self._number, text, self._start + self._spooled)
        pickle.dump(piece, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._spooled += len(text)

    def _end_page(self) -> None:
        length = self._spooled + sum(len(p) for p in self._parts)
        if self._file is None:
            self.pages.append(Page(self._number, "".join(self._parts), self._start))
        elif not length:  # an empty page still has its number
            self._dump("")
        self._start += length + len(PAGE_SEPARATOR)
        self._parts, self._spooled = [], 0

    def _start_spool(self) -> None:
        handle, self.spool = tempfile.mkstemp(".pages", "docsearch-", self.folder)
        self._file = os.fdopen(handle, "wb")
        for page in self.pages:
            pickle.dump(page, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.pages, parts, self._parts = [], self._parts, []
        self._dump("".join(parts))

    def _look(self, text: str) -> None:
        """Follow the text until its first non-blank line is found (lines as splitlines()
        cuts them, '#' marks and spaces stripped, as `_title_from_text` reads them)."""
        if self.first_line:
            return
        self._line, lines = "", (self._line + text).splitlines(keepends=True)
        for line in lines:
            if line.splitlines() == [line]:  # no line break yet: wait for the rest
                self._line = line[:10_000]
                return
            if title := line.strip().lstrip("#").strip():
                self.first_line = title[:200]
                return

    def document(self, path: Path, title: str, warnings: list[str]) -> Document:
        """The document written (a spooled one: its file closed, ready to read)."""
        if self._number:
            self._end_page()
        self._look("\n")  # the last line, if it had no line break
        if self._file is not None:
            self._file.close()
        doc = Document(str(path), title or self.first_line or path.stem, self.pages)
        doc.spool = self.spool
        doc.warnings.extend(warnings)
        return doc

    def discard(self) -> None:
        """Give up (the extraction failed): the spool file goes."""
        if self._file is not None:
            self._file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.spool)

    def take(self, doc: Document) -> Document:
        """`doc`, spooled if it was extracted whole (not into this sink) and is long enough."""
        whole = sum(len(p.text) for p in doc.pages)
        if doc.spool or self.spool_chars is None or whole <= self.spool_chars:
            return doc
        other = PageSink(self.spool_chars, self.folder)
        for page in doc.pages:
            other.new_page()
            other.write(page.text)
        spooled = other.document(Path(doc.path), doc.title, [])
        return replace(doc, pages=spooled.pages, spool=spooled.spool)


@dataclass(frozen=True)
class Limits:
    """What one file may cost; the defaults are the settings' (`docsearch.config`).

    `max_file_mb`: bytes read from disk, and bytes a DOCX unpacks to. `max_text_mb`: millions
    of characters of extracted text (for plain-text and HTML files, the file's size). Neither
    bounds the indexer's memory any more (a file's text, chunks and vectors stream through it,
    see `pipeline`; benchmarks/results/memory.md): they bound the time one file may take, and
    what the formats read whole hold in the extraction process (a PDF's bytes, HTML's parse
    tree at about 50 bytes per byte, a DOCX up to 32 MB of XML). `seconds`: wall-clock time to
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
    See `decode_stream`, which this is for bytes in memory."""
    return "".join(decode_stream(lambda: iter([data]), warnings))


def decode_stream(
    blocks: Callable[[], Iterator[bytes]], warnings: list[str] | None = None
) -> Iterator[str]:
    """The text of the bytes `blocks()` gives (called twice: the bytes are judged first, then
    decoded), a block at a time, with newlines made `\\n`.

    The whole file is judged, not its start: more than 5% control bytes (NUL included) is
    binary content and refused; fewer NULs are stray bytes in a text file, removed with a
    warning (added to `warnings`) so that the rest of the file is still found.
    """
    empty, controls, total, head = True, 0, 0, b""
    for block in blocks():  # C speed: the judging pass costs a read
        head = head or block[:3]
        empty = empty and not block.strip()
        controls += len(block.translate(None, _NOT_CONTROL))
        total += len(block)
    if empty:
        raise ExtractionError("empty file")
    utf16 = head.startswith((b"\xff\xfe", b"\xfe\xff"))
    if not utf16 and controls > 0.05 * total:
        raise ExtractionError("binary content (NUL or control bytes) in a text file")
    return _decoded(blocks(), utf16, warnings)


def _decoded(blocks: Iterator[bytes], utf16: bool, warnings: list[str] | None) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-16" if utf16 else "utf-8")()
    fed, nuls, visible, cr = 0, 0, False, ""
    for block in _without_bom(blocks, utf16):
        if block is None:  # a UTF-8 byte order mark, skipped
            fed += len(codecs.BOM_UTF8)
            continue
        final = not block
        pending = len(decoder.getstate()[0])
        try:
            text = decoder.decode(block, final=final)
        except UnicodeDecodeError as exc:
            if utf16:
                raise
            at = fed - pending + exc.start
            raise ExtractionError(
                f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {at}); "
                "convert the file to UTF-8"
            ) from exc
        fed += len(block)
        if "\x00" in text:
            nuls += text.count("\x00")
            text = text.replace("\x00", "")
        visible = visible or (bool(text) and not text.isspace())
        if utf16:  # as UTF-16 files always were: their line ends as they are
            yield text
            continue
        text, cr = cr + text, ""
        if text.endswith("\r") and not final:  # its \n may start the next block
            text, cr = text[:-1], "\r"
        yield text.replace("\r\n", "\n").replace("\r", "\n")
    if nuls:
        if warnings is not None:
            warnings.append(f"removed {nuls} NUL byte{'s' * (nuls != 1)} from the text")
        if not visible:
            raise ExtractionError("binary content (only NUL bytes) in a text file")


def _without_bom(blocks: Iterator[bytes], utf16: bool) -> Iterator[bytes | None]:
    """The blocks, then b"" (the end); a UTF-8 byte order mark is given as None, then dropped
    (it may come split across the first blocks)."""
    head: bytes | None = None if utf16 else b""  # the start, until a mark can be told
    for block in blocks:
        if head is not None:
            head += block
            if len(head) < len(codecs.BOM_UTF8) and codecs.BOM_UTF8.startswith(head):
                continue  # too few bytes yet to tell
            if head.startswith(codecs.BOM_UTF8):
                yield None
                head = head[len(codecs.BOM_UTF8) :]
            block, head = head, None
        if block:
            yield block
    if head:
        yield head
    yield b""


# Control bytes are those below 0x20 other than tab, newline, form feed and carriage return. In
# UTF-8 they never occur inside a multi-byte character, so counting bytes counts characters.
_NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in b"\t\n\f\r")


def _title_from_text(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:200]
    return fallback


def extract_text(path: Path, data: bytes, limits: Limits) -> Document:
    return stream_text(path, data, limits, PageSink())


def stream_text(path: Path, source: bytes | None, limits: Limits, sink: PageSink) -> Document:
    """A text file (`source`: its bytes, or None to read it from `path` a block at a time) as
    a Document, written into `sink` as it is decoded."""
    warnings: list[str] = []
    sink.new_page()
    for text in decode_stream(lambda: _blocks(path, source, limits), warnings):
        # Form feeds are page breaks in text exports of paginated documents.
        first, *others = text.split("\f")
        sink.write(first)
        for page in others:
            sink.new_page()
            sink.write(page)
    return sink.document(path, "", warnings)


def _blocks(path: Path, source: bytes | None, limits: Limits) -> Iterator[bytes]:
    """`source` a block at a time, or the file at `path` (refused over a size limit, also if
    it grows past one while it is read)."""
    if source is not None:
        for start in range(0, len(source), BLOCK_BYTES):
            yield source[start : start + BLOCK_BYTES]
        return
    with open_limited(path, limits) as handle:
        read = 0
        while block := handle.read(BLOCK_BYTES):
            read += len(block)
            check_size(path, read, limits)
            yield block


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


def _streamed_docx(data: bytes, limits: Limits) -> bool:
    """Whether a DOCX is too large for python-docx (see `docx_stream`); checked for size."""
    from docsearch.indexer.docx_stream import STREAM_BODY_BYTES, body_size

    if not data:
        return False
    _check_unpacked_size(data, limits)
    return body_size(data) > STREAM_BODY_BYTES


def stream_docx(path: Path, data: bytes, sink: PageSink) -> Document:
    """A large DOCX read a paragraph at a time into `sink` (the text `extract_docx` gives)."""
    import io
    import zipfile

    from docsearch.indexer import docx_stream

    sink.new_page()
    for i, block in enumerate(docx_stream.blocks(data, _docx_heading_level, _marked)):
        sink.write("\n\n" + block if i else block)
    if not sink.chars:
        raise ExtractionError("DOCX without text")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        title = docx_stream.core_title(archive)
    return sink.document(path, title, [])


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
    spool: str | None = None,
) -> Document:
    """Read `path` (or the bytes already read from it) into a Document; ExtractionError if unusable.

    `spool`: a folder; a document with more than SPOOL_CHARS characters of text comes spooled
    there (see `Document`; a text file is then never held whole, nor its text). Any exception a parser
    raises on this file becomes an ExtractionError naming it, so one bad file cannot stop a
    run. MemoryError is left alone: in this process it says the machine is short of memory,
    not that the file is bad (`extract_process` turns it into the file's failure, where the
    child's memory is the file's alone).
    """
    limits = limits or Limits()
    extractor = EXTRACTORS.get(path.suffix.lower())
    if extractor is None:
        raise ExtractionError(f"unsupported file type {path.suffix or '(none)'!r}")
    sink = PageSink(SPOOL_CHARS if spool else None, spool)
    try:
        doc = _extract_into(sink, extractor, path, data, limits)
        if sink.chars > limits.max_text_chars:
            raise text_too_big(sink.chars, limits, "its text")
    except BaseException:
        sink.discard()
        raise
    doc = sink.take(doc)
    doc.path = display_path or doc.path
    return doc


def _extract_into(
    sink: PageSink,
    extractor: Callable[[Path, bytes, Limits], Document],
    path: Path,
    data: bytes | None,
    limits: Limits,
) -> Document:
    """Run `extractor` with the sink: text streams into it, other formats are taken whole."""
    try:
        if extractor is extract_text:
            if data is not None:
                check_size(path, len(data), limits)
            return stream_text(path, data, limits, sink)
        if data is None:
            data = read_limited(path, limits)
        check_size(path, len(data), limits)
        if extractor is extract_docx and _streamed_docx(data, limits):
            return stream_docx(path, data, sink)
        doc = extractor(path, data, limits)
        sink.chars = sum(len(page.text) for page in doc.pages)
        return doc
    except (ExtractionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - see `extract`
        raise ExtractionError(
            f"cannot read this {FORMAT_NAMES[extractor]} file ({describe(exc)})"
        ) from exc


def read_limited(path: Path, limits: Limits) -> bytes:
    """The bytes of a regular file; one over a size limit is refused without being read."""
    with open_limited(path, limits) as handle:
        data = handle.read()
    check_size(path, len(data), limits)  # it may have grown since it was measured
    return data


@contextlib.contextmanager
def open_limited(path: Path, limits: Limits) -> Iterator[IO[bytes]]:
    """A regular file opened for reading; one over a size limit is refused unopened.

    Checked just before opening, so that a FIFO or device put in the file's place since the
    folder was walked is refused instead of waited on.
    """
    import stat

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ExtractionError("not a regular file (a FIFO, device, socket or folder)")
        check_size(path, st.st_size, limits)
        handle = path.open("rb")
    except OSError as exc:
        raise ExtractionError(f"unreadable: {exc.strerror or exc}") from exc
    with handle:
        try:
            yield handle
        except OSError as exc:
            raise ExtractionError(f"unreadable: {exc.strerror or exc}") from exc
