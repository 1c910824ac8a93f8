"""Common words: the words so many of a collection's chunks hold that a long query leaves them
out of its BM25 searches.

Lance walks a query word's whole posting list (once per time the query repeats it), so a
200-word query spends most of its full-text search on the words nearly every chunk holds, and
their BM25 weight is the smallest of all (idf 0.9 at 40% of the chunks, near 0 at all of them).
English stop words are such words (the chunk index drops them, the whole-document index keeps
them); a corpus has its own (contracts' "agreement", "party", "shall"; transcripts' "yeah",
"uh"), and text in another language has them all. A word is common here when more than
COMMON_SHARE of the chunks hold its Snowball stem, estimated from SAMPLE_CHUNKS chunks spread
evenly over the table, once per version of the chunks table; a collection smaller than
MIN_CHUNKS keeps every word (its searches are fast). The share was chosen on tuning queries and
its cost in quality measured: benchmarks/common_words.py, results/common_words.md.
Not here: which queries count as long (`Retriever`, with fusion.LONG_QUERY_WORDS), the search.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from docsearch.store.reads import Store
from docsearch.text import INDEX_WORD, stem  # words as the full-text index splits them

# The smallest share that kept the lexical rule's tuning nDCG@10 within 0.005 of keeping
# every word on each dataset (0.3 cost summary2meeting 0.022). None: every query keeps every word.
COMMON_SHARE: float | None = 0.4
SAMPLE_CHUNKS = 1000  # the share's standard error at 0.4 is then 1.5 points
MIN_CHUNKS = 1000


def common_words(store: Store) -> frozenset[str]:
    """The stems of the words more than COMMON_SHARE of `store`'s chunks hold (none where the
    share is None or the collection is small), counted once per version of its chunks table."""
    if COMMON_SHARE is None:
        return frozenset()
    return _counted(store.uri, store.name, store.chunks_version(), COMMON_SHARE)


@lru_cache(maxsize=8)
def _counted(db: str, name: str, version: str, share: float) -> frozenset[str]:
    # `version` is only the cache key: a collection written to again is counted again.
    texts = Store.open(db, name).spread_texts(SAMPLE_CHUNKS)
    if len(texts) < MIN_CHUNKS:  # (MIN_CHUNKS <= SAMPLE_CHUNKS)
        return frozenset()
    holding: Counter[str] = Counter()
    for text in texts:
        holding.update({stem(word) for word in INDEX_WORD.findall(text.lower())})
    return frozenset(word for word, count in holding.items() if count > share * len(texts))


def without_common(query: str, common: frozenset[str]) -> str:
    """`query` with the words whose stem is in `common` blanked out; as written where it quotes
    a phrase (a phrase must keep its words) or where no word would be left."""
    if not common or '"' in query:
        return query
    kept = INDEX_WORD.sub(
        lambda word: " " if stem(word.group(0)) in common else word.group(0), query
    )
    return kept if INDEX_WORD.search(kept) else query
