"""Document -> chunks that fit the encoder, cut on the document's own structure.

A document that fits the encoder's window is one chunk (a long-context encoder reads it whole).
Otherwise it is split recursively: at headings (Markdown `#`, "ARTICLE VII", "7.2 Termination",
short ALL-CAPS lines), then paragraphs, lines, sentences, and only as a last resort at token
boundaries; neighbouring pieces are packed back together up to the budget. Token counts come
from the encoder's own tokenizer: the whole section once (`TokenStarts`), each chunk again.
Each chunk keeps its character span, pages and heading path.

A document arrives page by page (`chunk_pages`; a long page in several pieces) and is chunked in
sections of at most SECTION_CHARS characters, so a huge file never has its whole text, or all
its chunks, in memory. A document that fits one section (every file the default 16 million
character text limit admitted before streaming, up to 4 million) is chunked exactly as a whole;
a longer one is cut at its coarsest boundary (a heading, else a paragraph break, a line end, a
sentence end, a space) in the second half of each section, so only the chunks at those seams
can differ from chunking the whole text, and no window overlaps across a seam. Heading paths
carry across seams.
Not here: tables kept whole, late chunking, semantic (embedding-based) splits.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

from docsearch.indexer.extract import PAGE_SEPARATOR, Document, Page

CHUNKER_VERSION = 1
# Characters tokenized at a time to find where a section's tokens start (`TokenStarts`).
COUNT_BLOCK_CHARS = 200_000
# Characters chunked at a time. Counting tokens holds about 25 bytes per character of the
# counted text (the tokenizer's id lists), so this bounds the chunker's memory near 100 MB.
SECTION_CHARS = 4_000_000

CountTokens = Callable[[Sequence[str]], list[int]]
TokenSpans = Callable[[str], list[tuple[int, int]]]


@dataclass(frozen=True)
class ChunkerSettings:
    max_tokens: int  # window budget in content tokens
    overlap_tokens: int = 0  # tokens repeated from the previous window, at sentence granularity
    version: int = CHUNKER_VERSION

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    text: str
    char_start: int  # span in Document.text
    char_end: int
    page_start: int
    page_end: int
    heading_path: str  # "ARTICLE 7 > 7.2 Termination"
    n_tokens: int
    truncated: bool = False  # the encoder will cut it (only when a single token run is too long)
    # Where each page after its first starts inside it, as (offset in Document.text, page
    # number): the page of any word in it (a pin cite), without the document at hand.
    page_breaks: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Span:
    start: int
    end: int


# ---------------------------------------------------------------------------------------------
# Headings

_MARKDOWN = re.compile(r"^(#{1,6})\s+(\S.*)$")
_PART = re.compile(
    r"^(?:ARTICLE|Article|CHAPTER|Chapter|PART|Part|SCHEDULE|Schedule|EXHIBIT|Exhibit|"
    r"ANNEX|Annex|APPENDIX|Appendix)\s+(?:[IVXLC]+|\d+|[A-Z])\b"
)
_NUMBERED = re.compile(r"^(?:(?:Section|SECTION|§)\s*)?(\d{1,3}(?:\.\d{1,3}){0,4})[.)]?\s+[A-Z(]")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9§])")
_BREAKS = (re.compile(r"\n[ \t]*\n"), "\n", _SENTENCE_END)  # paragraphs, lines, sentences


def heading_level(line: str) -> int:
    """0 for body text, else the heading's depth (1 = top). Looks at one line only."""
    line = line.strip()
    if not line:
        return 0
    if m := _MARKDOWN.match(line):
        return len(m.group(1))
    if _PART.match(line):
        return 1
    if m := _NUMBERED.match(line):
        return m.group(1).count(".") + 1
    words = line.split()
    if len(words) <= 8 and line.isupper() and any(c.isalpha() for c in line) and line[-1] != ".":
        return 1
    return 0


def heading_title(line: str) -> str:
    """The label shown in a heading path: the line without '#' marks, cut at the first sentence."""
    line = _MARKDOWN.sub(r"\2", line.strip())
    first = re.split(r"(?<=\.)\s", line, maxsplit=1)[0] if len(line) > 80 else line
    return first[:80].rstrip()


# ---------------------------------------------------------------------------------------------
# Splitting a span at one kind of boundary


def _strip(text: str, span: Span) -> Span | None:
    piece = text[span.start : span.end]
    start = span.start + len(piece) - len(piece.lstrip())
    end = span.start + len(piece.rstrip())
    return Span(start, end) if end > start else None


