"""Files -> `Document`s: the one door every file goes through (`extract`, `EXTRACTORS`).

Each family of formats has its reader module in `readers/`: `text` (plain text, Markdown; the
encoding judged by `encoding`), `web` (HTML), `word` (DOCX), `pdf` (PDF, and images read by
OCR), `mail` (.eml, attachments as documents of their own), `outlook` (.msg), `office` (.pptx, .xlsx, .odt, .ods,
.odp), `ebook` (.epub), `legacy` (.rtf, .doc through a converter); `base` holds what they share
(`Document`, `PageSink`, `Limits`, the zip guard). Headings are written as Markdown `#` lines so
the chunker sees one structure. Anything that cannot be read (encrypted, corrupt, empty, binary,
no text layer, unreadable, over a size limit, or any exception from a parser) raises
`ExtractionError` whose message is the reason recorded in the `files` table.

With `spool=True` (the indexer) a document whose text passes SPOOL_CHARS is handed over in a
spool file on disk instead of in memory (`PageSink`): `Document.iter_pages` reads it back a piece
at a time, so neither the extraction process nor the indexer holds a huge file's text.
Not here: the time budget and the capture of third-party warnings (`extract_process`, which runs
this module in a child process), the OCR engines and their cache (`ocr`), layout or tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import IO

from docsearch.errors import ExtractionError
from docsearch.indexer.readers import base, mail
from docsearch.indexer.readers.base import (
    MB,
    PAGE_SEPARATOR,
    SPOOL_CHARS,
    Document,
    Limits,
    Page,
    PageSink,
    build_document,
    describe,
    file_too_big,
    ranges,
    text_too_big,
)
from docsearch.indexer.readers.ebook import extract_epub
from docsearch.indexer.readers.legacy import extract_doc, extract_rtf
from docsearch.indexer.readers.office import extract_odf, extract_pptx, extract_xlsx
from docsearch.indexer.readers.outlook import parse_msg
from docsearch.indexer.readers.pdf import extract_image, extract_pdf
from docsearch.indexer.readers.text import decode_stream, decode_text, extract_text, stream_text
from docsearch.indexer.readers.web import extract_html
from docsearch.indexer.readers.word import extract_docx, stream_docx, streamed_docx

# Names callers import from here (the door), wherever they live now.
__all__ = [
    "MB", "PAGE_SEPARATOR", "SPOOL_CHARS", "Document", "Limits", "Page", "PageSink",
    "build_document", "decode_stream", "decode_text", "describe", "extract", "file_too_big",
    "ranges", "read_limited", "open_limited", "supported", "text_too_big", "EXTRACTORS",
]  # fmt: skip


def extract_eml(path: Path, data: bytes, limits: Limits) -> Document:
    """An e-mail message, its attachments read through this same door."""
    return mail.extract_eml(path, data, limits, extract)


def extract_msg(path: Path, data: bytes, limits: Limits) -> Document:
    """An Outlook message, its attachments read through this same door."""
    return mail.message_document(path, parse_msg(data), limits, extract)


EXTRACTORS: dict[str, Callable[[Path, bytes, Limits], Document]] = {
    ".pdf": extract_pdf,
    **dict.fromkeys([".txt", ".text", ".md", ".markdown", ".rst"], extract_text),
    ".html": extract_html,
    ".htm": extract_html,
    ".docx": extract_docx,
    **dict.fromkeys([".png", ".jpg", ".jpeg", ".tif", ".tiff"], extract_image),
    ".eml": extract_eml,
    ".msg": extract_msg,
    ".pptx": extract_pptx,
    ".xlsx": extract_xlsx,
    **dict.fromkeys([".odt", ".ods", ".odp"], extract_odf),
    ".rtf": extract_rtf,
    ".epub": extract_epub,
    ".doc": extract_doc,
}
FORMAT_NAMES: dict[Callable[[Path, bytes, Limits], Document], str] = {
    extract_pdf: "PDF",
    extract_text: "text",
    extract_html: "HTML",
    extract_docx: "DOCX",
    extract_image: "image",
    extract_eml: "e-mail",
    extract_msg: "Outlook message",
    extract_pptx: "PPTX",
    extract_xlsx: "XLSX",
    extract_odf: "OpenDocument",
    extract_rtf: "RTF",
    extract_epub: "EPUB",
    extract_doc: "Word .doc",
}


def supported(path: Path) -> bool:
    return path.suffix.lower() in EXTRACTORS


def text_like(path: Path) -> bool:
    """Whether a file is its text (plain text, HTML): its size is held to the text limit too."""
    return EXTRACTORS.get(path.suffix.lower()) in (extract_text, extract_html)


def check_size(path: Path, size: int, limits: Limits) -> None:
    """Refuse a file whose size alone passes a limit (see `base.check_size`)."""
    base.check_size(path, size, limits, text_like(path))


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
        if extractor is extract_docx and streamed_docx(data, limits):
            return stream_docx(path, data, sink)
        doc = extractor(path, data, limits)
        sink.chars = sum(len(page.text) for one in doc.documents() for page in one.pages)
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


def open_limited(path: Path, limits: Limits) -> contextlib.AbstractContextManager[IO[bytes]]:
    """A regular file opened for reading; one over a size limit is refused unopened."""
    return base.open_limited(path, limits, text_like(path))
