"""A document's pages from the store: where each page starts in the extracted text (recorded in
its file record when it is indexed), and one page's text rebuilt from the chunks that cover it.

Why: the server answers a page's text (`/pages/N`) without extracting the document again, which
took seconds for a long PDF and ran the parsers in the server's own process. Chunks hold the
document's text at their character offsets (`char_start`, `char_end`; overlapping windows),
so the chunks that overlap a page's span give its text back; the gaps between chunks (blank
text the chunker left out) come back as spaces, as in the documents table's whole text.
Not here: the extraction that lays pages out (`extract.build_document`, `PageSink`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from docsearch.indexer.extract import PAGE_SEPARATOR, Document

if TYPE_CHECKING:
    from docsearch.store.reads import Store


def page_starts(doc: Document) -> list[int]:
    """Where each page starts in `doc.text` (a spooled document's pieces read back in order)."""
    if not doc.spool:
        return [page.char_offset for page in doc.pages]
    starts: list[int] = []
    last = None
    for piece in doc.iter_pages():
        if piece.number != last:
            starts.append(piece.char_offset)
            last = piece.number
    return starts


def encode_starts(starts: Sequence[int]) -> str:
    """Page starts as the gaps between them, comma-separated: short for a file record."""
    return ",".join(str(b - a) for a, b in zip([0, *starts], starts, strict=False))


def encode_file_starts(doc: Document) -> str:
    """The page starts of a file's record: its one document's, or for a file that holds several
    (an e-mail and its attachments) a JSON map from each document's `part` to its starts."""
    documents = doc.documents()
    if len(documents) == 1:
        return encode_starts(page_starts(doc))
    return json.dumps({one.part: encode_starts(page_starts(one)) for one in documents})


def starts_of(recorded: str, part: str) -> list[int]:
    """The page starts of the document `part` of a file (its main one: "") from its record."""
    if recorded.startswith("{"):
        return decode_starts(json.loads(recorded).get(part, ""))
    return [] if part else decode_starts(recorded)


def decode_starts(text: str) -> list[int]:
    starts, at = [], 0
    for gap in text.split(",") if text else []:
        at += int(gap)
        starts.append(at)
    return starts


class PageNotFound(LookupError):
    """No such page, or the document was indexed before page starts were recorded."""


def page_text(store: Store, path: str, doc_id: str, number: int, part: str = "") -> str:
    """Page `number` (1-based) of the document `part` of the file at `path` (an attachment's
    chain of names; "" for the file's own), from its chunks; PageNotFound without one (or
    without its page starts: indexed before they were recorded)."""
    from docsearch.indexer.filters import sql_str

    record = store.file_record(path)
    starts = starts_of(record.page_starts, part) if record else []
    if not starts:
        raise PageNotFound(
            "where its pages start was not recorded (indexed by an older docsearch): "
            "rebuild the collection (docsearch index FOLDER --switch) to read its pages here"
        )
    if not 1 <= number <= len(starts):
        raise PageNotFound(f"no page {number}: the document has {len(starts)}")
    begin = starts[number - 1]
    end = starts[number] - len(PAGE_SEPARATOR) if number < len(starts) else None
    where = f"doc_id = {sql_str(doc_id)} AND char_end > {begin}"
    if end is not None:
        where += f" AND char_start < {end}"
    rows = store.rows(where, columns=["char_start", "char_end", "text"])
    return _span(sorted(rows, key=lambda r: (r["char_start"], r["char_end"])), begin, end)


def _span(chunks: Sequence[dict[str, Any]], begin: int, end: int | None) -> str:
    """The text from `begin` to `end` (None: to the last chunk's end) laid from chunks sorted
    by where they start: overlaps once, gaps as spaces."""
    parts, at = [], begin
    for chunk in chunks:
        start, stop, text = chunk["char_start"], chunk["char_end"], chunk["text"]
        if stop <= at:
            continue
        if start > at:
            parts.append(" " * (start - at))
            at = start
        upto = stop if end is None else min(stop, end)
        parts.append(text[at - start : upto - start])
        at = upto
        if end is not None and at >= end:
            break
    return "".join(parts).strip()