def _cut(text: str, span: Span, offsets: list[int]) -> list[Span]:
    """Split `span` before each absolute offset in `offsets`, dropping blank pieces."""
    bounds = [span.start, *[o for o in offsets if span.start < o < span.end], span.end]
    pieces = (_strip(text, Span(a, b)) for a, b in zip(bounds, bounds[1:], strict=False))
    return [p for p in pieces if p is not None]


def _ends(pattern: str | re.Pattern[str], text: str, span: Span) -> list[int]:
    """The absolute offsets where matches of `pattern` inside `span` end."""
    return [span.start + m.end() for m in re.finditer(pattern, text[span.start : span.end])]


def _headings(text: str, span: Span) -> Iterator[tuple[int, int, str]]:
    """(start, depth, line) of each heading line in `span`."""
    for start in [span.start, *_ends("\n", text, span)]:
        end = text.find("\n", start, span.end)
        line = text[start : span.end if end < 0 else end]
        if depth := heading_level(line):
            yield start, depth, line


def split_at_headings(text: str, span: Span, level: int) -> list[Span]:
    """Cut before every line that is a heading of depth <= `level`."""
    return _cut(text, span, [start for start, depth, _ in _headings(text, span) if depth <= level])


def split_after(pattern: str | re.Pattern[str], text: str, span: Span) -> list[Span]:
    """Cut after each match of `pattern`: paragraph breaks, line ends, sentence ends."""
    return _cut(text, span, _ends(pattern, text, span))


def split_sentences(text: str, span: Span) -> list[Span]:
    return split_after(_SENTENCE_END, text, span)


# ---------------------------------------------------------------------------------------------
# The recursive splitter


