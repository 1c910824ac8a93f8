"""Snippets: the best short passage of a hit, with the query's terms marked.

Terms match by Snowball stem ("terminate" marks "termination"), the way the full-text index
matches them (`docsearch.text` owns words, stems and identifiers). Inside a chunk, overlapping
sentence windows are scored by the identifiers they contain verbatim, then the number of
distinct query terms, then total hits (BM25's idf is useless across overlapping windows of one
chunk); the best window becomes the snippet. A chunk's query-term words are found once
(`_term_words`) and each window is scored and marked from them: a search makes ~30 snippets of
~1,000-character chunks, and scanning each window's text again cost a short query ~1.2 ms more.
Not here: PDF coordinates (we have none from pypdf), cross-chunk passages.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from docsearch.text import content_stems, distinct_words, identifiers, stem, stems

if TYPE_CHECKING:
    from docsearch.query import ParsedQuery

# Where a sentence ends: whitespace after . ! ? ; or : (the punctuation kept with the sentence
# before), or a line break. Each match's end starts the next sentence. Written to begin with one
# character class (the lookbehinds say which it was): the regex engine then skips ahead to those
# characters, 3.5x faster on contract text than `[.!?;:]\s+|\n+`, which matches the same spans.
_SENTENCE = re.compile(r"[.!?;:\n](?:(?<=[.!?;:])\s+|(?<=\n)\n*)")
_Found = tuple[int, int, str]  # a query-term word: where it starts and ends, its stem
_WORD_REST = re.compile(r"\w*")
# A Snowball English stem rewrites at most the last two characters of what it keeps of a word
# ("sensibility" -> "sensibl", "dying" -> "die"): every word stemming to a term starts with the
# term less its last STEM_REWRITE characters (checked on the 225,900 distinct words of the
# shared evaluation data by benchmarks/stem_heads.py, and in the tests on the algorithm's
# suffixes and exceptions).
STEM_REWRITE = 2
MIN_HEAD = 2  # a shorter head ("law" -> "l") matches too many words: stem them all instead
_Window = tuple[int, int, range]  # start, end, the sentences it holds whole (see `_windows`)


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
    return _merged([(start, end) for start, end, _ in _term_words(text, terms)], text, idents)


def _merged(
    spans: list[tuple[int, int]], text: str, idents: Sequence[str]
) -> tuple[tuple[int, int], ...]:
    """`spans` and those of `text`'s identifiers (any case), overlapping ones merged, in order."""
    for ident in idents:
        spans += [m.span() for m in re.finditer(re.escape(ident), text, re.IGNORECASE)]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return tuple(merged)


def _term_words(text: str, terms: Set[str]) -> list[_Found]:
    """(start, end, stem) of each word of `text` that stems to a query term, in order. Each such
    word starts with its stem less the stem's last STEM_REWRITE characters (lower-cased): only
    the words that start so are stemmed, found by str.find in the lower-cased text. Where a
    term's stem is too short for that to narrow much, or lower-casing changes the text's length
    (positions would shift), every distinct word is stemmed instead (`_stemmed_words`)."""
    if not terms:
        return []
    heads, lowered = stem_heads(terms), text.lower()
    if heads is None or len(lowered) != len(text):
        return _stemmed_words(text, terms)
    found = set()
    for head in heads:
        at = lowered.find(head)
        while at >= 0:
            if at and _word_char(text[at - 1]):  # inside a word, not its start
                at = lowered.find(head, at + 1)
                continue
            end = _WORD_REST.match(text, at + len(head)).end()  # type: ignore[union-attr]
            word_stem = stem(text[at:end])
            if word_stem in terms:
                found.add((at, end, word_stem))
            at = lowered.find(head, end)
    return sorted(found)


def stem_heads(terms: Set[str]) -> set[str] | None:
    """Each term less its last STEM_REWRITE characters, or None where one is shorter than
    MIN_HEAD (`_term_words` then stems every word)."""
    heads = {term[:-STEM_REWRITE] for term in terms}
    return heads if min(map(len, heads), default=0) >= MIN_HEAD else None


def _stemmed_words(text: str, terms: Set[str]) -> list[_Found]:
    """`_term_words` by stemming every distinct word of `text` (C-level lookups of words met
    before), then looking for only the matching ones (str.find)."""
    distinct = list(distinct_words(text))
    matching = {w: s for w, s in zip(distinct, stems(distinct), strict=True) if s in terms}
    if not matching:
        return []
    found = []
    for word, word_stem in matching.items():
        at = text.find(word)
        while at >= 0:
            end = at + len(word)
            # a whole word: no word character (what `\w` matches) either side
            if not (at and _word_char(text[at - 1])) and not (
                end < len(text) and _word_char(text[end])
            ):
                found.append((at, end, word_stem))
            at = text.find(word, end)  # an occurrence starting inside this one is no whole word
    return sorted(found)


