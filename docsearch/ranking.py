"""Ranking what the legs found: chunks fused into passages, documents fused from their legs,
each document with its best passages.

`Ranking` fuses `{key: score}` legs by a rule and keeps each leg's rank and raw score for the
hit's breakdown. `DocumentRanker.documents` aggregates the chunk legs per document (the rule's
aggregators), adds the document legs (whole-document BM25, the doc-mean vector), fuses them,
lifts the instruments the query names (`instruments_first`) and gives each of the top documents
its best passages: its chunks in the chunk ranking's order, or, for a document no chunk leg's
pool reached, a search within it (`passages_of`). `lift` puts the chunks that hold the query's
identifiers verbatim above the rest of a BM25 pool.
Not here: which legs run (`docsearch.search_plan`), running them (`docsearch.retriever`), the
rules (`docsearch.fusion`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from docsearch.fusion import Fusion, aggregate, best_first, ranks
from docsearch.hits import Hit, Passage, passage
from docsearch.indexer.filters import ChunkFilter, sql_str
from docsearch.query import MAX_K, ParsedQuery
from docsearch.search_plan import DOC_POOL
from docsearch.store.reads import Store
from docsearch.store.schema import RESULT_COLUMNS, Candidate, DocCandidate, candidate

MAX_PASSAGES = 3  # passages shown per document
# A query that names a numbered instrument ("Amendment No. 3 to the License Agreement") lifts
# the documents among the fused ranking's first INSTRUMENT_DEPTH whose opening says they are
# that instrument above the rest there: their siblings share every other word
# (`docsearch.instruments`). LIFT_INSTRUMENTS = False: the fused order as it is.
INSTRUMENT_DEPTH = 20
LIFT_INSTRUMENTS = True


class Ranking:
    """Keys (chunk or document ids) fused by a rule, best first, with per-leg breakdowns."""

    def __init__(
        self, legs: dict[str, dict[str, float]], rule: Fusion, shown: dict[str, dict[str, float]]
    ) -> None:
        self.rule = rule.resolved(legs)  # the rule that ranked: `rule`, or one it handed over to
        self.fused, self.agreement = self.rule.fuse_as_is(legs)
        self.order = best_first(self.fused)
        self.shown = shown  # the scores a breakdown reports (raw: before any lift)
        self._legs = legs

    @cached_property
    def ranks(self) -> dict[str, dict[str, int]]:
        """Each leg's rank of each key it found: only breakdowns read them, and a document
        search reads only the document ranking's (not the two 500-chunk pools')."""
        return {leg: ranks(scores) for leg, scores in self._legs.items()}

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
class Legs:
    """What a document search's chunk legs found: each leg's candidates (the lexical leg's as
    plain BM25), their fused ranking, each candidate by chunk id; and the document legs already
    searched beside them."""

    found: dict[str, list[Candidate]]
    chunks: Ranking
    by_id: dict[str, Candidate]
    documents: dict[str, list[DocCandidate]]


def _per_doc(found: Sequence[Candidate], raw: bool) -> dict[str, list[float]]:
    """doc_id -> the scores (or raw scores) of its chunks among `found`."""
    out: dict[str, list[float]] = {}
    for one in found:
        out.setdefault(one.doc_id, []).append(one.raw_score if raw else one.score)
    return out


def _lifted(found: Sequence[Candidate]) -> bool:
    """Whether a leg's scores differ from its raw ones anywhere (`lift`); dense legs and plain
    BM25 never do, and then one set of numbers serves both."""
    return any(one.score != one.raw_score for one in found)


def leg_scores(found: Sequence[Candidate]) -> tuple[dict[str, float], dict[str, float]]:
    """A leg's {chunk_id: score} and {chunk_id: raw score} as a Ranking takes them: one dict
    twice where no score was lifted."""
    scores = {one.chunk_id: one.score for one in found}
    if not _lifted(found):
        return scores, scores
    return scores, {one.chunk_id: one.raw_score for one in found}


class DocumentRanker:
    """Documents of one version of a collection ranked from their legs (see the module)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def documents(
        self,
        query: ParsedQuery,
        vector: Any,
        rule: Fusion,
        searched: Legs,
        k: int,
        flt: ChunkFilter,
    ) -> tuple[list[Hit], Fusion]:
        """The top `k` documents by `rule`, each with its best passages (the chunk ranking's
        order), and the rule that ranked them: `rule`, or the one it handed these legs to
        (Fusion.resolved)."""
        by_id = searched.by_id
        legs, shown = {}, {}
        for leg, cands in searched.found.items():
            how = rule.aggregate.get(leg, "max")
            legs[leg] = aggregate(_per_doc(cands, raw=False), how)
            lifted = _lifted(cands)
            shown[leg] = aggregate(_per_doc(cands, raw=True), how) if lifted else legs[leg]
        doc_paths = {c.doc_id: c.path for c in by_id.values()}
        depth = max(DOC_POOL, k)
        ready = searched.documents
        for leg, docs in self.document_legs(query.words, vector, rule, depth, flt, ready).items():
            legs[leg] = {d.doc_id: d.score for d in docs}
            shown[leg] = {d.doc_id: d.raw_score for d in docs}
            doc_paths.update((d.doc_id, d.path) for d in docs)
        ranking = Ranking(legs, rule, shown)
        order, named = self.instruments_first(ranking.order, query, doc_paths)
        top = order[:k]
        passages = self._passages(query, vector, top, searched, doc_paths)
        hits: list[Hit] = []
        for doc in top:
            if not passages[doc]:  # deleted since the legs read it: no chunk of it is left
                continue
            scores = ranking.scores(doc, len(hits) + 1)
            if doc in named:
                scores["instrument"] = {"rank": named[doc][0], "score": float(named[doc][1])}
            hits.append(Hit.of_document(passages[doc], ranking.fused[doc], scores))
        return hits, ranking.rule

    def _passages(
        self,
        query: ParsedQuery,
        vector: Any,
        top: list[str],
        searched: Legs,
        doc_paths: dict[str, str],
    ) -> dict[str, list[Passage]]:
        """doc_id -> the best passages of each document of `top`: its chunks in the chunk
        ranking's order, read with their text; searched for where no chunk leg reached it."""
        chunks, by_id = searched.chunks, searched.by_id
        best: dict[str, list[str]] = {}  # doc_id -> its chunks, best first
        for key in chunks.order:
            best.setdefault(by_id[key].doc_id, []).append(key)
        wanted = [by_id[key] for doc in top for key in best.get(doc, [])[:MAX_PASSAGES]]
        read = {one.chunk_id: one for one in self.store.with_text(wanted)}
        # A document indexed again since the legs read it has lost those chunks: it is then
        # searched again, as the documents the pool missed are.
        shown = {
            doc: [read[key] for key in best.get(doc, [])[:MAX_PASSAGES] if key in read]
            for doc in top
        }
        unreached = self.passages_of({d: doc_paths[d] for d in top if not shown[d]}, query, vector)
        return {
            doc: [passage(one, query, chunks.fused[one.chunk_id]) for one in shown[doc]]
            or unreached.get(doc, [])
            for doc in top
        }

    def instruments_first(
        self, order: list[str], query: ParsedQuery, doc_paths: dict[str, str]
    ) -> tuple[list[str], dict[str, tuple[int, int]]]:
        """`order` with the documents among its first INSTRUMENT_DEPTH that are instruments the
        query names (by their first chunk's opening) moved ahead, those naming the most first,
        else in fused order; and doc_id -> (rank among them, how many it is) for each."""
        from docsearch import instruments

        wanted = query.instruments if LIFT_INSTRUMENTS else frozenset()
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

    def document_legs(
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

    def passages_of(
        self, docs: dict[str, str], query: ParsedQuery, vector: Any
    ) -> dict[str, list[Passage]]:
        """doc_id -> the best passages of each document (`docs`: doc_id -> its path) no chunk
        leg's pool reached: by BM25 of the query's words within them (one search for all), else
        by the query vector, else its opening chunk (its match was on words chunks do not
        index, such as stop words). A file may hold several documents (an e-mail's
        attachments)."""
        if not docs:
            return {}
        found: dict[str, list[Candidate]] = {doc: [] for doc in docs}
        # Deep enough that each document almost always gets its passages from this one search
        # (a search per document cost 4 ms each at 100k chunks); were it filled, one that got
        # none is searched alone.
        depth = min(MAX_K, 20 * MAX_PASSAGES * len(docs))
        paths = sorted(set(docs.values()))
        words = query.words
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
            doc: [passage(one, query, one.score) for one in cands] for doc, cands in found.items()
        }


def lift(
    query: ParsedQuery, found: list[Candidate], phrased: list[Candidate], limit: int
) -> list[Candidate]:
    """`found` and `phrased` with the chunks that hold the query's identifiers verbatim lifted
    above all others, by how many of them they hold."""
    idents = query.identifiers
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
    top = max((one.score for one in by_id.values()), default=0.0) + 1.0
    lifted = [
        replace(c, score=c.score + top * matched[c.chunk_id]) if c.chunk_id in matched else c
        for c in by_id.values()
    ]
    return sorted(lifted, key=lambda one: -one.score)[:limit]
