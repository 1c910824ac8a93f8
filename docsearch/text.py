"""Words: how the product splits text into words, stems them and tells stop words and identifiers.

Two word patterns, each named for what it agrees with:
    WORD        runs of word characters (`\\w+`): the words snippets mark, chunking counts and
                a query's shape (fusion.is_keyword_query) is read from
    INDEX_WORD  letters and digits, lower-cased, at most MAX_WORD_CHARS (`index_words`): the
                words the full-text index holds (its counts and these agree to 0.01% on
                irled2017-precedent); query by document's term statistics and the common words
                of a collection are counted with it
Terms match by Snowball stem ("terminate" matches "termination"), the way the full-text index
matches them. Identifiers ("Section 7.2(a)", "ISO 13485:2016", "PPR-9087") must match verbatim.
Not here: a parsed query (`docsearch.query.ParsedQuery`), snippets (`docsearch.snippets`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection
from functools import lru_cache

WORD = re.compile(r"\w+", re.UNICODE)
INDEX_WORD = re.compile(r"[^\W_]+")
MAX_WORD_CHARS = 40  # the full-text index drops longer tokens
IDENTIFIER = re.compile(r"(?<![\w.])(?=[\w.:()/§-]*\d)[A-Za-z§]*[\w]*(?:[.:()/-]+\w+)+\)?")
# A person names a handful of identifiers; a pasted table of numbers would otherwise cost one
# phrase search each (1,400 of them took 2.4 s on a 36-chunk index).
MAX_IDENTIFIERS = 16
STOPWORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was "
    "were will with which who what when where how why does do any all".split()
)

_per_thread = threading.local()


# Every ASCII character that `\w` does not match, as a space: `str.translate` then `split`
# find an ASCII text's words in C (~4 us for a 1,000-character chunk, where WORD.findall and a
# set of its matches took ~35 us, half a snippet's time).
_ASCII_NON_WORD = {c: " " for c in range(128) if not (chr(c).isalnum() or chr(c) == "_")}


def distinct_words(text: str) -> set[str]:
    """The distinct words (WORD matches) of `text`, as `set(WORD.findall(text))` gives them. The
    pieces left between ASCII non-word characters and whitespace are words where they are
    ASCII; a piece holding other characters is split by WORD (it may hold "’", "§", ...)."""
    pieces = set(text.translate(_ASCII_NON_WORD).split())
    if text.isascii():
        return pieces
    odd = {piece for piece in pieces if not piece.isascii()}
    return (pieces - odd).union(*(WORD.findall(piece) for piece in odd))


def index_words(text: str) -> list[str]:
    """The words of `text` as the full-text index holds them (lower-cased)."""
    return [w for w in INDEX_WORD.findall(text.lower()) if len(w) <= MAX_WORD_CHARS]


def _stemmer():  # type: ignore[no-untyped-def]
    """This thread's stemmer: PyStemmer's, Snowball's own C code for the English algorithm the
    index's tokenizer runs (16x the pure-Python snowballstemmer, which cost a short query's
    document search 10-15 ms on the words its snippets had not met yet). A Snowball stemmer
    keeps the word it works on in itself, so one shared by threads (the server's) would mix
    their words up."""
    stemmer = getattr(_per_thread, "stemmer", None)
    if stemmer is None:
        import Stemmer

        stemmer = _per_thread.stemmer = Stemmer.Stemmer("english")
    return stemmer


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Snowball stem of a lower-cased word (cached: snippets stem the same words again and again)."""
    return str(_stemmer().stemWord(word.lower()))


_STEMS: dict[str, str] = {}  # word -> stem, each word `stems` has met
_MAX_STEMS = 200_000


def stems(words: Collection[str]) -> list[str]:
    """The stem of each of `words`, in order. A snippet stems a chunk's hundred-odd distinct
    words: looked up in a plain dict by C-level map where all were met before (one Python call
    per word through `stem`'s cache cost a snippet ~60 us), the words not met yet stemmed in
    one call (a search's first snippets meet dozens each: 1.0 us a word, not 1.6)."""
    try:
        return list(map(_STEMS.__getitem__, words))
    except KeyError:
        if len(_STEMS) > _MAX_STEMS:
            _STEMS.clear()
        new = [word for word in words if word not in _STEMS]
        _STEMS.update(zip(new, _stemmer().stemWords([word.lower() for word in new]), strict=True))
        return list(map(_STEMS.__getitem__, words))


def content_stems(text: str) -> frozenset[str]:
    """Stems of the content words of `text`; pieces of identifiers are left to `identifiers`."""
    plain = IDENTIFIER.sub(" ", text)
    return frozenset(stem(w) for w in WORD.findall(plain) if w.lower() not in STOPWORDS)


def identifiers(text: str, limit: int = MAX_IDENTIFIERS) -> tuple[str, ...]:
    """Identifier-like tokens that must match verbatim: '7.2(a)', '13485:2016', 'PPR-9087'.

    The first `limit` distinct ones (ignoring case): each costs the lexical leg a phrase query.
    """
    found: dict[str, str] = {}
    for match in IDENTIFIER.finditer(text):
        found.setdefault(match.group(0).lower(), match.group(0))
        if len(found) == limit:
            break
    return tuple(found.values())
