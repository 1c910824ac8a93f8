"""`Retriever`: search a collection from Python, the way the CLI and the UI do.

    from docsearch import Retriever
    hits = Retriever("contracts").search("termination for cause", k=5)
    hits[0].path, hits[0].pages, hits[0].snippet.marked(), hits[0].scores

Modes: `hybrid` (dense + BM25, fused; the default when the collection has vectors), `vector`,
`lexical` (loads no model). Documents are ranked by legs at the document level (whole-document
BM25, the doc-mean vector) and chunk legs aggregated per document, fused by the mode's rule in
`docsearch.fusion.DOCUMENT_RULES` (a hybrid query of LONG_QUERY_WORDS or more takes the lexical
rule, a shorter query of key terms (fusion.is_key_terms) fusion.TERM_LIST_RULE; neither is encoded); where no document leg can answer (a collection without a
document table, a `where` on chunk columns) a document scores as its best chunk in each leg
(CHUNK_FUSION). A document hit carries its best passages (up to MAX_PASSAGES, ranked as passage
search ranks them); `granularity="passage"` returns chunks instead (for RAG). Exact identifiers in
the query ("Section 7.2(a)", "ISO 13485:2016") are matched as phrases and lift the chunks that
contain them (passages; the document rules use plain BM25, as they were measured): all of a
query's identifiers (at most `text.MAX_IDENTIFIERS`) go into one extra full-text search.
A query that names a numbered instrument ("Amendment No. 3 to the License Agreement") ranks the
documents whose opening says they are that instrument first among the fused top INSTRUMENT_DEPTH
(`docsearch.instruments`; `instrument` in `Hit.scores`); passages are not lifted.
A Retriever follows its collection: once a switch (`docsearch index --switch`) swaps in a version
built with another encoder or chunker, searches go to that version, with its encoder; each search
reads one version from start to end, and one the swap interrupted is run again on the new one.
Bad input of any kind (an unusable query, `k`, mode or filter) is a UsageError; `where` is checked
as `docsearch.indexer.filters` describes, so it can narrow a search but never widen `path`.
Each leg returns the store's candidates; fusion works on `{key: score}` maps; a `Hit`'s
`Snippet` holds its text, the marked spans and where the passage lies in the document.
`similar` takes a document instead of a query (a file, or a document of the collection) and
returns the documents most like it, each with the key terms and passage pairs that explain it
(`docsearch.similar` picks the terms, matches the chunks and pairs the passages;
`fusion.SIMILAR_RULES` fuses its legs).
Not here: query encoding details (the encoder's), result rendering (CLI/UI).
"""

from __future__ import annotations

import logging
import operator
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from docsearch import instruments
from docsearch.common_words import common_words, without_common
from docsearch.config import Settings
from docsearch.defaults import MODES
from docsearch.encoders.base import Encoder, encoder_from_spec, same_identity
from docsearch.errors import DocsearchError, EncoderUnavailableError, UsageError
from docsearch.fusion import (
    CHUNK_FUSION,
    LONG_QUERY_WORDS,
    SIMILAR_RULES,
    Fusion,
    aggregate,
    document_rule,
    ranks,
)
from docsearch.indexer.filters import ChunkFilter
from docsearch.indexer.store import (
    RESULT_COLUMNS,
    Candidate,
    ChunkView,
    DocCandidate,
    Store,
    candidate,
    resolve_collection,
    sql_in,
    sql_str,
)
from docsearch.results import ENCODER_UNAVAILABLE, NO_VECTORS, SearchResult, rule_name
from docsearch.similar import (
    MAX_TERMS,
    ChunkMatch,
    InCollection,
    QueryDocument,
    best_passage,
    chunk_view,
    collection_stats,
    document_chunks,
    lexical_query,
    query_document,
    shared_terms,
)
from docsearch.snippets import Snippet, make_snippet
from docsearch.text import identifiers

if TYPE_CHECKING:
    from docsearch.indexer.extract import Document

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_H = TypeVar("_H", bound="Hit")

