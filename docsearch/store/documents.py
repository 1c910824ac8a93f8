"""A document's row in the docs table, made from its chunk rows: its whole text (capped at
DOC_TEXT_CHARS), pages, chunk count and mean vector; one row per document (a file with
attachments holds several).
Not here: the table's columns (`schema.py`), writing the rows (`writes.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

# Columns of the chunk rows a document row is made from.
DOC_SOURCE = "doc_id path title text ordinal page_start page_end char_start char_end".split()
# The most text a docs row holds: the document's text up to the end of its last chunk that ends
# within this many characters. Every file the default 16 million character text limit admits
# is held whole, so its whole-document BM25 is that of all its words; a longer one is matched
# on its first 16 million characters (its chunks hold all of it), and a row never costs more
# than about 100 MB to build, index or read.
DOC_TEXT_CHARS = 16_000_000


def document_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The docs-table rows of the files whose chunk rows (all of each file's) are `rows`: one
    per document (a file with attachments holds several)."""
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    documents = []
    for chunks in by_doc.values():
        builder = DocumentBuilder()
        builder.add(sorted(chunks, key=lambda r: r["ordinal"]))
        documents.append(builder.row())
    return documents


class DocumentBuilder:
    """A file's docs row, made from its chunk rows as they come (in order, a group at a time):
    its text (`whole_text`, at most DOC_TEXT_CHARS), pages, chunk count and mean vector."""

    def __init__(self, max_chars: int = DOC_TEXT_CHARS) -> None:
        self.max_chars = max_chars
        self._first: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._end = 0  # the text's length so far
        self._full = False  # a chunk ended past max_chars: the text is complete
        self._n, self._page_start, self._page_end = 0, 0, 0
        self._sum: np.ndarray | None = None  # (dim,) float64

    def add(self, chunks: Sequence[dict[str, Any]]) -> None:
        if not chunks:
            return
        if self._first is None:
            self._first = {key: chunks[0][key] for key in ("doc_id", "path", "title")}
            self._page_start = chunks[0]["page_start"]
        self._n += len(chunks)
        self._page_start = min(self._page_start, *(c["page_start"] for c in chunks))
        self._page_end = max(self._page_end, *(c["page_end"] for c in chunks))
        self._add_text(chunks)
        if "vector" in chunks[0]:  # summed in float64, row after row in order
            block = np.asarray([c["vector"] for c in chunks], dtype=np.float64)
            if self._sum is not None:
                block = np.vstack([self._sum[None], block])
            self._sum = block.sum(axis=0)

    def _add_text(self, chunks: Sequence[dict[str, Any]]) -> None:
        for chunk in chunks:
            if self._full or chunk["char_end"] > self.max_chars:
                self._full = True
                return
            start = chunk["char_start"]
            self._parts.append(" " * (start - self._end) if start > self._end else "")
            self._parts.append(chunk["text"][max(0, self._end - start) :])
            self._end = max(self._end, chunk["char_end"])

    def row(self) -> dict[str, Any]:
        assert self._first is not None, "a document row needs at least one chunk"
        row = {**self._first, "text": "".join(self._parts), "n_chunks": self._n}
        row["page_start"], row["page_end"] = self._page_start, self._page_end
        if self._sum is not None:
            row["vector"] = mean_vector(self._sum, self._n).tolist()
        return row


def mean_vector(total: np.ndarray, count: int) -> np.ndarray:
    """A document's vector from the (float64) sum of its `count` chunk vectors: their mean,
    scaled to unit length (a zero mean stays zero); float32."""
    mean = total / count
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm else mean).astype(np.float32)


def whole_text(chunks: Sequence[dict[str, Any]], max_chars: int = DOC_TEXT_CHARS) -> str:
    """A document's text from its chunks (in order): every character at its own offset, up to
    the end of the last chunk that ends within `max_chars` characters.

    The chunker leaves out only whitespace (between pieces, and around the text), so the
    characters no chunk holds are written as spaces: the same words at the same offsets, which is
    all the full-text index reads. Overlapping chunks contribute their new characters only.
    """
    builder = DocumentBuilder(max_chars)
    builder._add_text(chunks)
    return "".join(builder._parts)
