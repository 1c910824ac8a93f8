"""Snippets are made by many threads at once (the API server's worker threads): stemming must
give every thread the stems a single thread gets."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterable, Iterator

import pytest

from docsearch import text

SUFFIXES = ["ational", "ization", "fulness", "iveness", "ing", "edly", "ness", "ement", "ously"]


@pytest.fixture
def fast_thread_switching() -> Iterator[None]:
    """Switch threads every microsecond, so that stems computed at the same time interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def fresh_words(count: int, seed: int) -> list[str]:
    """Words no earlier stem call has cached (random stems, English suffixes)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnoprstuvw"
    return [
        "".join(rng.choices(letters, k=rng.randint(4, 9))) + rng.choice(SUFFIXES)
        for _ in range(count)
    ]


def test_threads_stemming_at_once_get_the_single_thread_stems(fast_thread_switching: None) -> None:
    from snowballstemmer.english_stemmer import EnglishStemmer

    words = fresh_words(2000, seed=random.SystemRandom().randrange(1 << 30))
    reference = EnglishStemmer()
    expected = {word: reference.stemWord(word) for word in words}
    text.stem.cache_clear()
    got = _in_eight_threads(lambda part: ((word, text.stem(word)) for word in part), words)
    wrong = {word: (got[word], expected[word]) for word in words if got[word] != expected[word]}
    assert not wrong, f"{len(wrong)} wrong stems, e.g. {list(wrong.items())[:3]}"


def test_threads_stemming_word_lists_at_once_get_the_single_thread_stems(
    fast_thread_switching: None,
) -> None:
    """`stems` (a snippet's words: the new ones stemmed in one call) from eight threads at once,
    each list mixing words met before with new ones, in any case."""
    from snowballstemmer.english_stemmer import EnglishStemmer

    words = fresh_words(4000, seed=random.SystemRandom().randrange(1 << 30))
    words = [w.upper() if i % 3 == 0 else w for i, w in enumerate(words)]
    reference = EnglishStemmer()
    expected = {word: reference.stemWord(word.lower()) for word in words}
    text.stems(words[:500])  # met before

    def stem_lists(part: list[str]) -> Iterator[tuple[str, str]]:
        for at in range(0, len(part), 37):
            batch = part[at : at + 37] + words[:5]
            yield from zip(batch, text.stems(batch), strict=True)

    got = _in_eight_threads(stem_lists, words)
    wrong = {word: (got[word], expected[word]) for word in words if got[word] != expected[word]}
    assert not wrong, f"{len(wrong)} wrong stems, e.g. {list(wrong.items())[:3]}"


def _in_eight_threads(
    stem_part: Callable[[list[str]], Iterable[tuple[str, str]]], words: list[str]
) -> dict[str, str]:
    """word -> stem, from `stem_part` run on eight slices of `words` by eight threads at once;
    a thread that raised fails the test."""
    got: dict[str, str] = {}
    errors: list[BaseException] = []

    def run(part: list[str]) -> None:
        try:
            got.update(stem_part(part))
        except Exception as exc:  # noqa: BLE001 - a crashed stemmer is the failure reported
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(words[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, f"{len(errors)} threads failed, first: {errors[0]!r}"
    return got