def _windows(text: str, max_chars: int) -> tuple[list[_Window], list[range]]:
    """Consecutive sentence runs of up to `max_chars` as (start, end, the sentences it holds
    whole: empty for one long sentence cut at `max_chars`), and the sentences' spans."""
    bounds = [0] + [m.end() for m in _SENTENCE.finditer(text)] + [len(text)]
    sentences = [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip()]
    windows, last = [], 0
    for i, first in enumerate(sentences):
        # The run that fits from sentence i reaches at least as far as the one from i - 1 (it
        # starts later), so `last` only moves on: one pass, not a scan from each sentence.
        last = max(last, i)
        while last + 1 < len(sentences) and sentences[last + 1].stop - first.start <= max_chars:
            last += 1
        end = sentences[last].stop
        whole = range(i, last + 1) if end - first.start <= max_chars else range(0)
        windows.append((first.start, min(end, first.start + max_chars), whole))
    return windows or [(0, min(len(text), max_chars), range(0))], sentences


def _idents_in(passage: str, idents: Sequence[str]) -> set[str]:
    if not idents:
        return set()
    lowered = passage.lower()
    return {i for i in idents if i.lower() in lowered}


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"  # what `\w` matches


def _window_words(text: str, window: _Window, words: list[_Found], terms: Set[str]) -> list[_Found]:
    """The query-term words inside `window` (of the chunk's `words`), and, where the window
    cuts a long sentence inside a word, that word's cut piece if its stem is a query term (a
    snippet counts and marks the words it shows, as they show)."""
    start, end, whole = window
    inside = [one for one in words if start <= one[0] and one[1] <= end]
    if whole or not terms or end >= len(text) or not _word_char(text[end]):
        return inside
    at = end
    while at > start and _word_char(text[at - 1]):
        at -= 1
    piece = stem(text[at:end]) if at < end else ""
    return inside + [(at, end, piece)] if piece in terms else inside


def _best_window(
    text: str,
    windows: list[_Window],
    sentences: list[range],
    words: list[_Found],
    terms: Set[str],
    idents: Sequence[str],
) -> int:
    """The window with the most identifiers, then distinct terms, then hits (earliest on ties).
    A window of whole sentences counts as its sentences put together: words never cross a
    sentence boundary (a run of whitespace), so each lies in the sentence that starts at or
    before it. One long sentence cut at the window's end counts what the window shows."""
    per_sentence: list[list[str]] = [[] for _ in sentences]
    starts = [one.start for one in sentences]
    for at, _, word_stem in words:
        per_sentence[bisect_right(starts, at) - 1].append(word_stem)
    held = [_idents_in(text[one.start : one.stop], idents) for one in sentences] if idents else []

    def score(window: _Window) -> tuple[int, int, int]:
        start, end, whole = window
        if not whole:
            shown = [s for _, _, s in _window_words(text, window, words, terms)]
            return len(_idents_in(text[start:end], idents)), len(set(shown)), len(shown)
        hits = [s for i in whole for s in per_sentence[i]]
        named = len(set().union(*(held[i] for i in whole))) if held else 0
        return named, len(set(hits)), len(hits)

    return max(range(len(windows)), key=lambda i: (score(windows[i]), -i))


def _first_mark(window_text: str, shown: list[tuple[int, int]], idents: Sequence[str]) -> int:
    """Where the window's first marked term starts in it (0 for none)."""
    firsts = [start for start, _ in shown[:1]]
    for ident in idents:
        found = re.search(re.escape(ident), window_text, re.IGNORECASE)
        firsts += [found.start()] if found else []
    return min(firsts, default=0)


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
    words = _term_words(text, terms)
    best = 0
    if len(windows) > 1 and (words or idents):  # without either every window scores nothing
        best = _best_window(text, windows, sentences, words, terms, idents)
    start, end, _ = windows[best]
    window = text[start:end]
    shown = [(a - start, b - start) for a, b, _ in _window_words(text, windows[best], words, terms)]
    anchor = offset + start + _first_mark(window, shown, idents)
    body = " ".join(window.split())
    prefix = "… " if start > 0 else ""
    suffix = " …" if end < len(text.rstrip()) else ""
    passage = prefix + body + suffix
    moved = [(a + len(prefix), b + len(prefix)) for a, b in _collapsed(window, body, shown)]
    return Snippet(passage, _merged(moved, passage, idents), offset + start, offset + end, anchor)


def _collapsed(window: str, body: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` of `window` (each starting at a non-space character, none crossing whitespace)
    where they are in `body`, the window with each run of whitespace as one space and none at
    either end: what precedes a span there is the words before it joined by single spaces, and
    one more space where whitespace parts it from them."""
    if body == window or not spans:
        return spans
    moved = []
    for start, end in spans:
        before = window[:start]
        words = before.split()  # C-level: a window's words through a regex cost ~15 us a snippet
        at = len(" ".join(words)) + (1 if words and before[-1].isspace() else 0)
        moved.append((at, at + end - start))
    return moved
