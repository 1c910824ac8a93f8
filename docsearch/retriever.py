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
Where the parts live: the query cleaned and parsed once per search (`docsearch.query`), which
legs a search runs (`docsearch.search_plan`), fusing them and a document's passages
(`docsearch.ranking`), the hits (`docsearch.hits`), query by document
(`docsearch.similar_search`), following the collection's versions (`docsearch.following`);
this module runs the legs.
Not here: query encoding details (the encoder's), result rendering (CLI/UI).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from docsearch.common_words import common_words
from docsearch.config import Settings
from docsearch.defaults import MODES
from docsearch.encoders.base import Encoder, encoder_from_spec, same_identity
from docsearch.errors import EncoderUnavailableError, UsageError
from docsearch.following import Succession
from docsearch.fusion import Fusion
from docsearch.hits import Hit, Passage, PassagePair, SimilarHit, passage
from docsearch.indexer.filters import ChunkFilter
from docsearch.query import MAX_K, MAX_QUERY_CHARS, ParsedQuery, clean_query, whole_number
from docsearch.ranking import DocumentRanker, Legs, Ranking, leg_scores, lift
from docsearch.results import ENCODER_UNAVAILABLE, NO_VECTORS, SearchResult, rule_name
from docsearch.search_plan import SearchPlan
from docsearch.similar import MAX_TERMS, InCollection
from docsearch.similar_search import similar
from docsearch.store.database import resolve_collection
from docsearch.store.reads import Store
from docsearch.store.schema import Candidate, DocCandidate

if TYPE_CHECKING:
    from docsearch.indexer.extract import Document

# What `from docsearch.retriever import ...` gave before the results and the query had homes of
# their own (docsearch.hits, docsearch.query): still given, for library users.
__all__ = [
    "MAX_K",
    "MAX_QUERY_CHARS",
    "Hit",
    "Passage",
    "PassagePair",
    "Retriever",
    "SimilarHit",
    "clean_query",
    "open_index",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_H = TypeVar("_H", bound="Hit")

GRANULARITIES = ("document", "passage")
# Search encodes the query and runs the phrase search (and, for a query not encoded, the
# whole-document BM25) on a thread of its own while the chunk BM25 runs (OVERLAP_ENCODING =
# False: all on the caller's thread).
OVERLAP_ENCODING = True


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
        # This version's successors, once a switch swaps it out (`docsearch.following`).
        self._succession = Succession(self, self._next_version)

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
        thread, self._query_thread = self._query_thread, None
        if thread is not None:
            thread.shutdown(wait=True)
        self._succession.close()

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
        """The Retriever of the version that serves searches now (`Succession.serving`)."""
        return self._succession.serving()

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

        def answer(version: Retriever) -> SearchResult[Hit]:
            with version.store.tables.reading():  # its legs read one version of each table
                return version._search(
                    query, k, mode, where, path=path, paths=paths, granularity=granularity
                )

        # Opened once for both: the chunks table that says this version still serves is the
        # one the search reads (a Lance open cost a short query ~0.2 ms).
        with self.store.tables.reading():
            return self._succession.on_serving(answer)

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
        text = clean_query(query)
        k = whole_number(k)
        if granularity not in GRANULARITIES:
            raise UsageError(f"granularity must be one of {', '.join(GRANULARITIES)}")
        flt = ChunkFilter(path=path, paths=paths, where=where)
        asked = mode or self._own_default_mode()
        mode = self._usable_mode(asked)
        # A search without lexical legs keeps every word (nothing of it is searched by BM25 but
        # the passages of documents its pool missed, and those always took the whole query).
        common = (lambda: common_words(self.store)) if mode != "vector" else None
        parsed = ParsedQuery.parse(text, common)
        plan = SearchPlan.make(
            parsed,
            mode,
            k,
            documents=granularity == "document",
            fusion=self.fusion,
            documents_answer=self.store.has_documents and not flt.has_where,
        )
        found, plain_bm25, ready, vector = self._run_legs(parsed, plan, flt)
        scores = {leg: leg_scores(cands) for leg, cands in found.items()}
        chunks = Ranking(
            {leg: pair[0] for leg, pair in scores.items()},
            plan.chunk_rule,
            {leg: pair[1] for leg, pair in scores.items()},
        )
        by_id = {c.chunk_id: c for cands in found.values() for c in cands}
        if plan.rule is not None:
            if plan.rule.uses_documents and "lexical" in found:  # measured on plain BM25
                found = {**found, "lexical": plain_bm25}
            legs = Legs(found, chunks, by_id, ready)
            ranker = DocumentRanker(self.store)
            hits, ranked_by = ranker.documents(parsed, vector, plan.rule, legs, k, flt)
            return self._result(hits, asked, mode, rule_name(ranked_by, mode))
        hits = [
            Hit.of_passage(passage(by_id[key], parsed, chunks.fused[key]), chunks.scores(key, i))
            for i, key in enumerate(chunks.order[:k], start=1)
        ]
        return self._result(hits, asked, mode, rule_name(chunks.rule, mode))

    def _run_legs(
        self, query: ParsedQuery, plan: SearchPlan, flt: ChunkFilter
    ) -> tuple[dict[str, list[Candidate]], list[Candidate], dict[str, list[DocCandidate]], Any]:
        """The legs `plan` runs: the chunk legs' candidates (BM25 with the identifiers' chunks
        lifted), the chunk BM25 pool as it came, the document legs searched beside them, and
        the query vector (None unless encoded).

        The query thread does the work that can wait while this one runs the chunk BM25: the
        identifiers' phrase search (needed first), the query's encoding (torch and Lance both
        release the GIL; for a short query the encoder's forward is the slowest single step) and,
        for a query not encoded, whole-document BM25, so two cores serve the searches at once."""
        phrases = self._phrases_beside(query, plan.pool, flt) if plan.phrases else None
        encoding = None
        if plan.encode:
            encoder = self._own_encoder()
            encoding = self._beside(lambda: encoder.encode_queries([query.text])[0], plan.beside)

        def whole_bm25() -> list[DocCandidate]:
            return self.store.search_documents_text(query.words, plan.doc_depth, flt)

        # Beside an encoding whole-document BM25 runs on this thread after the chunk BM25, so
        # the query thread encodes alone (the encoding was the critical path: 1-thread torch);
        # without one it runs there, beside the chunk BM25.
        whole = None
        if plan.whole_bm25 and encoding is None:
            whole = self._beside(whole_bm25)
        found: dict[str, list[Candidate]] = {}
        bm25: list[Candidate] = []
        phrased: list[Candidate] = []
        if plan.bm25:
            bm25 = self.store.search_text(query.words, plan.pool, flt, text=plan.pool_text)
            phrased = phrases.result() if phrases else []
        ready: dict[str, list[DocCandidate]] = {}
        if plan.whole_bm25:
            ready["doc_lexical"] = whole.result() if whole is not None else whole_bm25()
        vector = encoding.result() if encoding is not None else None
        if vector is not None:
            found["dense"] = self.store.search_vector(
                vector, plan.pool, flt, text=not plan.documents
            )
        if plan.bm25:
            found["lexical"] = lift(query, bm25, phrased, plan.pool)
        return found, bm25, ready, vector

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
        return self._succession.on_serving(
            lambda version: similar(
                version, source, k, mode, terms=terms, explain=explain, rule=rule
            )
        )

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
        parsed = ParsedQuery.parse(query)
        phrases = version._phrases_beside(parsed, limit, where)
        found = version.store.search_text(query, limit, where)
        return lift(parsed, found, phrases.result(), limit)

    def _phrases_beside(
        self, query: ParsedQuery, limit: int, where: ChunkFilter | None
    ) -> Future[list[Candidate]]:
        """The chunks holding the query's identifiers verbatim, searched on the query thread.
        One full-text query for all of them: a 200-word query held up to 9 identifiers, and a
        phrase search each cost the lexical leg up to 9 extra searches."""
        idents = query.identifiers
        if not idents:
            return self._beside(list, overlap=False)
        return self._beside(lambda: self.store.search_phrases(idents, limit, where))


def open_index(collection: str | None = None, *, db: str | None = None) -> Retriever:
    """Shorthand for `Retriever(collection, db=db)`."""
    return Retriever(collection, db=db)
