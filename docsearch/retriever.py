"""`Retriever`: search a collection from Python, the way the CLI and the UI do.

    from docsearch import Retriever
    hits = Retriever("contracts").search("termination for cause", k=5)
    hits[0].path, hits[0].pages, hits[0].snippet.marked(), hits[0].scores

Modes: `hybrid` (dense + BM25, fused; the default when the collection has vectors), `vector`,
`lexical` (loads no model). A document scores as its best chunk in each leg; `granularity=
"passage"` returns chunks instead of documents (for RAG). Exact identifiers in the query
("Section 7.2(a)", "ISO 13485:2016") are matched as phrases and lift the chunks that contain them.
Bad input of any kind (an unusable query, `k`, mode or filter) is a UsageError; `where` is checked
as `docsearch.indexer.filters` describes, so it can narrow a search but never widen `path`.
Each leg returns the store's `Candidate`s; fusion works on `{key: score}` maps; a `Hit`'s
`Snippet` holds its text, the marked spans and where the passage lies in the document.
Not here: query encoding details (the encoder's), result rendering (CLI/UI).
"""

from __future__ import annotations

import logging
import operator
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from docsearch.config import Settings
from docsearch.defaults import MODES
from docsearch.encoders.base import Encoder, encoder_from_spec
from docsearch.errors import EncoderUnavailableError, UsageError
from docsearch.fusion import Fusion, ranks
from docsearch.indexer.filters import ChunkFilter
from docsearch.indexer.store import Candidate, ChunkView, Store, resolve_collection
from docsearch.snippets import Snippet, identifiers, make_snippet

log = logging.getLogger(__name__)

GRANULARITIES = ("document", "passage")
# The longest queries of the evaluation sets here (whole-case queries aside) are abstracts of
# 2.3k characters; 10k (about 1,500 words) leaves four times that, and bounds the lexical leg's
# cost, one posting list per distinct term. Whole documents as queries (median 38k characters in
# irled2017-precedent) are for a query-by-document path that picks their discriminative terms.
MAX_QUERY_CHARS = 10_000
MAX_K = 10_000  # far beyond any results page or evaluation depth (100); bounds the pools


@dataclass(frozen=True)
class Hit(ChunkView):
    """One result: a document (its best chunk) or a passage, with provenance and scores."""

    score: float  # the fused (or single-leg) score that ordered the results
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # leg -> {rank, score}
    snippet: Snippet = Snippet("")  # the best passage, its query terms marked by offsets

    @property
    def pages(self) -> str:
        if self.page_start == self.page_end:
            return str(self.page_start)
        return f"{self.page_start}-{self.page_end}"

    def as_dict(self) -> dict[str, Any]:
        """The hit as JSON-ready data; `snippet` is the marked text (`**term**`)."""
        passage = self.snippet
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "snippet": passage.marked(),
            "snippet_marks": passage.marks,  # spans of the snippet's unmarked text
            "snippet_span": (passage.char_start, passage.char_end),  # in the document's text
            "pages": self.pages,
        }


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


def _whole_number(k: object) -> int:
    try:
        value = operator.index(k)  # type: ignore[arg-type]
    except TypeError:
        raise UsageError(f"k must be a whole number, not {k!r}") from None
    if isinstance(k, bool) or not 1 <= value <= MAX_K:
        raise UsageError(f"k must be at least 1 and at most {MAX_K:,}")
    return value


def _best_of_each(found: list[Candidate], granularity: str) -> dict[str, Candidate]:
    """doc_id (or chunk_id for passages) -> its best candidate (candidates arrive best first)."""
    best: dict[str, Candidate] = {}
    for one in found:
        best.setdefault(one.doc_id if granularity == "document" else one.chunk_id, one)
    return best


