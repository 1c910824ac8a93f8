"""HTML, rendered to Markdown-ish text: visible blocks, headings as '#' lines (so the chunker
sees one structure for every format). Also used for the XHTML of EPUB chapters and e-mail bodies."""

from __future__ import annotations

from pathlib import Path

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import Document, Limits, make_document
from docsearch.indexer.readers.encoding import declared_charset, judge
from docsearch.indexer.readers.text import decode_text

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


def marked(text: str, heading_level: int) -> str:
    """A block of text, with '#' marks when it is a heading."""
    return f"{'#' * heading_level} {text}" if heading_level else text


def html_blocks(soup) -> list[str]:  # type: ignore[no-untyped-def]
    """The visible text of `soup` in blocks, in one pass over the tree.

    Iterative and linear in the size of the tree: a deeply nested file (100k levels of <li>)
    neither recurses nor searches each element's subtree again.
    """
    from bs4 import CData, NavigableString, Tag

    blocks: list[str] = []
    strings: list[str] = []  # the text of the block being read

    def cut(heading_level: int) -> None:
        if text := " ".join(" ".join(strings).split()):
            blocks.append(marked(text, heading_level))
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
    codec = judge(lambda: iter([data]))  # refuses empty and binary files
    if not codec.startswith("utf-16") and codec != "utf-8-sig":  # a byte order mark outranks it
        codec = declared_charset(data[:4096]) or codec
    soup = BeautifulSoup(decode_text(data, warnings, codec), "html.parser")
    text = "\n\n".join(html_blocks(soup))
    if not text.strip():
        raise ExtractionError("HTML without visible text")
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text().split()) if title_tag else ""
    doc = make_document(path, title, [text], warnings)
    doc.encoding = codec
    return doc
