"""Snippets keep their windows, marks and anchors: crafted passages (stems, identifiers, no terms,
a sentence longer than the window, non-ASCII words, stop words only) against what the snippet
code made before its counting was sped up (the word counts now run as map/filter over the cached
stems, and marks are looked up only for the words that stem to a query term)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docsearch.query import ParsedQuery
from docsearch.snippets import make_snippet, mark_spans
from docsearch.text import WORD, content_stems, stem

CASES = [
    (
        "Either party may terminate this Agreement for cause. Termination takes effect on "
        "notice. Nothing here limits other remedies.",
        "termination for cause",
    ),
    (
        "The rent is reviewed yearly. " * 8
        + "Under Section 7.2(a) the tenant may terminate. "
        + "Deposits are held in trust. " * 6,
        "Section 7.2(a) termination",
    ),
    (
        "No query word appears in this text at all; it talks about weather. " * 10,
        "indemnification obligations",
    ),
    ("a" * 50 + " " + "word " * 120 + "indemnify indemnified indemnification", "indemnification"),
    (
        "Die Kündigung erfolgt schriftlich. Café owners terminate leases; TERMINATED contracts "
        "end. " * 5,
        "terminated café kündigung",
    ),
    (
        "ISO 13485:2016 applies.\n\nThe device meets ISO 13485:2016 and IEC 60601-1.\nOther text.",
        "ISO 13485:2016",
    ),
    (
        "Payment is due net 30 days. Late payment accrues interest. Payments are made by wire. "
        * 6,
        "payment terms net 30",
    ),
    ("The the the of and to.", "the of"),
]
# (marks, char_start, char_end, anchor) of each case at offset 7, as the earlier code made them
BEFORE = [
    (((17, 26), (46, 51), (53, 64)), 7, 131, 24),
    (((238, 245), (246, 252), (268, 277)), 7, 314, 245),
    ((), 7, 318, 7),
    ((), 7, 327, 7),
    (
        ((2, 6), (14, 23), (32, 42), (62, 71), (93, 97), (105, 114), (123, 133), (153, 162))
        + ((184, 188), (196, 205), (214, 224), (244, 253), (275, 279), (287, 296)),
        42,
        345,
        42,
    ),  # fmt: skip
    (((0, 3), (4, 14), (41, 44), (45, 55)), 7, 92, 7),
    (
        ((0, 7), (15, 18), (19, 21), (33, 40), (59, 67), (86, 93), (101, 104), (105, 107))
        + ((119, 126), (145, 153), (172, 179), (187, 190), (191, 193), (205, 212), (231, 239))
        + ((258, 265), (273, 276), (277, 279), (291, 298)),
        7,
        324,
        7,
    ),  # fmt: skip
    ((), 7, 29, 7),
]


@pytest.mark.parametrize(("case", "before"), list(zip(CASES, BEFORE, strict=True)))
def test_snippets_are_the_ones_made_before(case: tuple[str, str], before: tuple[Any, ...]) -> None:
    text, query = case
    for asked in (query, ParsedQuery.parse(query)):
        snippet = make_snippet(text, asked, offset=7)
        assert (snippet.marks, snippet.char_start, snippet.char_end, snippet.anchor) == before
        inner = " ".join(text[snippet.char_start - 7 : snippet.char_end - 7].split())
        assert inner in snippet.text


def test_marks_cover_every_form_of_a_term_and_each_identifier() -> None:
    text = "Terminate, terminated and TERMINATION; terms aside. See 7.2(a) and 7.2(A)."
    spans = mark_spans(text, content_stems("termination"), ("7.2(a)",))
    assert [text[a:b] for a, b in spans] == [
        "Terminate", "terminated", "TERMINATION", "7.2(a)", "7.2(A)",
    ]  # fmt: skip
    assert mark_spans(text, frozenset(), ()) == ()


# Words and separators a chunk is made of: query words in several forms, words that hold a
# query word inside them (not whole words), underscores and digits (word characters), line
# breaks and runs of spaces (collapsed in the passage), sentence ends, and a long word.
_PIECES = st.sampled_from(
    ["terminate", "Termination", "TERMINATED", "determination", "terminate_x", "x_terminate",
     "cause", "causes", "because", "7.2(a)", "notice", "Café", "the", "2terminate", "rent",
     "w" * 60]
)  # fmt: skip
_GAPS = st.sampled_from([" ", "  ", "\n", "\n\n", ". ", "; ", ", ", " \t ", "! \n"])


@st.composite
def _chunks(draw: st.DrawFn) -> str:
    words = draw(st.lists(_PIECES, min_size=1, max_size=120))
    gaps = draw(st.lists(_GAPS, min_size=len(words), max_size=len(words)))
    return draw(st.sampled_from(["", " ", "\n"])) + "".join(
        w + g for w, g in zip(words, gaps, strict=True)
    )


@settings(max_examples=300, deadline=None)
@given(_chunks(), st.sampled_from(["terminate for cause", "Section 7.2(a) notice", "café rent"]))
def test_marks_are_exactly_the_passages_query_words(text: str, query: str) -> None:
    parsed = ParsedQuery.parse(query)
    snippet = make_snippet(text, parsed, max_chars=120, offset=3)
    expected = mark_spans(snippet.text, parsed.stems, parsed.identifiers)
    assert snippet.marks == expected  # what marking the shown passage on its own gives
    for word in WORD.finditer(snippet.text):  # every whole word that is a query term is marked
        if stem(word[0]) in parsed.stems:
            assert any(a <= word.start() and word.end() <= b for a, b in snippet.marks)
    for start, end in snippet.marks:
        shown = snippet.text[start:end]
        is_ident = any(i.lower() in shown.lower() for i in parsed.identifiers)
        assert is_ident or stem(shown) in parsed.stems
    assert snippet.char_start - 3 <= snippet.anchor - 3 <= snippet.char_end - 3
    window = text[snippet.char_start - 3 : snippet.char_end - 3]
    assert " ".join(window.split()) in snippet.text
    if snippet.marks:  # the anchor is the first marked word, in the document's own text
        first = snippet.text[slice(*snippet.marks[0])]
        assert text[snippet.anchor - 3 :].lower().startswith(first.lower())


# Snowball English's suffixes and exceptions (the words whose stem rewrites the most of them),
# with roots they attach to; "İ" lower-cases to two characters.
_ROOTS = ["sens", "nation", "relat", "hope", "hop", "cr", "t", "d", "ly", "sk", "gentl", "abil"]
_SUFFIXES = [
    "", "s", "es", "ies", "ied", "ying", "ing", "ingly", "ed", "edly", "eed", "eedly", "y",
    "ational", "tional", "enci", "anci", "abli", "entli", "izer", "ization", "ation", "ator",
    "alism", "aliti", "alli", "fulness", "ousli", "ousness", "iveness", "iviti", "ibility",
    "biliti", "bli", "ogi", "fulli", "lessli", "li", "alize", "icate", "iciti", "ical", "ful",
    "ness", "ative", "ement", "ment", "ent", "ism", "ate", "iti", "ous", "ive", "ize", "ion",
]  # fmt: skip
_EXCEPTIONS = [
    "skis", "skies", "dying", "lying", "tying", "vying", "idly", "gently", "ugly", "early",
    "only", "singly", "sky", "news", "howe", "atlas", "cosmos", "bias", "andes", "inning",
    "outing", "canning", "herring", "earring", "proceed", "exceed", "succeed", "generously",
]  # fmt: skip
_FORMS = [root + suffix for root in _ROOTS for suffix in _SUFFIXES] + _EXCEPTIONS


def test_a_stem_rewrites_at_most_the_last_two_characters_it_keeps() -> None:
    from docsearch.snippets import STEM_REWRITE

    assert len(_FORMS) > 600
    assert [w for w in _FORMS if not w.startswith(stem(w)[:-STEM_REWRITE])] == []
    assert [w for w in _FORMS if not w.startswith(stem(w)[: -STEM_REWRITE + 1])]  # not 1: dying


_FORM_PIECES = st.sampled_from(
    [*_FORMS[::7], *_EXCEPTIONS, "Relational", "NATIONALIZATION", "İlk", "naïve", "x_dying",
     "2lying", "law", "Laws", "30", "30th"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(_FORM_PIECES, _GAPS), min_size=1, max_size=60),
    st.sets(_FORM_PIECES, min_size=1, max_size=4),
)
def test_words_found_by_their_stems_head_are_those_stemming_every_word_finds(
    pieces: list[tuple[str, str]], query_words: set[str]
) -> None:
    """The head search (stems of 4+ characters) finds the same query-term words, at the same
    places, as stemming every distinct word of the chunk."""
    from docsearch.snippets import _stemmed_words, _term_words

    text = "".join(word + gap for word, gap in pieces)
    terms = frozenset(stem(word) for word in query_words)
    assert _term_words(text, terms) == _stemmed_words(text, terms)
