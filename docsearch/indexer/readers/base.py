"""What every reader shares: `Document` and its `Page`s, the `PageSink` long texts stream into,
the `Limits` one file may cost and the refusals that name them, the zip guard, and reading a
regular file within the limits.

A reader (one module per family in this package) is a function `(path, bytes, Limits) ->
Document` registered in `extract.EXTRACTORS`; anything it cannot read raises `ExtractionError`
with the reason recorded in the `files` table.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import groupby
from pathlib import Path
from typing import IO

from docsearch.defaults import (
    DEFAULT_EXTRACT_MEMORY_MB,
    DEFAULT_EXTRACT_SECONDS,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_TEXT_MB,
)
from docsearch.errors import ExtractionError
from docsearch.indexer.ocr import OcrOptions

PAGE_SEPARATOR = "\n\n"
MB = 1_000_000
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
    the file (whoever consumes the document does, once done with it).

    One file may hold several documents: an e-mail's attachments (and theirs) are documents of
    their own in `attachments` (flat, in order), each with its `part`, the chain of attachment
    names that leads to it from the file ("fwd.eml › contract.pdf"; "" for the file's own
    document). `meta` is provenance stored in filterable columns (an e-mail's subject, from, to
    and date, which its attachments share); `labels` names pages where a number is not enough
    (a spreadsheet's "Sheet1, rows 1-100", an EPUB's chapter)."""

    path: str
    title: str
    pages: list[Page]
    warnings: list[str] = field(default_factory=list)  # e.g. scanned pages skipped
    ocr_pages: list[int] = field(default_factory=list)  # pages whose text OCR read
    ocr_read: int = 0  # of those, pages the engine read (the others came from its cache)
    spool: str = ""
    part: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # page number -> its label
    attachments: list[Document] = field(default_factory=list)
    encoding: str = ""  # a text file's encoding, as detected ("" where none was guessed)

    def documents(self) -> list[Document]:
        """This document and the attachments it holds, in order."""
        return [self, *self.attachments]

    def label(self, first: int, last: int) -> str:
        """The label of pages `first`..`last` ("" for pages without one)."""
        start, end = self.labels.get(first, ""), self.labels.get(last, "")
        return start if start == end or not end else f"{start} – {end}" if start else end

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


def make_document(path: Path, title: str, page_texts: list[str], warnings: list[str]) -> Document:
    """A file's Document; without a title of its own, its first line (or its name) is one."""
    doc = build_document(str(path), title, page_texts)
    doc.title = title or title_from_text(doc.text, path.stem)
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
        cuts them, '#' marks and spaces stripped, as `title_from_text` reads them)."""
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


def describe(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line: its type and its message, cut at `limit` characters."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    # Numbers in one run of consecutive numbers all lie the same distance from their index.
    runs = [[n for _, n in run] for _, run in groupby(enumerate(numbers), lambda p: p[1] - p[0])]
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def title_from_text(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:200]
    return fallback


def check_unpacked_size(data: bytes, limits: Limits, kind: str = "DOCX") -> None:
    """Refuse a zip-based file (`kind`: DOCX, XLSX, EPUB...) whose parts unpack to more than
    the limit, before anything is inflated.

    The sizes come from the zip's directory; Python's zipfile never inflates a part beyond its
    declared size (a part that lies fails its CRC check), so the sum bounds the memory used.
    """
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError) as exc:
        raise ExtractionError(f"corrupt {kind}: {describe(exc)}") from exc
    if unpacked > limits.max_file_bytes:
        raise file_too_big(unpacked, limits, "its unpacked content")


def check_size(path: Path, size: int, limits: Limits, text_like: bool = False) -> None:
    """Refuse a file whose size alone passes a limit. A text or HTML file (`text_like`) is its
    text (HTML's parse tree takes about 50 bytes per byte), so its size is held to the text
    limit too."""
    if text_like and size > limits.max_text_chars:
        raise text_too_big(size, limits, "the file", unit="bytes")
    if size > limits.max_file_bytes:
        raise file_too_big(size, limits)


@contextlib.contextmanager
def open_limited(path: Path, limits: Limits, text_like: bool = False) -> Iterator[IO[bytes]]:
    """A regular file opened for reading; one over a size limit is refused unopened.

    Checked just before opening, so that a FIFO or device put in the file's place since the
    folder was walked is refused instead of waited on.
    """
    import stat

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ExtractionError("not a regular file (a FIFO, device, socket or folder)")
        check_size(path, st.st_size, limits, text_like)
        handle = path.open("rb")
    except OSError as exc:
        raise ExtractionError(f"unreadable: {exc.strerror or exc}") from exc
    with handle:
        try:
            yield handle
        except OSError as exc:
            raise ExtractionError(f"unreadable: {exc.strerror or exc}") from exc