class Chunker:
    """Splits documents for one encoder tokenizer and one `ChunkerSettings`."""

    def __init__(
        self, settings: ChunkerSettings, count_tokens: CountTokens, token_spans: TokenSpans
    ) -> None:
        if settings.max_tokens < 8:
            raise ValueError("max_tokens must be at least 8")
        self.settings = settings
        self.count_tokens = count_tokens
        self.token_spans = token_spans

    def chunk(self, doc: Document) -> list[Chunk]:
        return list(self.chunk_pages(doc.iter_pages()))

    def chunk_pages(self, pages: Iterable[Page], section_chars: int = 0) -> Iterator[Chunk]:
        """The chunks of a document whose pages (or pieces of pages, see `Document`) come one
        at a time, in order, a section of at most `section_chars` (default SECTION_CHARS)
        characters at a time."""
        limit = section_chars or SECTION_CHARS
        buffer, headings, ordinal = _SectionBuffer(), HeadingIndex(""), 0
        for page in pages:
            buffer.add(page)
            while buffer.chars >= limit:
                section = buffer.take(limit)
                chunks, headings = self._chunk_section(section, headings, ordinal)
                ordinal += len(chunks)
                yield from chunks
        yield from self._chunk_section(buffer.take(None), headings, ordinal)[0]

    def _chunk_section(
        self, section: Section, headings: HeadingIndex, first_ordinal: int
    ) -> tuple[list[Chunk], HeadingIndex]:
        """A section's chunks, numbered from `first_ordinal`, and the headings in force at its
        end (`headings`: those in force at its start)."""
        text = section.text
        headings = HeadingIndex(text, headings.stack)
        whole = _strip(text, Span(0, len(text)))
        if whole is None:
            return [], headings
        pieces = self._fit(text, [whole], 0, TokenStarts(text, self.token_spans).count)
        windows = self._pack(text, pieces)
        return self._finish(section, headings, windows, first_ordinal), headings

    # Levels 0..5 cut at headings of depth <= level+1, then paragraphs, lines, sentences, tokens.
    def _split(self, text: str, span: Span, level: int) -> list[Span]:
        if level < 6:
            return split_at_headings(text, span, level + 1)
        if level < 9:
            return split_after(_BREAKS[level - 6], text, span)
        return self._split_tokens(text, span)

    def _fit(
        self,
        text: str,
        spans: list[Span],
        level: int,
        count: Callable[[list[Span]], list[int]],
        counts: list[int] | None = None,
    ) -> list[tuple[Span, int]]:
        """Spans with token counts (by `count`), each within budget (recursing to finer
        boundaries)."""
        if counts is None:
            counts = count(spans)
        out: list[tuple[Span, int]] = []
        for span, n in zip(spans, counts, strict=True):
            if n <= self.settings.max_tokens or level > 9:
                out.append((span, n))
                continue
            parts = self._split(text, span, level)
            if len(parts) <= 1 and level < 9:  # this boundary does not occur here: go finer
                out.extend(self._fit(text, [span], level + 1, count, [n]))
            else:
                out.extend(self._fit(text, parts, level + 1, count))
        return out

    def _split_tokens(self, text: str, span: Span, size: int | None = None) -> list[Span]:
        """Hard windows of `size` (default max_tokens) tokens: the last resort."""
        tokens = self.token_spans(text[span.start : span.end])
        size = size or self.settings.max_tokens
        cuts = [span.start + tokens[i][0] for i in range(size, len(tokens), size)]
        return _cut(text, span, cuts)

    def _pack(self, text: str, pieces: list[tuple[Span, int]]) -> list[list[tuple[Span, int]]]:
        """Greedy: consecutive pieces share a window while the budget allows; optional overlap."""
        budget, overlap = self.settings.max_tokens, self.settings.overlap_tokens
        windows: list[list[tuple[Span, int]]] = []
        current: list[tuple[Span, int]] = []
        used = 0
        for piece in pieces:
            if current and used + piece[1] > budget:
                windows.append(current)
                current = self._overlap_tail(current, overlap, budget - piece[1])
                used = sum(n for _, n in current)
            current.append(piece)
            used += piece[1]
        if current:
            windows.append(current)
        return windows

    @staticmethod
    def _overlap_tail(
        window: list[tuple[Span, int]], overlap: int, room: int
    ) -> list[tuple[Span, int]]:
        tail: list[tuple[Span, int]] = []
        used = 0
        for piece in reversed(window[1:]):  # never repeat a whole window
            if used + piece[1] > min(overlap, room):
                break
            tail.insert(0, piece)
            used += piece[1]
        return tail

    def _within_budget(
        self, text: str, windows: list[list[tuple[Span, int]]]
    ) -> tuple[list[Span], list[int]]:
        """Window spans and exact token counts, re-splitting windows that overshoot.

        Pieces are counted one by one, but a tokenizer may count their concatenation a few
        tokens higher (merges across the seams), so each window is recounted as a whole; one
        that is over budget loses its last piece to a window of its own, and a single piece
        is cut at token boundaries with a proportionally smaller size.
        """
        budget = self.settings.max_tokens
        for _ in range(8):  # converges in one or two passes in practice
            spans = [Span(w[0][0].start, w[-1][0].end) for w in windows]
            counts = self.count_tokens([text[s.start : s.end] for s in spans])
            if all(n <= budget for n in counts):
                break
            fixed: list[list[tuple[Span, int]]] = []
            for window, n in zip(windows, counts, strict=True):
                if n <= budget:
                    fixed.append(window)
                elif len(window) > 1:
                    fixed += [window[:-1], window[-1:]]
                else:
                    size = max(1, budget * budget // n - 1)
                    fixed += [[(p, 0)] for p in self._split_tokens(text, window[0][0], size)]
            windows = fixed
        return spans, counts

    def _finish(
        self,
        section: Section,
        headings: HeadingIndex,
        windows: list[list[tuple[Span, int]]],
        first_ordinal: int,
    ) -> list[Chunk]:
        text, base = section.text, section.offset
        spans, counts = self._within_budget(text, windows)
        return [
            Chunk(
                ordinal=first_ordinal + i,
                text=text[span.start : span.end],
                char_start=base + span.start,
                char_end=base + span.end,
                page_start=section.page_at(span.start),
                page_end=section.page_at(span.end - 1),
                heading_path=headings.path_at(span.start),
                n_tokens=n,
                truncated=n > self.settings.max_tokens,
                page_breaks=section.breaks(span),
            )
            for i, (span, n) in enumerate(zip(spans, counts, strict=True))
        ]


class TokenStarts:
    """Where a section's tokens start, from one tokenization of it, so that splitting it need
    not tokenize each piece again (the recursion would tokenize the text once per level).

    A piece's count is the number of the section's tokens that start inside it. For a piece
    cut at whitespace, which every boundary but the last resort's is, that is what the
    tokenizer gives the piece alone (pre-tokenizers split at whitespace); the windows made of
    the pieces are counted again on their own (`Chunker._within_budget`). The section is
    tokenized COUNT_BLOCK_CHARS at a time (cut at whitespace), so its offsets never fill memory.
    """

    def __init__(self, text: str, token_spans: TokenSpans) -> None:
        self._starts = array("q")  # 8 bytes a token, not a Python tuple's ~100
        block = 0
        while block < len(text):
            end = _block_end(text, block, COUNT_BLOCK_CHARS)
            self._starts.extend(block + start for start, _ in token_spans(text[block:end]))
            block = end

    def count(self, spans: list[Span]) -> list[int]:
        starts = self._starts
        return [bisect_left(starts, s.end) - bisect_left(starts, s.start) for s in spans]


def _block_end(text: str, start: int, size: int) -> int:
    """The end of the block of at most `size` characters from `start`: before its last
    whitespace character, or the text's end when no more than `size` characters are left."""
    end = start + size
    if end >= len(text):
        return len(text)
    space = max(text.rfind(c, start + 1, end) for c in " \n\t")
    return space if space > start else end


class HeadingIndex:
    """The heading path in force at any character offset of a text; `stack`: the headings in
    force where the text starts (a section's, from the one before), as (depth, title)."""

    def __init__(self, text: str, stack: Sequence[tuple[int, str]] = ()) -> None:
        stack = list(stack)
        self._marks: list[tuple[int, str]] = [(0, _path(stack))] if stack else []
        for start, level, line in _headings(text, Span(0, len(text))):
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading_title(line)))
            self._marks.append((start, _path(stack)))
        self._starts = [start for start, _ in self._marks]
        self.stack: tuple[tuple[int, str], ...] = tuple(stack)  # in force at the text's end

    def path_at(self, offset: int) -> str:
        i = bisect_right(self._starts, offset) - 1
        return self._marks[i][1] if i >= 0 else ""


