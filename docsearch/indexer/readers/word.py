"""DOCX: python-docx's paragraphs (headings as '#' lines) then table rows; a body too large for
python-docx is streamed a paragraph at a time (`docx_stream`). The zip's unpacked size is checked
before anything is inflated."""

from __future__ import annotations

import re
from pathlib import Path

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import (
    Document,
    Limits,
    PageSink,
    check_unpacked_size,
    describe,
    make_document,
)
from docsearch.indexer.readers.web import marked


def _docx_heading_level(style_name: str) -> int:
    match = re.match(r"(?:Heading|Überschrift|Titre)\s*(\d)", style_name or "")
    if match:
        return int(match.group(1))
    return 1 if style_name == "Title" else 0


def extract_docx(path: Path, data: bytes, limits: Limits) -> Document:
    import io

    import docx

    if not data:
        raise ExtractionError("empty file")
    check_unpacked_size(data, limits)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - bad XML, missing parts, wrong content types...
        raise ExtractionError(f"corrupt DOCX: {describe(exc)}") from exc
    blocks = [
        marked(para.text.strip(), _docx_heading_level(para.style.name if para.style else ""))
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
    return make_document(path, (document.core_properties.title or "").strip(), [text], [])


def streamed_docx(data: bytes, limits: Limits) -> bool:
    """Whether a DOCX is too large for python-docx (see `docx_stream`); checked for size."""
    from docsearch.indexer.docx_stream import STREAM_BODY_BYTES, body_size

    if not data:
        return False
    check_unpacked_size(data, limits)
    return body_size(data) > STREAM_BODY_BYTES


def stream_docx(path: Path, data: bytes, sink: PageSink) -> Document:
    """A large DOCX read a paragraph at a time into `sink` (the text `extract_docx` gives)."""
    import io
    import zipfile

    from docsearch.indexer import docx_stream

    sink.new_page()
    for i, block in enumerate(docx_stream.blocks(data, _docx_heading_level, marked)):
        sink.write("\n\n" + block if i else block)
    if not sink.chars:
        raise ExtractionError("DOCX without text")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        title = docx_stream.core_title(archive)
    return sink.document(path, title, [])
