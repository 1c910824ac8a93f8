"""`Retriever`: search a collection from Python, the way the CLI and the UI do.

    from docsearch import Retriever
    hits = Retriever("contracts").search("termination for cause", k=5)
    hits[0].path, hits[0].pages, hits[0].snippet, hits[0].scores

Modes: `hybrid` (dense + BM25, fused; the default when the collection has vectors), `vector`,
`lexical` (loads no model). A document scores as its best chunk in each leg; `granularity=
"passage"` returns chunks instead of documents (for RAG). Exact identifiers in the query
("Section 7.2(a)", "ISO 13485:2016") are matched as phrases and lift the chunks that contain them.
Bad input of any kind (an unusable query, `k`, mode or filter) is a UsageError; `where` is checked
as `docsearch.indexer.filters` describes, so it can narrow a search but never widen `path`.
Not here: query encoding details (the encoder's), result rendering (CLI/UI).
"""

from __future__ import annotations

import logging
import operator
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from docsearch.config import Settings, resolve_collection
from docsearch.defaults import MODES
from docsearch.encoders.base import Encoder, encoder_from_spec
from docsearch.errors import EncoderUnavailableError, UsageError
from docsearch.fusion import Fusion, ranks
from docsearch.indexer.filters import ChunkFilter
from docsearch.indexer.store import Store
from docsearch.snippets import identifiers, make_snippet

log = logging.getLogger(__name__)

GRANULARITIES = ("document", "passage")
# The longest queries of the evaluation sets here (whole-case queries aside) are abstracts of
# 2.3k characters; 10k (about 1,500 words) leaves four times that, and bounds the lexical leg's
# cost, one posting list per distinct term. Whole documents as queries (median 38k characters in
# irled2017-precedent) are for a query-by-document path that picks their discriminative terms.
MAX_QUERY_CHARS = 10_000
MAX_K = 10_000  # far beyond any results page or evaluation depth (100); bounds the pools


@dataclass
class Hit:
    """One result: a document (its best chunk) or a passage, with provenance and scores."""

    text: str  # the chunk's text
    path: str
    title: str
    page_start: int
    page_end: int
    char_start: int
    char_end: int
    heading_path: str
    chunk_id: str
    doc_id: str
    ordinal: int
    score: float  # the fused (or single-leg) score that ordered the results
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # leg -> {rank, score}
    snippet: str = ""  # best passage with query terms marked **like this**
    snippet_marks: tuple[tuple[int, int], ...] = ()  # spans in the unmarked snippet text

    @property
    def pages(self) -> str:
        if self.page_start == self.page_end:
            return str(self.page_start)
        return f"{self.page_start}-{self.page_end}"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"pages": self.pages}


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


def _display_score(row: dict[str, Any]) -> float:
    return float(row.get("_bm25", row["_score"]))


def _best_per_doc(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """doc_id -> its highest-scoring row (rows arrive best first)."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        best.setdefault(row["doc_id"], row)
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
        legs: dict[str, list[dict[str, Any]]] = {}
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

    def lexical(self, query: str, limit: int, where: ChunkFilter | None) -> list[dict[str, Any]]:
        """BM25 rows, with chunks containing the query's identifiers verbatim lifted to the top."""
        rows = self.store.search_text(query, limit, where)
        idents = identifiers(query)
        if not idents:
            return rows
        from lance.query import PhraseQuery

        matched: dict[str, int] = {}
        extra: dict[str, dict[str, Any]] = {}
        for ident in idents:
            phrase = PhraseQuery(ident, "text")
            for row in self.store.search_text(phrase, limit, where):
                if ident.lower() not in row["text"].lower():  # the index drops "a", "(", ...
                    continue
                matched[row["id"]] = matched.get(row["id"], 0) + 1
                extra.setdefault(row["id"], row)
        by_id = {row["id"]: row for row in rows}
        for key, row in extra.items():
            by_id.setdefault(key, row)
        lift = max((r["_score"] for r in by_id.values()), default=0.0) + 1.0
        for row in by_id.values():  # keep the true BM25 for display, order by the lifted score
            row["_bm25"] = row["_score"]
            row["_score"] = row["_score"] + lift * matched.get(row["id"], 0)
        ordered = sorted(by_id.values(), key=lambda r: -r["_score"])
        return ordered[:limit]

    def _fuse(
        self, query: str, legs: dict[str, list[dict[str, Any]]], k: int, granularity: str
    ) -> list[Hit]:
        key = "doc_id" if granularity == "document" else "id"
        per_leg = {
            leg: (_best_per_doc(rows) if key == "doc_id" else {r["id"]: r for r in rows})
            for leg, rows in legs.items()
        }
        scores = {
            leg: {kk: float(r["_score"]) for kk, r in best.items()} for leg, best in per_leg.items()
        }
        fused = self.fusion(scores) if len(legs) > 1 else next(iter(scores.values()), {})
        leg_ranks = {leg: ranks(s) for leg, s in scores.items()}
        hits = []
        for item in sorted(fused, key=lambda kk: (-fused[kk], kk))[:k]:
            row = self._representative(item, per_leg, leg_ranks)
            breakdown = {
                leg: {"rank": leg_ranks[leg][item], "score": _display_score(per_leg[leg][item])}
                for leg in per_leg
                if item in per_leg[leg]
            }
            hits.append(self._hit(row, query, fused[item], breakdown))
        return hits

    @staticmethod
    def _representative(
        item: str,
        per_leg: dict[str, dict[str, dict[str, Any]]],
        leg_ranks: dict[str, dict[str, int]],
    ) -> dict[str, Any]:
        """The row shown for a document: its chunk from the leg that ranked it highest."""
        legs = [leg for leg in per_leg if item in per_leg[leg]]
        best_leg = min(legs, key=lambda leg: leg_ranks[leg][item])
        return per_leg[best_leg][item]

    @staticmethod
    def _hit(row: dict[str, Any], query: str, score: float, scores: dict[str, Any]) -> Hit:
        snippet = make_snippet(row["text"], query)
        return Hit(
            text=row["text"],
            path=row["path"],
            title=row["title"],
            page_start=row["page_start"],
            page_end=row["page_end"],
            char_start=row["char_start"],
            char_end=row["char_end"],
            heading_path=row["heading_path"],
            chunk_id=row["id"],
            doc_id=row["doc_id"],
            ordinal=row["ordinal"],
            score=score,
            scores=scores,
            snippet=snippet.marked(),
            snippet_marks=snippet.marks,
        )


def open_index(collection: str | None = None, *, db: str | None = None) -> Retriever:
    """Shorthand for `Retriever(collection, db=db)`."""
    return Retriever(collection, db=db)
