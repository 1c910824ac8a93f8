"""Snippets: the best short passage of a hit, with the query's terms marked.

Terms match by Snowball stem ("terminate" marks "termination"), the way the full-text index
matches them (`docsearch.text` owns words, stems and identifiers). Inside a chunk, overlapping
sentence windows are scored by the identifiers they contain verbatim, then the number of
distinct query terms, then total hits (BM25's idf is useless across overlapping windows of one
chunk); the best window becomes the snippet.
Not here: PDF coordinates (we have none from pypdf), cross-chunk passages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from docsearch.text import WORD, content_stems, identifiers, stem

if TYPE_CHECKING:
    from docsearch.query import ParsedQuery

_SENTENCE = re.compile(r"(?<=[.!?;:])\s+|\n+")


@dataclass(frozen=True)
class Snippet:
    """A hit's best passage as shown, and where it lies in its document.

    `text` is the passage with each run of whitespace as one space and "… " / " …" where the
    chunk goes on; `marks` are the spans of `text` to highlight, which renderers wrap (`marked`,
    the UI's <mark>). `char_start:char_end` is the passage's span in the document's extracted
    text (the offsets chunks are stored with); `anchor` is where its first marked term starts
    there (the page a preview opens at).
    """

    text: str
    marks: tuple[tuple[int, int], ...] = ()
    char_start: int = 0
    char_end: int = 0
    anchor: int = 0

    def marked(self, open_mark: str = "**", close_mark: str = "**") -> str:
        out, last = [], 0
        for start, end in self.marks:
            out += [self.text[last:start], open_mark, self.text[start:end], close_mark]
            last = end
        out.append(self.text[last:])
        return "".join(out)

    def __str__(self) -> str:
        return self.marked()


def mark_spans(text: str, terms: Set[str], idents: Sequence[str]) -> tuple[tuple[int, int], ...]:
    spans = []
    # The distinct words first (C-level loops over the cached stems), then the spans of those
    # that match: most of a passage's words are not query terms.
    matching = set(filter(lambda w: stem(w) in terms, set(WORD.findall(text)))) if terms else ()
    if matching:
        spans = [m.span() for m in WORD.finditer(text) if m[0] in matching]
    for ident in idents:
        spans += [m.span() for m in re.finditer(re.escape(ident), text, re.IGNORECASE)]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return tuple(merged)


def _windows(text: str, max_chars: int) -> tuple[list[tuple[int, int, range]], list[range]]:
    """Consecutive sentence runs of up to `max_chars` as (start, end, the sentences it holds
    whole: empty for one long sentence cut at `max_chars`), and the sentences' spans."""
    bounds = [0] + [m.end() for m in _SENTENCE.finditer(text)] + [len(text)]
    sentences = [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip()]
    windows = []
    for i, first in enumerate(sentences):
        last = i
        while last + 1 < len(sentences) and sentences[last + 1].stop - first.start <= max_chars:
            last += 1
        end = sentences[last].stop
        whole = range(i, last + 1) if end - first.start <= max_chars else range(0)
        windows.append((first.start, min(end, first.start + max_chars), whole))
    return windows or [(0, min(len(text), max_chars), range(0))], sentences


def _counts(passage: str, terms: Set[str], idents: Sequence[str]) -> tuple[set[str], set[str], int]:
    """(identifiers present, distinct query terms present, total term hits) of a passage."""
    # map and filter over the cached stem: the words are counted in C-level loops
    hits = list(filter(terms.__contains__, map(stem, WORD.findall(passage)))) if terms else []
    found: set[str] = set()
    if idents:
        lowered = passage.lower()
        found = {i for i in idents if i.lower() in lowered}
    return found, set(hits), len(hits)


def _best_window(
    text: str,
    windows: list[tuple[int, int, range]],
    sentences: list[range],
    terms: Set[str],
    idents: Sequence[str],
) -> int:
    """The window with the most identifiers, then distinct terms, then hits (earliest on ties).
    Each sentence is counted once: words and identifiers never cross a sentence boundary (a
    run of whitespace), so a window's counts are its sentences' counts put together."""
    per_sentence = [_counts(text[s.start : s.stop], terms, idents) for s in sentences]

    def score(window: tuple[int, int, range]) -> tuple[int, int, int]:
        start, end, whole = window
        parts = [per_sentence[i] for i in whole] or [_counts(text[start:end], terms, idents)]
        found = set().union(*(p[0] for p in parts))
        present = set().union(*(p[1] for p in parts))
        return len(found), len(present), sum(p[2] for p in parts)

    return max(range(len(windows)), key=lambda i: (score(windows[i]), -i))


def make_snippet(
    text: str, query: str | ParsedQuery, max_chars: int = 320, offset: int = 0
) -> Snippet:
    """The best window of `text` for `query`, with marks; `text` starts at character `offset`
    of its document (a chunk's char_start), so the snippet's span is the document's. A search
    passes its ParsedQuery (its stems and identifiers worked out once for all its snippets)."""
    if isinstance(query, str):
        terms, idents = content_stems(query), identifiers(query)
    else:
        terms, idents = query.stems, query.identifiers
    windows, sentences = _windows(text, max_chars)
    best = 0
    if len(windows) > 1 and (terms or idents):
        best = _best_window(text, windows, sentences, terms, idents)
    start, end, _ = windows[best]
    in_source = mark_spans(text[start:end], terms, idents)
    anchor = offset + start + (in_source[0][0] if in_source else 0)
    passage = " ".join(text[start:end].split())
    prefix = "… " if start > 0 else ""
    suffix = " …" if end < len(text.rstrip()) else ""
    passage = prefix + passage + suffix
    marks = mark_spans(passage, terms, idents)
    return Snippet(passage, marks, offset + start, offset + end, anchor)
