"""Slides and spreadsheets: PowerPoint .pptx (python-pptx), Excel .xlsx (openpyxl, read-only),
and the OpenDocument formats .odt/.ods/.odp (their content.xml parsed as it is inflated, lxml).

Provenance as the formats have it: a slide is a page (its number the slide's); a spreadsheet's
rows are pages of ROWS_PER_PAGE rows each, labelled with the sheet's name and the row range
("Budget, rows 1-100"); an ODF text document is one page. Every one of these is a zip: the
unpacked size of its parts is summed before anything is inflated (`check_unpacked_size`), and
the text is counted as it is read, so a sheet of a million cells stops at the text limit
instead of filling memory. The libraries are optional (`pip install 'docsearch[office]'`): a
missing one fails the file with its install line. Not here: DOCX (`word`), RTF and legacy
.doc (`legacy`).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import (
    Document,
    Limits,
    check_unpacked_size,
    describe,
    make_document,
    text_too_big,
)

ROWS_PER_PAGE = 100  # spreadsheet rows per page (a hit cites its sheet and row range)
INSTALL_OFFICE = "pip install 'docsearch[office]'"


def need(module: str, package: str) -> Any:
    """Import an optional reader library, or fail the file with the line that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ExtractionError(f"reading this needs {package}: {INSTALL_OFFICE}") from None