class Retriever:
    """Search one collection. The query encoder is the one the collection was built with."""

    def __init__(
        self,
        collection: str | None = None,
        *,
        db: str | None = None,
        encoder: Encoder | None = None,
        fusion: Fusion | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.db = db or self.settings.db
        self.store = Store.open(self.db, resolve_collection(self.db, collection))
        self._encoder = encoder
        self.fusion = fusion or self.settings.fusion()

    @property
    def collection(self) -> str:
        return self.store.name

    def encoder(self) -> Encoder:
        """The collection's encoder, loaded on first use (lexical search never loads it)."""
        if self._encoder is None:
            if self.store.meta.encoder is None:
                raise UsageError(f"collection {self.collection!r} has no vectors (lexical only)")
            self._encoder = encoder_from_spec(self.store.meta.encoder)
        return self._encoder

    def default_mode(self) -> str:
        return "hybrid" if self.store.has_vectors else "lexical"

    def search(
        self,
        query: str,
        k: int = 10,
        mode: str | None = None,
        where: str | None = None,
        *,
        path: str | None = None,
        paths: Sequence[str] | None = None,
        granularity: str = "document",
    ) -> list[Hit]:
        """The top `k` documents (or passages) for `query`, best first.

        `where` is SQL over chunk columns ("page_start >= 3"), `path` a glob on the file path,
        `paths` a list of exact paths; each only narrows the search.
        """
        query = clean_query(query)
        k = _whole_number(k)
        if granularity not in GRANULARITIES:
            raise UsageError(f"granularity must be one of {', '.join(GRANULARITIES)}")
        flt = ChunkFilter(path=path, paths=paths, where=where)
        mode = self._usable_mode(mode or self.default_mode())
        pool = max(50, 5 * k) if granularity == "document" else max(20, 2 * k)
        legs: dict[str, list[Candidate]] = {}
        if mode in ("hybrid", "vector"):
            vector = self.encoder().encode_queries([query])[0]
            legs["dense"] = self.store.search_vector(vector, pool, flt)
        if mode in ("hybrid", "lexical"):
            legs["lexical"] = self.lexical(query, pool, flt)
        return self._fuse(query, legs, k, granularity)

    def _usable_mode(self, mode: str) -> str:
        if not isinstance(mode, str) or mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if mode != "lexical" and not self.store.has_vectors:
            if mode == "vector":
                raise UsageError(
                    f"collection {self.collection!r} has no vectors; use --mode lexical"
                )
            return "lexical"
        if mode == "hybrid":
            try:
                self.encoder()
            except EncoderUnavailableError as exc:  # BM25 always answers
                log.warning("encoder unavailable (%s); falling back to lexical search", exc)
                return "lexical"
        return mode

    def lexical(self, query: str, limit: int, where: ChunkFilter | None) -> list[Candidate]:
        """BM25 candidates, with chunks containing the query's identifiers verbatim lifted to
        the top (their raw_score stays the true BM25)."""
        found = self.store.search_text(query, limit, where)
        idents = identifiers(query)
        if not idents:
            return found
        by_id = {one.chunk_id: one for one in found}
        matched: Counter[str] = Counter()
        for ident in idents:
            for one in self.store.search_phrase(ident, limit, where):
                if ident.lower() in one.text.lower():  # the index drops "a", "(", ...
                    matched[one.chunk_id] += 1
                    by_id.setdefault(one.chunk_id, one)
        lift = max((one.score for one in by_id.values()), default=0.0) + 1.0
        lifted = [replace(c, score=c.score + lift * matched[c.chunk_id]) for c in by_id.values()]
        return sorted(lifted, key=lambda one: -one.score)[:limit]

    def _fuse(
        self, query: str, legs: dict[str, list[Candidate]], k: int, granularity: str
    ) -> list[Hit]:
        per_leg = {leg: _best_of_each(found, granularity) for leg, found in legs.items()}
        scores = {leg: {key: c.score for key, c in best.items()} for leg, best in per_leg.items()}
        fused = self.fusion(scores) if len(legs) > 1 else next(iter(scores.values()), {})
        leg_ranks = {leg: ranks(s) for leg, s in scores.items()}
        hits = []
        for key in sorted(fused, key=lambda kk: (-fused[kk], kk))[:k]:
            found = {leg: best[key] for leg, best in per_leg.items() if key in best}
            breakdown = {
                leg: {"rank": leg_ranks[leg][key], "score": one.raw_score}
                for leg, one in found.items()
            }
            # A document is shown by its chunk from the leg that ranked it highest.
            shown = found[min(found, key=lambda leg: leg_ranks[leg][key])]
            hits.append(_hit(shown, query, fused[key], breakdown))
        return hits


def _hit(shown: Candidate, query: str, score: float, scores: dict[str, Any]) -> Hit:
    view = {f.name: getattr(shown, f.name) for f in fields(ChunkView)}
    snippet = make_snippet(shown.text, query, offset=shown.char_start)
    return Hit(**view, score=score, scores=scores, snippet=snippet)


def open_index(collection: str | None = None, *, db: str | None = None) -> Retriever:
    """Shorthand for `Retriever(collection, db=db)`."""
    return Retriever(collection, db=db)
