"""Query by document (`Retriever.similar`): the legs, their fusion and the explained hits.

The query document's key terms make one whole-document BM25 query (`doc_lexical`); its
doc-mean vector searches the doc-mean vectors (`doc_dense`); the best documents of either
(MATCH_POOL each) have their chunks matched with the query document's, chunk by chunk
(`chunk_dense`); `fusion.SIMILAR_RULES` fuses them. Each hit is explained by the key terms both
documents hold and by passage pairs (`passage_pairs`).
Not here: picking the key terms, reading the query document, matching chunks
(`docsearch.similar`); following the collection's versions (`docsearch.retriever`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from docsearch.errors import UsageError
from docsearch.fusion import SIMILAR_RULES, Fusion
from docsearch.hits import PassagePair, SimilarHit, passage
from docsearch.indexer.filters import sql_in
from docsearch.query import ParsedQuery, whole_number
from docsearch.ranking import Ranking
from docsearch.results import SearchResult, rule_name
from docsearch.search_plan import DOC_POOL
from docsearch.similar import (
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
from docsearch.store.schema import RESULT_COLUMNS, ChunkView, DocCandidate

if TYPE_CHECKING:
    from docsearch.indexer.extract import Document
    from docsearch.retriever import Retriever

# The documents each document leg ranks best whose chunks are matched with the query
# document's, chunk by chunk (the `chunk_dense` leg of fusion.SIMILAR_RULES).
MATCH_POOL = 100
Chunks = dict[str, tuple[list[ChunkView], np.ndarray | None]]  # doc_id -> chunks, vectors


def similar(
    version: Retriever,
    source: str | Path | Document | InCollection,
    k: int,
    mode: str | None,
    *,
    terms: int,
    explain: bool,
    rule: Fusion | None,
) -> SearchResult[SimilarHit]:
    """`Retriever.similar_result` on one version of the collection (`version`)."""
    store = version.store
    k = whole_number(k)
    asked = mode or version._own_default_mode()
    mode = version._usable_mode(asked)
    if not store.has_documents:
        raise UsageError(
            f"collection {version.collection!r} has no document table yet; run "
            "`docsearch index` on it once to add it"
        )
    encoder = None if mode == "lexical" else version._own_encoder()
    query = query_document(store, source, encoder)
    # A document from outside is embedded beside the lexical leg (torch and Lance both
    # release the GIL): for a long one the encoder's forward is the slowest step.
    embedding = None
    if encoder is not None and query.needs_vectors:
        embedding = version._beside(partial(query.embed, encoder), mode == "hybrid")
    stats = collection_stats(store)
    key = stats.key_terms(query.text, terms, min_df=1 if query.doc_id is None else 2)
    depth = max(DOC_POOL, k) + 1  # one more: the query document may be among them
    found: dict[str, list[DocCandidate]] = {}
    if mode != "vector" and key:
        found["doc_lexical"] = store.search_documents_text(lexical_query(key), depth, None)
    if embedding is not None:
        query = embedding.result()
    if query.vector is not None:
        found["doc_dense"] = store.search_documents_vector(query.vector, depth, None)
    found = {leg: [d for d in docs if d.doc_id != query.doc_id] for leg, docs in found.items()}
    legs = {leg: {d.doc_id: d.score for d in docs} for leg, docs in found.items()}
    shown = {leg: {d.doc_id: d.raw_score for d in docs} for leg, docs in found.items()}
    rule = rule or SIMILAR_RULES[mode]
    chunks: Chunks = {}
    if query.chunk_vectors is not None and rule.weights.get("chunk_dense"):
        pool = list(dict.fromkeys(d.doc_id for docs in found.values() for d in docs[:MATCH_POOL]))
        chunks = document_chunks(store, pool, with_vectors=True)
        legs["chunk_dense"] = shown["chunk_dense"] = {
            doc: ChunkMatch.of(query.chunk_vectors, vectors).score()
            for doc, (_, vectors) in chunks.items()
            if vectors is not None
        }
    ranking = Ranking(legs, rule, shown)
    top = ranking.order[:k]
    chunks.update(_chunks_to_show(version, top, chunks, explain, query.chunk_vectors is not None))
    hits = [
        _similar_hit(query, key, chunks[doc], ranking, doc, i, explain)
        for i, doc in enumerate(top, start=1)
    ]
    return version._result(hits, asked, mode, rule_name(rule, mode))


def _chunks_to_show(
    version: Retriever, top: Sequence[str], known: Chunks, explain: bool, vectors: bool
) -> Chunks:
    """The chunks (and vectors) of the results not read yet: all of them to explain a
    result, its opening chunk otherwise."""
    missing = [doc for doc in top if doc not in known]
    if explain:
        return document_chunks(version.store, missing, with_vectors=vectors)
    out: Chunks = {}
    where = f"{sql_in('doc_id', missing)} AND ordinal = 0"
    for row in version.store.rows(where, RESULT_COLUMNS) if missing else []:
        out[row["doc_id"]] = ([chunk_view(row)], None)
    return out


def _similar_hit(
    query: QueryDocument,
    key: list[tuple[str, float]],
    chunks: tuple[list[ChunkView], np.ndarray | None],
    ranking: Ranking,
    doc: str,
    rank: int,
    explain: bool,
) -> SimilarHit:
    """A result with its explanation: the shared key terms and the passage pairs."""
    views, vectors = chunks
    shared = shared_terms(key, views) if explain else {}
    pairs = passage_pairs(query, views, vectors, shared) if explain else []
    # Not explained: its opening passage.
    passages = tuple(p.match for p in pairs) if pairs else (passage(views[0], "", 0.0),)
    return SimilarHit.of_similar(
        passages,
        ranking.fused[doc],
        ranking.scores(doc, rank),
        terms=shared,
        pairs=tuple(pairs),
    )


def passage_pairs(
    query: QueryDocument,
    views: Sequence[ChunkView],
    vectors: np.ndarray | None,
    shared: dict[str, float],
) -> list[PassagePair]:
    """What explains a similar document: its chunks and the query document's of highest cosine
    similarity when both have vectors (up to MAX_PAIRS pairs), else the passage of each holding
    the most of the shared key terms. Snippets mark the shared terms."""
    marked = ParsedQuery.parse(" ".join(shared))
    if vectors is not None and query.chunk_vectors is not None and len(vectors):
        return [
            PassagePair(
                passage(query.embedded[mine], marked, cosine),
                passage(views[theirs], marked, cosine),
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
            passage(mine, marked, mine_score),
            passage(chunk, marked, score),
            score,
            "terms",
        )
    ]
