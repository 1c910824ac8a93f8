"""PDF (pypdf's text layer; pages without one rendered by pypdfium2 and OCR'd) and images (PNG,
JPEG, TIFF with its pages: every frame OCR'd). Not here: the OCR engines and their cache (`ocr`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from docsearch.errors import ExtractionError
from docsearch.indexer.ocr import PageReader, missing_engine, page_reader
from docsearch.indexer.readers.base import (
    Document,
    Limits,
    describe,
    make_document,
    ranges,
    text_too_big,
)

if TYPE_CHECKING:
    from PIL import Image


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
        return make_document(path, title, page_texts, warnings)
    for number, image in zip(blank, _pdf_page_images(data, blank), strict=True):
        page_texts[number - 1] = ocr.text(image)
    return ocr_document(path, title, page_texts, blank, ocr)


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


def ocr_document(
    path: Path, title: str, texts: list[str], ocr_pages: list[int], ocr: PageReader
) -> Document:
    """A Document some of whose pages OCR read; pages where it found nothing are warned of."""
    empty = [n for n in ocr_pages if not texts[n - 1].strip()]
    if len(empty) == len(texts):
        raise ExtractionError(f"OCR ({ocr.engine}) found no text on any of {len(texts)} pages")
    warnings = [f"OCR ({ocr.engine}) found no text on pages {ranges(empty)}"] if empty else []
    doc = make_document(path, title, texts, warnings)
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
    return ocr_document(path, "", texts, list(range(1, len(texts) + 1)), ocr)
