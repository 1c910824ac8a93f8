"""`SearchPlan`: which legs one search runs and which rules rank it, decided before any runs.

    rank documents   the document rule for the mode and the query's form (fusion.form_rule;
                     the Retriever's own hybrid rule if it has one); CHUNK_FUSION over best
                     chunks where no document leg can answer (no docs table, a `where` on
                     chunk columns)
    chunk BM25       every mode but vector; its pool read with text only where the passages
                     need it (passage search) or the identifier lift does
    phrases          the query's identifiers as one phrase search, to lift the chunks holding
                     them verbatim; not for a rule with document legs (it ranks by plain BM25,
                     and the chunk pool holds enough of them to order a document's passages)
    encode           the query vector, for a rule with a dense leg (a long or key-term hybrid
                     query is not encoded)
    whole-doc BM25   when the document rule weighs `doc_lexical`
    on the query thread  phrases, encoding (else whole-document BM25) run beside the chunk
                     BM25 (`beside`); a vector search has nothing to overlap with
Not here: running the legs (`docsearch.retriever`), fusing them (`docsearch.ranking`).
"""

from __future__ import annotations

from dataclasses import dataclass

from docsearch.fusion import CHUNK_FUSION, Fusion, form_rule
from docsearch.query import ParsedQuery

# The depths the document rules were chosen with (benchmarks/results/doclevel.md): chunks per
# chunk leg, documents per document leg; a deeper `k` asks for more.
CHUNK_POOL = 500
DOC_POOL = 500


@dataclass(frozen=True)
class SearchPlan:
    """What one search runs (see the module); `rule` None: passages, ranked by `chunk_rule`."""

    mode: str
    rule: Fusion | None  # ranks documents; None: a passage search
    chunk_rule: Fusion  # ranks chunks: the passages, and a document's passages
    pool: int  # chunks each chunk leg returns
    doc_depth: int  # documents each document leg returns
    bm25: bool  # the chunk BM25 leg
    phrases: bool  # the identifiers' phrase search, lifting the BM25 pool
    pool_text: bool  # the BM25 pool read with its text
    encode: bool  # the query vector, and the dense legs
    whole_bm25: bool  # whole-document BM25, searched beside the chunk BM25
    beside: bool  # run phrases, encoding and whole-document BM25 on the query thread

    @property
    def documents(self) -> bool:
        return self.rule is not None

    @classmethod
    def make(
        cls,
        query: ParsedQuery,
        mode: str,
        k: int,
        *,
        documents: bool,
        fusion: Fusion | None,
        documents_answer: bool,
    ) -> SearchPlan:
        """The plan for `query` in `mode` (a usable one) for the top `k`; `fusion`: the
        Retriever's own hybrid rule; `documents_answer`: whether the document legs can answer
        (a docs table, no `where` on chunk columns)."""
        rule = _document_rule(query, mode, fusion, documents_answer) if documents else None
        bm25 = mode != "vector"
        return cls(
            mode=mode,
            rule=rule,
            chunk_rule=fusion if fusion and not fusion.uses_documents else CHUNK_FUSION,
            pool=max(CHUNK_POOL, 5 * k) if documents else max(20, 2 * k),
            doc_depth=max(DOC_POOL, k),
            bm25=bm25,
            phrases=bm25 and bool(query.identifiers) and not (rule and rule.uses_documents),
            pool_text=not documents or bool(query.identifiers),
            encode=mode != "lexical" and (rule is None or rule.uses_dense),
            whole_bm25=bm25 and rule is not None and bool(rule.weights.get("doc_lexical")),
            beside=bm25,
        )


def _document_rule(
    query: ParsedQuery, mode: str, fusion: Fusion | None, documents_answer: bool
) -> Fusion:
    """The mode's document rule for `query` (hybrid: the Retriever's fusion if it has one);
    CHUNK_FUSION where the rule's document legs cannot answer."""
    rule = fusion if mode == "hybrid" and fusion else form_rule(mode, query.form)
    if rule.uses_documents and not documents_answer:
        return CHUNK_FUSION
    return rule
