"""EPUB: the zip read directly (no EPUB library): container.xml names the package (OPF), whose
spine orders the chapters; each chapter's XHTML is rendered by the HTML reader (`web`) and is a
page labelled with the chapter's title (its first heading, else its title element, else its
file name). The zip's unpacked size is checked before anything is inflated; XML is parsed
without entities or network access.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
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

OPF = "{http://www.idpf.org/2007/opf}"
DC = "{http://purl.org/dc/elements/1.1/}"
CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
XHTML_TYPES = ("application/xhtml+xml", "text/html")


def extract_epub(path: Path, data: bytes, limits: Limits) -> Document:
    if not data:
        raise ExtractionError("empty file")
    check_unpacked_size(data, limits, "EPUB")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            title, chapters = _chapters(archive)
            pages, labels, total = [], {}, 0
            for name in chapters:
                label, text = _chapter(archive.read(name), name)
                total += len(text)
                if total > limits.max_text_chars:
                    raise text_too_big(total, limits, "its text")
                if text.strip():
                    pages.append(text)
                    labels[len(pages)] = label
    except ExtractionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken zip, a missing part, bad XML
        raise ExtractionError(f"corrupt EPUB: {describe(exc)}") from exc
    if not pages:
        raise ExtractionError("EPUB without text")
    doc = make_document(path, title, pages, [])
    doc.labels = labels
    return doc


def _xml(raw: bytes) -> Any:
    from lxml import etree  # type: ignore[import-untyped]

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    return etree.fromstring(raw, parser)


def _chapters(archive: zipfile.ZipFile) -> tuple[str, list[str]]:
    """The book's title and its chapters' part names in reading order."""
    container = _xml(archive.read("META-INF/container.xml"))
    rootfile = container.find(f".//{CONTAINER}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise ExtractionError("corrupt EPUB: no package named in META-INF/container.xml")
    opf_name = rootfile.get("full-path")
    package = _xml(archive.read(opf_name))
    base = posixpath.dirname(opf_name)
    found = package.find(f".//{DC}title")
    title = " ".join((found.text or "").split()) if found is not None else ""
    items = {
        item.get("id"): item
        for item in package.iter(f"{OPF}item")
        if item.get("media-type") in XHTML_TYPES and item.get("href")
    }
    spine = [ref.get("idref") for ref in package.iter(f"{OPF}itemref")]
    order = [items[idref] for idref in spine if idref in items] or list(items.values())
    names = set(archive.namelist())
    chapters = [posixpath.normpath(posixpath.join(base, item.get("href"))) for item in order]
    return title, [name for name in chapters if name in names]


def _chapter(raw: bytes, name: str) -> tuple[str, str]:
    """A chapter's label and text (Markdown-ish, as the HTML reader renders it)."""
    from bs4 import BeautifulSoup

    from docsearch.indexer.readers.encoding import declared_charset
    from docsearch.indexer.readers.web import html_blocks

    codec = declared_charset(raw[:1024]) or "utf-8"
    soup = BeautifulSoup(raw.decode(codec, "replace"), "html.parser")
    blocks = html_blocks(soup)
    heading = next((b.lstrip("#").strip() for b in blocks if b.startswith("#")), "")
    title_tag = soup.find("title")
    label = heading or (title_tag.get_text(" ", strip=True) if title_tag else "")
    return (label or posixpath.basename(name))[:200], "\n\n".join(blocks)