GRANULARITIES = ("document", "passage")
# The longest queries of the evaluation sets here (whole-case queries aside) are abstracts of
# 2.3k characters; 10k (about 1,500 words) leaves four times that, and bounds the lexical leg's
# cost, one posting list per distinct term. Whole documents as queries (median 38k characters in
# irled2017-precedent) are for a query-by-document path that picks their discriminative terms.
MAX_QUERY_CHARS = 10_000
MAX_K = 10_000  # far beyond any results page or evaluation depth (100); bounds the pools
# The depths the document rules were chosen with (benchmarks/results/doclevel.md): chunks per
# chunk leg, documents per document leg; a deeper `k` asks for more.
CHUNK_POOL = 500
DOC_POOL = 500
MAX_PASSAGES = 3  # passages shown per document
# Search encodes the query and runs the phrase and whole-document BM25 searches on a thread of
# its own while the chunk BM25 runs (OVERLAP_ENCODING = False: all on the caller's thread).
OVERLAP_ENCODING = True
# Query by document: the documents each document leg ranks best whose chunks are matched with
# the query document's, chunk by chunk (the `chunk_dense` leg of fusion.SIMILAR_RULES).
MATCH_POOL = 100
# A query that names a numbered instrument ("Amendment No. 3 to the License Agreement") lifts
# the documents among the fused ranking's first INSTRUMENT_DEPTH whose opening says they are
# that instrument above the rest there: their siblings share every other word
# (`docsearch.instruments`). LIFT_INSTRUMENTS = False: the fused order as it is.
INSTRUMENT_DEPTH = 20
LIFT_INSTRUMENTS = True


@dataclass(frozen=True)
class Passage(ChunkView):
    """A chunk as a result shows it: where it lies, its score and its snippet."""

    score: float  # what passage search ranks it by (the fused chunk legs)
    snippet: Snippet = Snippet("")  # its best window, the query terms marked by offsets

    @property
    def pages(self) -> str:
        if self.page_start == self.page_end:
            return str(self.page_start)
        return f"{self.page_start}-{self.page_end}"

    @property
    def page(self) -> int | None:
        """The page where the snippet's first marked word is (a pin cite), None if unknown."""
        return self.page_of(self.snippet.anchor)

    @property
    def provenance(self) -> str:
        """Where the text comes from beyond path and page, in one line ("" for most files): the
        attachment it is and the message it came in, a sheet's rows or a chapter."""
        parts = []
        if self.part:
            parts.append(f"attachment {self.part}")
        if self.email_subject or self.email_from:
            mail = f"e-mail {self.email_subject!r}" if self.email_subject else "e-mail"
            mail += f" from {self.email_from}" if self.email_from else ""
            mail += f" to {self.email_to}" if self.email_to else ""
            parts.append(mail + (f", {self.email_date}" if self.email_date else ""))
        if self.location:
            parts.append(self.location)
        return " · ".join(parts)

    @property
    def cite(self) -> str:
        """The page as a result shows it: the marked words' page, else the chunk's pages."""
        page = self.page
        return self.pages if page is None else str(page)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data; `snippet` is the marked text (`**term**`)."""
        passage = self.snippet
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "snippet": passage.marked(),
            "snippet_marks": passage.marks,  # spans of the snippet's unmarked text
            "snippet_span": (passage.char_start, passage.char_end),  # in the document's text
            "pages": self.pages,
            "page": self.page,
            "provenance": self.provenance,
        }


@dataclass(frozen=True)
class Hit(Passage):
    """One result. A document: `score` is its fused score, `passages` its best passages (best
    first; the hit's own chunk fields and snippet are the first one's). A passage (granularity
    "passage"): `passages` is empty. `scores` has each leg's rank and raw score, and `fused`: the
    hit's rank, fused score and, under the agreement guard, the factor its dense weights got."""

    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    passages: tuple[Passage, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """As `Passage.as_dict`, with `passages` (less what the document already says)."""
        document = ("text", "path", "title", "doc_id")
        passages = [
            {key: value for key, value in p.as_dict().items() if key not in document}
            for p in self.passages
        ]
        return super().as_dict() | {"passages": passages}


@dataclass(frozen=True)
class PassagePair:
    """A passage of the query document and one of a similar document that explain the match.
    `by` "vectors": the two chunks of highest cosine similarity (`score`); "terms": the
    passages holding the most of the shared key terms (`score`: their summed weights in the
    similar document's passage)."""

    query: Passage
    match: Passage
    score: float
    by: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "score": self.score,
            "query": self.query.as_dict(),
            "match": self.match.as_dict(),
        }