def _path(stack: Sequence[tuple[int, str]]) -> str:
    return " > ".join(title for _, title in stack)


# ---------------------------------------------------------------------------------------------
# Sections: a document's text, a bounded stretch at a time


@dataclass
class Section:
    """A stretch of a document's text: `text` starts at `offset` in the document's text;
    `pages` are (offset in `text`, page number) of the page in force at its start and of each
    page that starts inside it."""

    text: str
    offset: int
    pages: list[tuple[int, int]] = field(default_factory=list)

    def page_at(self, char: int) -> int:
        """The page number holding character `char` of `text`."""
        i = bisect_right(self.pages, (char, float("inf"))) - 1
        return self.pages[max(0, i)][1]

    def breaks(self, span: Span) -> tuple[tuple[int, int], ...]:
        """The pages that start inside `span` (after its first character), as (offset in the
        document's text, page number)."""
        first = bisect_right(self.pages, (span.start, float("inf")))
        inside = self.pages[first : bisect_left(self.pages, (span.end, -1))]
        return tuple((self.offset + at, number) for at, number in inside)


class _SectionBuffer:
    """Pages laid end to end as `Document.text` lays them, until a section is taken."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._offset = 0  # where the buffered text starts in the document's text
        self.chars = 0  # characters buffered
        self._pages: list[tuple[int, int]] = []  # (offset in the document, number)

    def add(self, page: Page) -> None:
        end = self._offset + self.chars
        if self._pages and page.number != self._pages[-1][1]:  # a new page, after a separator
            self._append(PAGE_SEPARATOR)
            end += len(PAGE_SEPARATOR)
        if not self._pages or page.number != self._pages[-1][1]:
            self._pages.append((end, page.number))
        assert page.char_offset == end, "pages come in order, each piece where the last ended"
        self._append(page.text)

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self.chars += len(text)

    def take(self, limit: int | None) -> Section:
        """The next section: everything buffered (`limit` None), or at most `limit`
        characters cut at a boundary (see the module docstring); the rest stays."""
        if not self._pages:  # a document without pages
            return Section("", self._offset, [(0, 1)])
        text = "".join(self._parts)
        cut = len(text) if limit is None else section_cut(text, limit)
        base, end = self._offset, self._offset + cut
        # The first page is the one in force at `base` (it may have started before).
        pages = [(max(0, start - base), number) for start, number in self._pages if start < end]
        in_force = [page for page in self._pages if page[0] <= end][-1]
        self._pages = [in_force, *(page for page in self._pages if page[0] > end)]
        self._parts, self._offset, self.chars = [text[cut:]], end, len(text) - cut
        return Section(text[:cut], base, pages)


def section_cut(text: str, limit: int) -> int:
    """Where a section of `text` ends: at the coarsest boundary in the second half of its
    first `limit` characters (a heading of the lowest depth there, the last one; else a
    paragraph break, a line end, a sentence end, a space), else at `limit`."""
    low, high = limit // 2, min(limit, len(text))
    starts: dict[int, int] = {}
    for start, depth, _ in _headings(text, Span(low, high)):
        if start > low:
            starts[depth] = start  # the last one of each depth
    if starts:
        return starts[min(starts)]
    for pattern in (_BREAKS[0], "\n", _SENTENCE_END, "\\s"):
        if ends := _ends(pattern, text, Span(low, high)):
            return ends[-1]
    return high
