"""A DOCX's text read a paragraph at a time, for documents too large for python-docx.

python-docx parses `word/document.xml` into one lxml tree, about ten times the XML's size in
memory (a 100 MB DOCX: several GB). Here the XML is parsed as it is inflated (lxml `iterparse`)
and each body paragraph is dropped once read, so memory stays near one paragraph; tables, which
`extract_docx` puts after the paragraphs, are held in a temporary file until the body ends.
The text is python-docx's: a paragraph's runs and hyperlinks (text, tabs, line breaks,
non-breaking hyphens), heading levels from style names, table rows as `cell | cell` (a merged
cell repeated as python-docx repeats it across its columns; a vertically merged one gives the
text of the cell it continues). `extract.extract_docx` chooses this reader above
STREAM_BODY_BYTES of XML. Not here: anything python-docx does not read either (headers,
footnotes, text boxes).
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from typing import IO, Any

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
BODY_PART = "word/document.xml"
STREAM_BODY_BYTES = 32 * 2**20  # document.xml larger than this is streamed


def body_size(data: bytes) -> int:
    """The unpacked size of the DOCX's body part (0 if it has none)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        try:
            return archive.getinfo(BODY_PART).file_size
        except KeyError:
            return 0


def _style_names(archive: zipfile.ZipFile) -> dict[str, str]:
    """Paragraph style id -> name as python-docx shows it ("heading 1" -> "Heading 1")."""
    from lxml import etree  # type: ignore[import-untyped]

    try:
        root = etree.fromstring(archive.read("word/styles.xml"))
    except KeyError:
        return {}
    names = {}
    for style in root.iter(f"{W}style"):
        name = style.find(f"{W}name")
        value = name.get(f"{W}val", "") if name is not None else ""
        if value.lower().startswith("heading ") or value.lower() == "title":
            value = value[0].upper() + value[1:]
        names[style.get(f"{W}styleId", "")] = value
    return names


def core_title(archive: zipfile.ZipFile) -> str:
    from lxml import etree

    try:
        root = etree.fromstring(archive.read("docProps/core.xml"))
    except KeyError:
        return ""
    title = root.find("{http://purl.org/dc/elements/1.1/}title")
    return (title.text or "").strip() if title is not None else ""


def _run_text(run: Any) -> str:
    parts = []
    for child in run:
        tag = child.tag
        if tag == f"{W}t":
            parts.append(child.text or "")
        elif tag in (f"{W}tab", f"{W}ptab"):
            parts.append("\t")
        elif tag == f"{W}cr":
            parts.append("\n")
        elif tag == f"{W}br":
            parts.append("\n" if child.get(f"{W}type", "textWrapping") == "textWrapping" else "")
        elif tag == f"{W}noBreakHyphen":
            parts.append("-")
    return "".join(parts)


def paragraph_text(paragraph: Any) -> str:
    """python-docx's `Paragraph.text`: its runs, and the runs of its hyperlinks."""
    parts = []
    for child in paragraph:
        if child.tag == f"{W}r":
            parts.append(_run_text(child))
        elif child.tag == f"{W}hyperlink":
            parts.extend(_run_text(run) for run in child.iter(f"{W}r"))
    return "".join(parts)


def _style_id(paragraph: Any) -> str:
    style = paragraph.find(f"{W}pPr/{W}pStyle")
    return style.get(f"{W}val", "") if style is not None else ""


def _row_cells(row: Any, above: dict[int, str]) -> list[str]:
    """A table row's cell texts as python-docx's `row.cells` gives them; `above`: the text in
    each grid column of the row before (a vertically merged cell continues it), updated."""
    cells, column = [], 0
    for cell in row.iter(f"{W}tc"):
        if cell.getparent() is not row:
            continue  # a nested table's cell: its text is in its own cell's paragraphs
        props = cell.find(f"{W}tcPr")
        span = props.find(f"{W}gridSpan") if props is not None else None
        merge = props.find(f"{W}vMerge") if props is not None else None
        width = int(span.get(f"{W}val", "1")) if span is not None else 1
        if merge is not None and merge.get(f"{W}val", "continue") == "continue":
            text = above.get(column, "")
        else:
            text = "\n".join(paragraph_text(p) for p in cell.findall(f"{W}p"))
        for offset in range(width):
            above[column + offset] = text
            cells.append(text)
        column += width
    return cells


def blocks(
    data: bytes, heading_level: Callable[[str], int], marked: Callable[[str, int], str]
) -> Iterator[str]:
    """The DOCX's blocks of text in `extract_docx`'s order: body paragraphs (headings marked),
    then each table row."""
    from lxml import etree

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        styles = _style_names(archive)
        with tempfile.TemporaryFile("w+", encoding="utf-8") as tables:
            with archive.open(BODY_PART) as body:
                yield from _body(etree, body, styles, heading_level, marked, tables)
            tables.seek(0)
            for line in tables:
                yield line.rstrip("\n").replace("\0", "\n")


def _body(
    etree: Any,
    body: IO[bytes],
    styles: dict[str, str],
    heading_level: Callable[[str], int],
    marked: Callable[[str, int], str],
    tables: IO[str],
) -> Iterator[str]:
    for _, element in etree.iterparse(body, events=("end",), tag=(f"{W}p", f"{W}tbl")):
        parent = element.getparent()
        if parent is None or parent.tag != f"{W}body":
            continue  # inside a table: read with it
        if element.tag == f"{W}p":
            text = paragraph_text(element).strip()
            if text:
                yield marked(text, heading_level(styles.get(_style_id(element), "")))
        else:
            above: dict[int, str] = {}
            for row in element.findall(f"{W}tr"):
                cells = [c.strip() for c in _row_cells(row, above) if c.strip()]
                if cells:  # one line each; newlines inside cells kept as NULs
                    tables.write(" | ".join(cells).replace("\n", "\0") + "\n")
        element.clear()
        while element.getprevious() is not None:  # what was read is dropped from the tree
            del parent[0]