@dataclass(frozen=True)
class SimilarHit(Hit):
    """A result of `Retriever.similar`: `terms` are the query document's key terms this
    document also holds (best first, with their weights); `pairs` the passage pairs that
    explain it, best first (by vectors when both documents have them, else by the shared
    terms); `passages` are this document's side of them, `query_passage` the query
    document's side of the first."""

    terms: dict[str, float] = field(default_factory=dict)
    query_passage: Passage | None = None
    pairs: tuple[PassagePair, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        query = self.query_passage.as_dict() if self.query_passage else None
        return super().as_dict() | {
            "terms": list(self.terms),
            "query_passage": query,
            "pairs": [pair.as_dict() for pair in self.pairs],
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


def _view(found: ChunkView, query: str) -> dict[str, Any]:
    """A chunk's fields and its snippet, as a Passage or Hit takes them."""
    view = {f.name: getattr(found, f.name) for f in fields(ChunkView)}
    return view | {"snippet": make_snippet(found.text, query, offset=found.char_start)}


def _per_doc(found: Sequence[Candidate], raw: bool) -> dict[str, list[float]]:
    """doc_id -> the scores (or raw scores) of its chunks among `found`."""
    out: dict[str, list[float]] = {}
    for one in found:
        out.setdefault(one.doc_id, []).append(one.raw_score if raw else one.score)
    return out


class _Ranking:
    """Keys (chunk or document ids) fused by a rule, best first, with per-leg breakdowns."""

    def __init__(
        self, legs: dict[str, dict[str, float]], rule: Fusion, shown: dict[str, dict[str, float]]
    ) -> None:
        self.rule = rule
        self.fused, self.agreement = rule.fuse(legs)
        self.order = sorted(self.fused, key=lambda key: (-self.fused[key], key))
        self.shown = shown  # the scores a breakdown reports (raw: before any lift)
        self.ranks = {leg: ranks(scores) for leg, scores in legs.items()}

    def scores(self, key: str, rank: int) -> dict[str, dict[str, float]]:
        legs = {
            leg: {"rank": found[key], "score": self.shown[leg][key]}
            for leg, found in self.ranks.items()
            if key in found
        }
        fused = {"rank": rank, "score": self.fused[key]}
        if self.agreement is not None:
            fused["agreement"] = self.agreement
        return legs | {"fused": fused}


@dataclass(frozen=True)
class _Legs:
    """What a document search's chunk legs found: each leg's candidates, their fused ranking,
    each candidate by chunk id; and the document legs already searched beside them."""

    found: dict[str, list[Candidate]]
    chunks: _Ranking
    by_id: dict[str, Candidate]
    documents: dict[str, list[DocCandidate]]


def _passage_pairs(
    query: QueryDocument,
    views: Sequence[ChunkView],
    vectors: np.ndarray | None,
    shared: dict[str, float],
) -> list[PassagePair]:
    """What explains a similar document: its chunks and the query document's of highest cosine
    similarity when both have vectors (up to MAX_PAIRS pairs), else the passage of each holding
    the most of the shared key terms. Snippets mark the shared terms."""
    marked = " ".join(shared)
    if vectors is not None and query.chunk_vectors is not None and len(vectors):
        return [
            PassagePair(
                Passage(**_view(query.embedded[mine], marked), score=cosine),
                Passage(**_view(views[theirs], marked), score=cosine),
                cosine,
                "vectors",
            )
            for mine, theirs, cosine in ChunkMatch.of(query.chunk_vectors, vectors).pairs()
        ]
    if not query.chunks:
        return []
    chunk, score = best_passage(views, shared)
    mine, mine_score = best_passage(query.chunks, shared)
    return [
        PassagePair(
            Passage(**_view(mine, marked), score=mine_score),
            Passage(**_view(chunk, marked), score=score),
            score,
            "terms",
        )
    ]


class Retriever:
    """Search one collection. The query encoder is the one the collection was built with.

    `encoders` (a spec -> Encoder callable, as `docsearch.registry.CollectionRegistry` gives)
    says where that encoder comes from: Retrievers sharing one load a model once; default: each
    loads its own. `close()` ends the Retriever's query thread (searching after it starts a new
    one); a Retriever is also a context manager that closes itself."""

    def __init__(
        self,
        collection: str | None = None,
        *,
        db: str | None = None,
        encoder: Encoder | None = None,
        fusion: Fusion | None = None,
        settings: Settings | None = None,
        encoders: Callable[[dict[str, Any]], Encoder] | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.db = db or self.settings.db
        # The version of the collection this Retriever reads; `store` never changes. Once a
        # switch swaps in another version, reads go to `_successor`, a Retriever on that one.
        self.store = Store.open(self.db, resolve_collection(self.db, collection))
        self._given_encoder = encoder
        self._encoder = encoder
        self._encoders = encoders or encoder_from_spec
        self._query_thread: ThreadPoolExecutor | None = None  # see _beside
        # The hybrid rule. None: the default rules (fusion.DOCUMENT_RULES for documents,
        # CHUNK_FUSION for passages); one over the chunk legs alone ranks documents by their best
        # chunk in each leg and passages as well, one with document legs ranks documents only.
        self.fusion = fusion or self.settings.fusion()
        self._successor: Retriever | None = None
        self._following = threading.Lock()

    @property
    def collection(self) -> str:
        return self.store.name

    def encoder(self) -> Encoder:
        """The serving version's encoder, loaded on first use (lexical search never loads it)."""
        return self._serving()._own_encoder()

    def _own_encoder(self) -> Encoder:
        if self._encoder is None:
            if self.store.meta.encoder is None:
                raise UsageError(f"collection {self.collection!r} has no vectors (lexical only)")
            self._encoder = self._encoders(self.store.meta.encoder)
        return self._encoder

    def close(self) -> None:
        """End the query threads of this Retriever and of the versions it followed. The
        encoder stays loaded (it may be shared); searching again is allowed."""
        with self._following:
            successor = self._successor
        thread, self._query_thread = self._query_thread, None
        if thread is not None:
            thread.shutdown(wait=True)
        if successor is not None:
            successor.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def default_mode(self) -> str:
        return self._serving()._own_default_mode()

    def _own_default_mode(self) -> str:
        return "hybrid" if self.store.has_vectors else "lexical"

    # -- following the collection's serving version ---------------------------------------------

    def _serving(self) -> Retriever:
        """The Retriever of the version that serves searches now: this one until the collection
        switches to another version (or is dropped and built again), then its successor's.
        Nothing changes under a Retriever once made, so one search reads one version, with that
        version's encoder, from its start to its end."""
        if self._successor is None and self.store.is_current():
            return self
        with self._following:
            if self._successor is None:
                self._successor = self._next_version()
        return self._successor._serving()

    def _next_version(self) -> Retriever:
        """A Retriever on the serving version; the caller's encoder goes with it only if that
        version was built with it."""
        follower = Retriever(
            self.collection,
            db=self.db,
            fusion=self.fusion,
            settings=self.settings,
            encoders=self._encoders,
        )
        given, spec = self._given_encoder, follower.store.meta.encoder
        if given is not None and spec is not None and same_identity(given.spec(), spec):
            follower._given_encoder = follower._encoder = given
        log.info(
            "collection %r: now reading its version %d", self.collection, follower.store.version
        )
        return follower

    def _on_serving(self, read: Callable[[Retriever], _T]) -> _T:
        """`read` on the serving version's Retriever; once more on the next one if a switch
        swapped versions while it read (the old version's tables are dropped then, so a read
        that was under way can fail). Bad input (a DocsearchError) is never retried."""
        current = self._serving()
        try:
            return read(current)
        except DocsearchError:
            raise
        except Exception:
            if current.store.is_current():
                raise
            log.info("collection %r switched during a read; reading again", self.collection)
            return read(self._serving())

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
        `paths` a list of exact paths; each only narrows the search. The hits alone: to know
        the mode that answered them (hybrid falls back to lexical without vectors or encoder)
        and the rule that ranked them, call `search_result` with the same arguments.
        """
        return self.search_result(
            query, k, mode, where, path=path, paths=paths, granularity=granularity
        ).hits

    def search_result(
        self,
        query: str,
        k: int = 10,
        mode: str | None = None,
        where: str | None = None,
        *,
        path: str | None = None,
        paths: Sequence[str] | None = None,
        granularity: str = "document",
    ) -> SearchResult[Hit]:
        """As `search`, with how it was answered: a `docsearch.results.SearchResult` (the
        hits, the mode that answered, the mode asked for, the rule that ranked, why the mode
        fell back)."""
        return self._on_serving(
            lambda version: version._search(
                query, k, mode, where, path=path, paths=paths, granularity=granularity
            )
        )

    def _search(
        self,
        query: str,
        k: int,
        mode: str | None,
        where: str | None,
        *,
        path: str | None,
        paths: Sequence[str] | None,
        granularity: str,
    ) -> SearchResult[Hit]:
        query = clean_query(query)
        k = _whole_number(k)
        if granularity not in GRANULARITIES:
            raise UsageError(f"granularity must be one of {', '.join(GRANULARITIES)}")
        flt = ChunkFilter(path=path, paths=paths, where=where)
        asked = mode or self._own_default_mode()
        mode = self._usable_mode(asked)
        documents = granularity == "document"
        rule = self._document_rule(mode, flt, query) if documents else None
        pool = max(CHUNK_POOL, 5 * k) if documents else max(20, 2 * k)
        # The query thread does the work that can wait while this one runs the chunk BM25:
        # the identifiers' phrase search (needed first), the query's encoding (torch and Lance
        # both release the GIL; for a long query the encoder's forward is the slowest single
        # step) and whole-document BM25, so two cores serve the searches at once. A rule with
        # no dense leg (hybrid on a long query) needs no vector.
        lexical_legs = mode != "vector"
        # A document rule ranks by plain BM25: the identifiers only order a document's passages,
        # and the chunk pool holds enough of them for that (the phrase search cost a 200-word
        # query 40 ms at 100k chunks).
        phrased = lexical_legs and not (rule is not None and rule.uses_documents)
        words = self._bm25_words(query) if lexical_legs else query
        phrases = self._phrases_beside(query, pool, flt) if phrased else None
        encoding = None
        if mode != "lexical" and (rule is None or rule.uses_dense):
            encoder = self._own_encoder()
            encoding = self._beside(lambda: encoder.encode_queries([query])[0], lexical_legs)
        whole: Future[list[DocCandidate]] | None = None
        if lexical_legs and rule is not None and rule.weights.get("doc_lexical"):
            depth = max(DOC_POOL, k)
            whole = self._beside(lambda: self.store.search_documents_text(words, depth, flt))
        # A document search reads the text only of the chunks it shows (`_documents`), and of
        # its BM25 pool where the identifier lift needs it.
        pool_text = not documents or bool(identifiers(query))
        bm25: list[Candidate] = []
        if lexical_legs:
            bm25 = self.store.search_text(words, pool, flt, text=pool_text)
            lifted = _lift(query, bm25, phrases.result() if phrases else [], pool)
        lexical = {"doc_lexical": whole.result()} if whole is not None else {}
        vector = encoding.result() if encoding is not None else None
        found: dict[str, list[Candidate]] = {}
        if vector is not None:
            found["dense"] = self.store.search_vector(vector, pool, flt, text=not documents)
        if mode != "vector":
            found["lexical"] = lifted
        chunks = _Ranking(
            {leg: {c.chunk_id: c.score for c in cands} for leg, cands in found.items()},
            self.fusion if self.fusion and not self.fusion.uses_documents else CHUNK_FUSION,
            {leg: {c.chunk_id: c.raw_score for c in cands} for leg, cands in found.items()},
        )
        by_id = {c.chunk_id: c for cands in found.values() for c in cands}
        if rule is not None:
            if rule.uses_documents and "lexical" in found:  # measured on plain BM25 (no lift)
                found = {**found, "lexical": bm25}
            legs = _Legs(found, chunks, by_id, lexical)
            hits = self._documents(query, words, vector, rule, legs, k, flt)
            return self._result(hits, asked, mode, rule_name(rule, mode))
        hits = [
            Hit(**_view(by_id[key], query), score=chunks.fused[key], scores=chunks.scores(key, i))
            for i, key in enumerate(chunks.order[:k], start=1)
        ]
        return self._result(hits, asked, mode, rule_name(chunks.rule, mode))

    def _result(self, hits: list[_H], asked: str, mode: str, rule: str) -> SearchResult[_H]:
        """`hits` as a SearchResult: answered in `mode`, asked in `asked` (where they differ,
        the collection has no vectors or its encoder could not be loaded: `_usable_mode`)."""
        fallback = None
        if mode != asked:
            fallback = ENCODER_UNAVAILABLE if self.store.has_vectors else NO_VECTORS
        return SearchResult(hits, mode=mode, asked=asked, rule=rule, fallback=fallback)

    def similar(
        self,
        source: str | Path | Document | InCollection,
        k: int = 10,
        mode: str | None = None,
        *,
        terms: int = MAX_TERMS,
        explain: bool = True,
        rule: Fusion | None = None,
    ) -> list[SimilarHit]:
        """The `k` documents most like `source`, best first: a file (in the collection or not,
        any supported format), the path or doc id of a document of the collection, an
        extracted Document, or an InCollection (a doc id, never read as a file). The query
        document itself is never among them. Lexical side: one whole-document BM25 query of its
        `terms` key terms; dense side: its doc-mean vector and, for the best documents of either,
        chunk-to-chunk matching (`chunk_dense`); fused by `rule` (default
        `fusion.SIMILAR_RULES[mode]`). `explain=False` skips the shared terms and passage pairs
        (each hit then shows its opening passage). The hits alone: `similar_result` says how
        they were answered, as `search_result` does."""
        return self.similar_result(source, k, mode, terms=terms, explain=explain, rule=rule).hits

    def similar_result(
        self,
        source: str | Path | Document | InCollection,
        k: int = 10,
        mode: str | None = None,
        *,
        terms: int = MAX_TERMS,
        explain: bool = True,
        rule: Fusion | None = None,
    ) -> SearchResult[SimilarHit]:
        """As `similar`, with the mode that answered and the rule (`docsearch.results`)."""
        return self._on_serving(
            lambda version: version._similar(
                source, k, mode, terms=terms, explain=explain, rule=rule
            )
        )

    def _similar(
        self,
        source: str | Path | Document | InCollection,
        k: int,
        mode: str | None,
        *,
        terms: int,
        explain: bool,
        rule: Fusion | None,
    ) -> SearchResult[SimilarHit]:
        k = _whole_number(k)
        asked = mode or self._own_default_mode()
        mode = self._usable_mode(asked)
        if not self.store.has_documents:
            raise UsageError(
                f"collection {self.collection!r} has no document table yet; run "
                "`docsearch index` on it once to add it"
            )
        encoder = None if mode == "lexical" else self._own_encoder()
        query = query_document(self.store, source, encoder)
        # A document from outside is embedded beside the lexical leg (torch and Lance both
        # release the GIL): for a long one the encoder's forward is the slowest step.
        embedding = None
        if encoder is not None and query.needs_vectors:
            embedding = self._beside(partial(query.embed, encoder), mode == "hybrid")
        stats = collection_stats(self.store)
        key = stats.key_terms(query.text, terms, min_df=1 if query.doc_id is None else 2)
        depth = max(DOC_POOL, k) + 1  # one more: the query document may be among them
        found: dict[str, list[DocCandidate]] = {}
        if mode != "vector" and key:
            text = lexical_query(key)
            found["doc_lexical"] = self.store.search_documents_text(text, depth, None)
        if embedding is not None:
            query = embedding.result()
        if query.vector is not None:
            found["doc_dense"] = self.store.search_documents_vector(query.vector, depth, None)
        found = {leg: [d for d in docs if d.doc_id != query.doc_id] for leg, docs in found.items()}
        legs = {leg: {d.doc_id: d.score for d in docs} for leg, docs in found.items()}
        shown = {leg: {d.doc_id: d.raw_score for d in docs} for leg, docs in found.items()}
        rule = rule or SIMILAR_RULES[mode]
        chunks: dict[str, tuple[list[ChunkView], np.ndarray | None]] = {}
        if query.chunk_vectors is not None and rule.weights.get("chunk_dense"):
            pool = list(
                dict.fromkeys(d.doc_id for docs in found.values() for d in docs[:MATCH_POOL])
            )
            chunks = document_chunks(self.store, pool, with_vectors=True)
            legs["chunk_dense"] = shown["chunk_dense"] = {
                doc: ChunkMatch.of(query.chunk_vectors, vectors).score()
                for doc, (_, vectors) in chunks.items()
                if vectors is not None
            }
        ranking = _Ranking(legs, rule, shown)
        top = ranking.order[:k]
        chunks.update(self._chunks_to_show(top, chunks, explain, query.chunk_vectors is not None))
        hits = [
            self._similar_hit(query, key, chunks[doc], ranking, doc, i, explain)
            for i, doc in enumerate(top, start=1)
        ]
        return self._result(hits, asked, mode, rule_name(rule, mode))

    def _chunks_to_show(
        self,
        top: Sequence[str],
        known: dict[str, tuple[list[ChunkView], np.ndarray | None]],
        explain: bool,
        vectors: bool,
    ) -> dict[str, tuple[list[ChunkView], np.ndarray | None]]:
        """The chunks (and vectors) of the results not read yet: all of them to explain a
        result, its opening chunk otherwise."""
        missing = [doc for doc in top if doc not in known]
        if explain:
            return document_chunks(self.store, missing, with_vectors=vectors)
        out: dict[str, tuple[list[ChunkView], np.ndarray | None]] = {}
        where = f"{sql_in('doc_id', missing)} AND ordinal = 0"
        for row in self.store.rows(where, RESULT_COLUMNS) if missing else []:
            out[row["doc_id"]] = ([chunk_view(row)], None)
        return out

    def _similar_hit(
        self,
        query: QueryDocument,
        key: list[tuple[str, float]],
        chunks: tuple[list[ChunkView], np.ndarray | None],
        ranking: _Ranking,
        doc: str,
        rank: int,
        explain: bool,
    ) -> SimilarHit:
        """A result with its explanation: the shared key terms and the passage pairs."""
        views, vectors = chunks
        shared = shared_terms(key, views) if explain else {}
        pairs = _passage_pairs(query, views, vectors, shared) if explain else []
        if pairs:
            passages = tuple(pair.match for pair in pairs)
        else:  # not explained: the opening passage
            passages = (Passage(**_view(views[0], ""), score=0.0),)
        best = {f.name: getattr(passages[0], f.name) for f in fields(Passage)}
        best["score"] = ranking.fused[doc]
        return SimilarHit(
            **best,
            scores=ranking.scores(doc, rank),
            passages=passages,
            terms=shared,
            query_passage=pairs[0].query if pairs else None,
            pairs=tuple(pairs),
        )

    def _documents(
        self,
        query: str,
        words: str,
        vector: Any,
        rule: Fusion,
        searched: _Legs,
        k: int,
        flt: ChunkFilter,
    ) -> list[Hit]:
        """The top `k` documents by `rule`, each with its best passages (the chunk ranking's
        order); `words`: the query as the BM25 searches take it."""
        chunks, by_id = searched.chunks, searched.by_id
        legs, shown = {}, {}
        for leg, cands in searched.found.items():
            how = rule.aggregate.get(leg, "max")
            legs[leg] = aggregate(_per_doc(cands, raw=False), how)
            shown[leg] = aggregate(_per_doc(cands, raw=True), how)
        doc_paths = {c.doc_id: c.path for c in by_id.values()}
        depth = max(DOC_POOL, k)
        ready = searched.documents
        for leg, docs in self._document_legs(words, vector, rule, depth, flt, ready).items():
            legs[leg] = {d.doc_id: d.score for d in docs}
            shown[leg] = {d.doc_id: d.raw_score for d in docs}
            doc_paths.update((d.doc_id, d.path) for d in docs)
        ranking = _Ranking(legs, rule, shown)
        order, named = self._instruments_first(ranking.order, query, doc_paths)
        best: dict[str, list[str]] = {}  # doc_id -> its chunks, best first
        for key in chunks.order:
            best.setdefault(by_id[key].doc_id, []).append(key)
        top = order[:k]
        wanted = [by_id[key] for doc in top for key in best.get(doc, [])[:MAX_PASSAGES]]
        read = {one.chunk_id: one for one in self.store.with_text(wanted)}
        # A document indexed again since the legs read it has lost those chunks: it is then
        # searched again, as the documents the pool missed are.
        shown_chunks = {
            doc: [read[key] for key in best.get(doc, [])[:MAX_PASSAGES] if key in read]
            for doc in top
        }
        unreached = self._passages_of(
            {d: doc_paths[d] for d in top if not shown_chunks[d]}, query, words, vector
        )
        hits: list[Hit] = []
        for doc in top:
            passages = [
                Passage(**_view(one, query), score=chunks.fused[one.chunk_id])
                for one in shown_chunks[doc]
            ] or unreached.get(doc, [])
            if not passages:  # deleted since the legs read it: no chunk of it is left to show
                continue
            best_passage = {f.name: getattr(passages[0], f.name) for f in fields(Passage)}
            best_passage["score"] = ranking.fused[doc]
            scores = ranking.scores(doc, len(hits) + 1)
            if doc in named:
                scores["instrument"] = {"rank": named[doc][0], "score": float(named[doc][1])}
            hits.append(Hit(**best_passage, scores=scores, passages=tuple(passages)))
        return hits

    def _instruments_first(
        self, order: list[str], query: str, doc_paths: dict[str, str]
    ) -> tuple[list[str], dict[str, tuple[int, int]]]:
        """`order` with the documents among its first INSTRUMENT_DEPTH that are instruments the
        query names (by their first chunk's opening) moved ahead, those naming the most first,
        else in fused order; and doc_id -> (rank among them, how many it is) for each."""
        wanted = instruments.in_query(query) if LIFT_INSTRUMENTS else frozenset()
        head = order[:INSTRUMENT_DEPTH]
        if not wanted or not head:
            return order, {}
        first_chunks = ChunkFilter(paths=[doc_paths[doc] for doc in head], where="ordinal = 0")
        opening = {
            row["path"]: row["text"] for row in self.store.rows(first_chunks, ["path", "text"])
        }
        held = {
            doc: len(instruments.matches(wanted, opening.get(doc_paths[doc], ""))) for doc in head
        }
        lifted = sorted(head, key=lambda doc: -held[doc])  # stable: fused order among equals
        named = [doc for doc in lifted if held[doc]]
        return lifted + order[INSTRUMENT_DEPTH:], {
            doc: (i, held[doc]) for i, doc in enumerate(named, start=1)
        }

    def _document_rule(self, mode: str, flt: ChunkFilter, query: str) -> Fusion:
        """The mode's document rule for `query` (hybrid: the Retriever's fusion if it has one);
        CHUNK_FUSION where the rule's document legs cannot answer."""
        rule = self.fusion if mode == "hybrid" and self.fusion else document_rule(mode, query)
        if rule.uses_documents and (flt.has_where or not self.store.has_documents):
            return CHUNK_FUSION
        return rule

    def _document_legs(
        self,
        words: str,
        vector: Any,
        rule: Fusion,
        depth: int,
        flt: ChunkFilter,
        ready: dict[str, list[DocCandidate]],
    ) -> dict[str, list[DocCandidate]]:
        """The document legs `rule` weighs: whole-document BM25 (of `words`), the doc-mean
        vector (those in `ready` were searched already)."""
        legs = {}
        if rule.weights.get("doc_lexical"):
            found = ready.get("doc_lexical")
            if found is None:
                found = self.store.search_documents_text(words, depth, flt)
            legs["doc_lexical"] = found
        if rule.weights.get("doc_dense") and vector is not None:
            legs["doc_dense"] = self.store.search_documents_vector(vector, depth, flt)
        return legs

    def _passages_of(
        self, docs: dict[str, str], query: str, words: str, vector: Any
    ) -> dict[str, list[Passage]]:
        """doc_id -> the best passages of each document (`docs`: doc_id -> its path) no chunk
        leg's pool reached: by BM25 of `words` within them (one search for all), else by the
        query vector, else its opening chunk (its match was on words chunks do not index, such
        as stop words). A file may hold several documents (an e-mail's attachments)."""
        if not docs:
            return {}
        found: dict[str, list[Candidate]] = {doc: [] for doc in docs}
        # Deep enough that each document almost always gets its passages from this one search
        # (a search per document cost 4 ms each at 100k chunks); were it filled, one that got
        # none is searched alone.
        depth = min(MAX_K, 20 * MAX_PASSAGES * len(docs))
        paths = sorted(set(docs.values()))
        together = self.store.search_text(words, depth, ChunkFilter(paths=paths), text=False)
        for one in together:
            if one.doc_id in found and len(found[one.doc_id]) < MAX_PASSAGES:
                found[one.doc_id].append(one)
        chosen = self.store.with_text([one for cands in found.values() for one in cands])
        found = {doc: [one for one in chosen if one.doc_id == doc] for doc in docs}
        for doc, cands in found.items():
            only = ChunkFilter(paths=[docs[doc]], where=f"doc_id = {sql_str(doc)}")
            if not cands and len(together) == depth:
                cands += self.store.search_text(words, MAX_PASSAGES, only)
            if not cands and vector is not None:
                cands += self.store.search_vector(vector, MAX_PASSAGES, only)
            if not cands:
                opening = ChunkFilter(
                    paths=[docs[doc]], where=f"doc_id = {sql_str(doc)} AND ordinal = 0"
                )
                cands += [candidate(row, 0.0) for row in self.store.rows(opening, RESULT_COLUMNS)]
        return {
            doc: [Passage(**_view(one, query), score=one.score) for one in cands]
            for doc, cands in found.items()
        }

    def _bm25_words(self, query: str) -> str:
        """`query` as its BM25 searches take it: a long one without the words most chunks hold
        (`docsearch.common_words`), which cost those searches most and weigh least."""
        if len(query.split()) < LONG_QUERY_WORDS:
            return query
        return without_common(query, common_words(self.store))

    def _beside(self, work: Callable[[], _T], overlap: bool = True) -> Future[_T]:
        """`work` run on the Retriever's query thread while the caller goes on (`overlap`;
        else here and now, as a finished future)."""
        if not (overlap and OVERLAP_ENCODING):
            done: Future[_T] = Future()
            done.set_result(work())
            return done
        pool = self._query_thread
        if pool is None:
            pool = self._query_thread = ThreadPoolExecutor(1, thread_name_prefix="docsearch-query")
        try:
            return pool.submit(work)
        except RuntimeError:  # closed by another thread meanwhile (`close`): run it here
            return self._beside(work, overlap=False)

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
                self._own_encoder()
            except EncoderUnavailableError as exc:  # BM25 always answers
                log.warning("encoder unavailable (%s); falling back to lexical search", exc)
                return "lexical"
        return mode

    def lexical(self, query: str, limit: int, where: ChunkFilter | None) -> list[Candidate]:
        """BM25 candidates, with chunks containing the query's identifiers verbatim lifted to
        the top (their raw_score stays the true BM25)."""
        version = self._serving()
        phrases = version._phrases_beside(query, limit, where)
        return _lift(query, version.store.search_text(query, limit, where), phrases.result(), limit)

    def _phrases_beside(
        self, query: str, limit: int, where: ChunkFilter | None
    ) -> Future[list[Candidate]]:
        """The chunks holding the query's identifiers verbatim, searched on the query thread.
        One full-text query for all of them: a 200-word query held up to 9 identifiers, and a
        phrase search each cost the lexical leg up to 9 extra searches."""
        idents = identifiers(query)
        if not idents:
            return self._beside(list, overlap=False)
        return self._beside(lambda: self.store.search_phrases(idents, limit, where))


def _lift(
    query: str, found: list[Candidate], phrased: list[Candidate], limit: int
) -> list[Candidate]:
    """`found` and `phrased` with the chunks that hold the query's identifiers verbatim lifted
    above all others, by how many of them they hold."""
    idents = identifiers(query)
    if not idents:
        return found
    by_id = {one.chunk_id: one for one in found}
    matched: Counter[str] = Counter()
    for one in [*found, *phrased]:
        text = one.text.lower()
        held = sum(ident.lower() in text for ident in idents)  # the index drops "a", "(", ...
        if held:  # a phrase hit without the identifier verbatim stays out (its score is not BM25's)
            matched[one.chunk_id] = held
            by_id.setdefault(one.chunk_id, one)
    lift = max((one.score for one in by_id.values()), default=0.0) + 1.0
    lifted = [
        replace(c, score=c.score + lift * matched[c.chunk_id]) if c.chunk_id in matched else c
        for c in by_id.values()
    ]
    return sorted(lifted, key=lambda one: -one.score)[:limit]


def open_index(collection: str | None = None, *, db: str | None = None) -> Retriever:
    """Shorthand for `Retriever(collection, db=db)`."""
    return Retriever(collection, db=db)
