"""A query as one search reads it: cleaned once, parsed once (`ParsedQuery`), then passed down.

`Retriever.search` cleans the text (`clean_query`: surrogates, controls, the length cap) and
parses it into a ParsedQuery before any leg runs; the legs, the document rule, the instrument
lift and every snippet read its fields instead of working them out again:
    text         the query as cleaned
    words        the query as its BM25 searches take it: a long one without the words most of
                 the collection's chunks hold (`docsearch.common_words`), search-box words
                 without their operators (AND, OR, NOT in capitals, parentheses)
    stems        its content words' Snowball stems (snippets mark them)
    identifiers  its identifier-like tokens ("7.2(a)", "ISO 13485:2016"), matched verbatim
    instruments  the numbered instruments it names ("Amendment No. 3"; `docsearch.instruments`)
    form         long / key-terms / words / plain (`fusion.query_form`): what the document
                 rule reads
Not here: the search itself (`docsearch.retriever`), the words and stems (`docsearch.text`).
"""

from __future__ import annotations

import operator
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from docsearch import instruments
from docsearch.common_words import without_common
from docsearch.errors import UsageError
from docsearch.fusion import LONG, WORDS, query_form, without_operators
from docsearch.text import content_stems, identifiers

# The longest queries of the evaluation sets here (whole-case queries aside) are abstracts of
# 2.3k characters; 10k (about 1,500 words) leaves four times that, and bounds the lexical leg's
# cost, one posting list per distinct term. Whole documents as queries (median 38k characters in
# irled2017-precedent) are for a query-by-document path that picks their discriminative terms.
MAX_QUERY_CHARS = 10_000
MAX_K = 10_000  # far beyond any results page or evaluation depth (100); bounds the pools


@dataclass(frozen=True)
class ParsedQuery:
    """What one search needs to know about its query, worked out once (see the module)."""

    text: str
    words: str
    stems: frozenset[str]
    identifiers: tuple[str, ...]
    instruments: frozenset[instruments.Instrument]
    form: str

    @classmethod
    def parse(
        cls, text: str, common_words: Callable[[], frozenset[str]] | None = None
    ) -> ParsedQuery:
        """`text` (already clean) parsed; `common_words` gives the words a long query's BM25
        searches leave out (None: they keep every word, as a search without lexical legs)."""
        form = query_form(text)
        words = text
        if form == LONG and common_words is not None:
            words = without_common(text, common_words())
        if form == WORDS:
            # The operators the form was read with are syntax, not words to match: whole-
            # document BM25 keeps stop words, so "and" would match every document, and a leg
            # that returns every document looks less sure of its best (fusion.confidence) and
            # never finds the words rare (fusion.RareTerms). NOT does not exclude: its word is
            # searched for like the others.
            words = without_operators(text)
        return cls(
            text=text,
            words=words,
            stems=content_stems(text),
            identifiers=identifiers(text),
            instruments=instruments.in_query(text),
            form=form,
        )


def clean_query(query: object) -> str:
    """The query as text the tokenizers and Lance accept, or UsageError saying why it is not.

    Lone surrogates (half a UTF-16 pair, e.g. from undecodable command-line bytes) and control
    characters (NUL, escapes) become spaces: they are not words, and they crash tokenizers.
    """
    if not isinstance(query, str):
        raise UsageError(f"the query must be text, not {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(
            f"query too long: {len(query):,} characters (the limit is {MAX_QUERY_CHARS:,}); "
            "search for its key sentences instead"
        )
    # Pairs of surrogates join into one character; a lone one becomes U+FFFD, then a space.
    text = query.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    text = "".join(" " if ch == "\ufffd" or unicodedata.category(ch) == "Cc" else ch for ch in text)
    text = text.strip()
    if not text:
        raise UsageError("empty query: type some words to search for")
    return text


def whole_number(k: object) -> int:
    """`k` as a number of results, or UsageError (1 to MAX_K, not a bool)."""
    try:
        value = operator.index(k)  # type: ignore[arg-type]
    except TypeError:
        raise UsageError(f"k must be a whole number, not {k!r}") from None
    if isinstance(k, bool) or not 1 <= value <= MAX_K:
        raise UsageError(f"k must be at least 1 and at most {MAX_K:,}")
    return value
