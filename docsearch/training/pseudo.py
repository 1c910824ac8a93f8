"""Pseudo-queries: (query, positive) pairs made from a document's own text, for corpora without labels.

Three kinds, each returned as `(query, positive, origin)` over a document's windows (the chunks
the indexer cuts):
- `heading`: a heading -> the section it opens, the heading line cut out of the positive (if the
  heading ends its window, the next window). Headings found in many documents ("Introduction",
  "References") identify no section and are skipped, as are lines the chunker's generous heading
  rules accept but nobody would ask about (list items, table rows).
- `title`: the document's title -> its first window, the title line cut out.
- `span`: a sentence -> the window around it with the sentence cut out: the inverse cloze task
  (Lee et al. 2019), so the pair is never a plain string match.
Not here: negatives, sampling and the `Pair` type (`docsearch.training.data`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from docsearch.indexer.chunk import Span, heading_level, heading_title, split_sentences
from docsearch.text import WORD

MIN_BODY_WORDS = 20  # a positive shorter than this teaches nothing
SPAN_WORDS = (6, 40)  # sentence lengths that make a plausible query
_NUMBERING = re.compile(r"^(?:\d{1,3}(?:\.\d{1,3})*[.)]?|[IVXLC]+\.|[A-Z]\.)\s+")

Found = list[tuple[str, str, str]]  # (query, positive, origin)


def n_words(text: str) -> int:
    return len(WORD.findall(text))


def heading_key(line: str) -> str:
    """A heading without numbering, markup or case: what makes two headings 'the same'."""
    return " ".join(WORD.findall(_NUMBERING.sub("", heading_title(line)).lower()))


def plausible_query(title: str) -> bool:
    """A few words, mostly letters: a heading someone might search for."""
    tokens = title.split()
    letters = [t for t in tokens if any(c.isalpha() for c in t)]
    return 1 <= len(tokens) <= 10 and len(letters) * 2 > len(tokens) and len(title) >= 4


def generic_headings(docs: Mapping[str, Sequence[str]]) -> set[str]:
    """Heading keys found in more than max(2, 5%) of the documents."""
    seen: dict[str, set[str]] = {}
    for doc_id, windows in docs.items():
        for window in windows:
            for line in window.splitlines():
                if heading_level(line):
                    seen.setdefault(heading_key(line), set()).add(doc_id)
    limit = max(2, int(0.05 * len(docs)))
    return {key for key, owners in seen.items() if len(owners) > limit}


def section_body(windows: Sequence[str], index: int, line: str) -> str:
    """The text a heading opens: the rest of its window, or the next window if that is empty."""
    text = windows[index]
    body = text[text.index(line) + len(line) :].strip()
    if n_words(body) < MIN_BODY_WORDS and index + 1 < len(windows):
        body = windows[index + 1]
    return body


def heading_queries(windows: Sequence[str], generic: set[str]) -> Found:
    found = []
    for index, window in enumerate(windows):
        for line in window.splitlines():
            if not heading_level(line):
                continue
            query = _NUMBERING.sub("", heading_title(line)).strip()
            if heading_key(line) in generic or not plausible_query(query):
                continue
            body = section_body(windows, index, line)
            if n_words(body) >= MIN_BODY_WORDS:
                found.append((query, body, "heading"))
    return found


def title_query(title: str, stem: str, windows: Sequence[str], generic: set[str]) -> Found:
    """`stem` is the file name without suffix: a title that is only that says nothing."""
    title = title.strip()
    if not title or not windows or title == stem or heading_key(title) in generic:
        return []
    first = windows[0]
    body = first.replace(title, "", 1).strip() if first.startswith(title) else first
    return [(title, body, "title")] if n_words(body) >= 5 else []


def span_queries(windows: Sequence[str], rng: random.Random, n: int) -> Found:
    """`n` sentences of randomly chosen windows -> those windows without the sentence."""
    found = []
    for index in rng.sample(range(len(windows)), min(n, len(windows))):
        text = windows[index]
        sentences = [
            s
            for s in split_sentences(text, Span(0, len(text)))
            if SPAN_WORDS[0] <= len(text[s.start : s.end].split()) <= SPAN_WORDS[1]
            and not heading_level(text[s.start : s.end])
        ]
        if len(sentences) < 2:
            continue
        s = rng.choice(sentences)
        body = (text[: s.start] + text[s.end :]).strip()
        if n_words(body) >= MIN_BODY_WORDS:
            found.append((" ".join(text[s.start : s.end].split()), body, "span"))
    return found