class TextBudget:
    """Counts a file's text as it is read: past the limit, the file is refused at once."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.chars = limits, 0

    def add(self, text: str) -> str:
        self.chars += len(text)
        if self.chars > self.limits.max_text_chars:
            raise text_too_big(self.chars, self.limits, "its text")
        return text


def _opened(data: bytes, limits: Limits, kind: str) -> None:
    if not data:
        raise ExtractionError("empty file")
    check_unpacked_size(data, limits, kind)


def _paged(path: Path, title: str, pages: list[str], labels: dict[int, str]) -> Document:
    if not any(page.strip() for page in pages):
        raise ExtractionError("no text in it")
    doc = make_document(path, title, pages, [])
    doc.labels = labels
    return doc


# ---------------------------------------------------------------------------------------------
# PowerPoint


def extract_pptx(path: Path, data: bytes, limits: Limits) -> Document:
    """Each slide a page: its shapes' text (tables and groups too), then its notes."""
    _opened(data, limits, "PPTX")
    pptx = need("pptx", "python-pptx")
    try:
        deck = pptx.Presentation(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - bad XML, missing parts, not a deck
        raise ExtractionError(f"corrupt PPTX: {describe(exc)}") from exc
    budget, pages = TextBudget(limits), []
    for slide in deck.slides:
        blocks = [text for shape in slide.shapes for text in _shape_texts(shape)]
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                blocks.append(notes.text.strip())
        pages.append(budget.add("\n\n".join(blocks)))
    title = (deck.core_properties.title or "").strip()
    return _paged(path, title, pages, {})


def _shape_texts(shape: Any) -> Iterator[str]:
    if getattr(shape, "shape_type", None) == 6:  # a group: MSO_SHAPE_TYPE.GROUP
        for inner in shape.shapes:
            yield from _shape_texts(inner)
        return
    if getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
        yield shape.text_frame.text.strip()
    if getattr(shape, "has_table", False):
        for row in shape.table.rows:
            cells = [cell.text.strip() for cell in row.cells if cell.text.strip()]
            if cells:
                yield " | ".join(cells)


# ---------------------------------------------------------------------------------------------
# Excel


def extract_xlsx(path: Path, data: bytes, limits: Limits) -> Document:
    """Each sheet's rows as `cell | cell` lines, ROWS_PER_PAGE rows a page, labelled."""
    _opened(data, limits, "XLSX")
    openpyxl = need("openpyxl", "openpyxl")
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # noqa: BLE001 - not a workbook, bad XML
        raise ExtractionError(f"corrupt XLSX: {describe(exc)}") from exc
    try:
        sheets = [(sheet.title, sheet.iter_rows(values_only=True)) for sheet in book.worksheets]
        pages, labels = sheet_pages(sheets, TextBudget(limits))
        title = (book.properties.title or "").strip() if book.properties else ""
    finally:
        book.close()
    return _paged(path, title, pages, labels)


def sheet_pages(
    sheets: list[tuple[str, Iterator[tuple[Any, ...]]]], budget: TextBudget
) -> tuple[list[str], dict[int, str]]:
    """Sheets (name, rows of cell values) as pages of ROWS_PER_PAGE rows and their labels."""
    pages: list[str] = []
    labels: dict[int, str] = {}
    for name, rows in sheets:
        lines: list[str] = []
        first = last = 0  # the rows with text on the page being made
        for number, row in enumerate(rows, start=1):
            cells = [_cell(value) for value in row if value is not None]
            line = " | ".join(cell for cell in cells if cell)
            if not line:
                continue
            if lines and number > first + ROWS_PER_PAGE - 1:
                labels[len(pages) + 1] = _rows_label(name, first, last)
                pages.append("\n".join(lines))
                lines = []
            if not lines:
                first = number
            lines.append(budget.add(line))
            last = number
        if lines:
            labels[len(pages) + 1] = _rows_label(name, first, last)
            pages.append("\n".join(lines))
    return pages, labels


def _rows_label(sheet: str, first: int, last: int) -> str:
    return f"{sheet}, row {first}" if first == last else f"{sheet}, rows {first}-{last}"


def _cell(value: Any) -> str:
    text = str(value).strip()
    return text[:-2] if isinstance(value, float) and text.endswith(".0") else text


# ---------------------------------------------------------------------------------------------
# OpenDocument

TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
MAX_REPEAT = 1000  # an ODF row or cell "repeated" more often is read once (empty fills)


def extract_odf(path: Path, data: bytes, limits: Limits) -> Document:
    """.odt: headings and paragraphs; .ods: sheets as `extract_xlsx` lays them out; .odp: each
    slide (draw:page) a page."""
    kind = path.suffix.lower().lstrip(".").upper()
    _opened(data, limits, kind)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive, archive.open("content.xml") as xml:
            title = _odf_title(archive)
            if kind == "ODS":
                pages, labels = sheet_pages(list(_ods_sheets(xml)), TextBudget(limits))
            elif kind == "ODP":
                pages, labels = _odp_pages(xml, TextBudget(limits)), {}
            else:
                pages, labels = [_odt_text(xml, TextBudget(limits))], {}
    except ExtractionError:
        raise
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ExtractionError(f"corrupt {kind}: {describe(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 - lxml's XMLSyntaxError and kin
        raise ExtractionError(f"corrupt {kind}: {describe(exc)}") from exc
    return _paged(path, title, pages, labels)


def _parse(xml: Any, tags: tuple[str, ...]) -> Iterator[Any]:
    """`tags`' elements as each ends, parsed as the XML is inflated (no entities resolved, no
    network: a billion-laughs file reads as nothing)."""
    from lxml import etree  # type: ignore[import-untyped]

    parser = etree.iterparse(
        xml, events=("end",), tag=tags, resolve_entities=False, no_network=True, huge_tree=False
    )
    yield from (element for _, element in parser)


def _drop(element: Any) -> None:
    """Free what was read (the tree would otherwise grow with the document)."""
    element.clear()
    parent = element.getparent()
    while parent is not None and element.getprevious() is not None:
        del parent[0]


def _text_of(element: Any) -> str:
    return " ".join("".join(element.itertext()).split())


def _odt_text(xml: Any, budget: TextBudget) -> str:
    blocks = []
    for element in _parse(xml, (f"{TEXT}h", f"{TEXT}p")):
        parent = element.getparent()
        if parent is not None and parent.tag in (f"{TEXT}h", f"{TEXT}p"):
            continue  # nested in another paragraph: read with it
        text = _text_of(element)
        if text:
            level = int(element.get(f"{TEXT}outline-level", "1") or 1)
            is_heading = element.tag == f"{TEXT}h"
            blocks.append(budget.add(f"{'#' * min(level, 6)} {text}" if is_heading else text))
        _drop(element)
    return "\n\n".join(blocks)


def _ods_sheets(xml: Any) -> Iterator[tuple[str, Iterator[tuple[Any, ...]]]]:
    """The sheets, each with all its rows (read whole per sheet; rows are small)."""
    rows: list[tuple[Any, ...]] = []
    for element in _parse(xml, (f"{TABLE}table-row", f"{TABLE}table")):
        if element.tag == f"{TABLE}table-row":
            cells: list[Any] = []
            for cell in element.iter(f"{TABLE}table-cell"):
                text = _text_of(cell)
                repeat = int(cell.get(f"{TABLE}number-columns-repeated", "1") or 1)
                cells += [text or None] * (min(repeat, MAX_REPEAT) if text else 1)
            repeat = int(element.get(f"{TABLE}number-rows-repeated", "1") or 1)
            rows += [tuple(cells)] * (min(repeat, MAX_REPEAT) if any(cells) else 1)
            element.clear()
        else:
            yield element.get(f"{TABLE}name", "sheet"), iter(rows)
            rows = []
            _drop(element)


def _odp_pages(xml: Any, budget: TextBudget) -> list[str]:
    pages = []
    for page in _parse(xml, (f"{DRAW}page",)):
        blocks = [_text_of(p) for p in page.iter(f"{TEXT}p", f"{TEXT}h")]
        pages.append(budget.add("\n\n".join(b for b in blocks if b)))
        _drop(page)
    return pages


def _odf_title(archive: zipfile.ZipFile) -> str:
    from lxml import etree

    try:
        root = etree.fromstring(archive.read("meta.xml"), etree.XMLParser(resolve_entities=False))
    except (KeyError, etree.XMLSyntaxError):
        return ""
    found = root.find(".//{http://purl.org/dc/elements/1.1/}title")
    return (found.text or "").strip() if found is not None else ""
