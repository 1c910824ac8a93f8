"""`SearchResult`: a search's hits with how it was answered (the mode that answered, the rule).

`Retriever.search_result` and `Retriever.similar_result` return one; `search` and `similar`
return its hits alone, as they always did. `mode` is the mode that ANSWERED: a hybrid search
on a collection without vectors, or whose encoder cannot be loaded, answers lexically, and says
so (`fallback` says why). A hybrid search whose query the document rules rank by the lexical
legs alone (a long query, a list of key terms: `fusion.document_rule`) still reports "hybrid",
since hybrid chose that rule for it; `rule` names the rule that ranked:

    hybrid / lexical / vector  the mode's own rule (fusion.DOCUMENT_RULES; query by document:
                               fusion.SIMILAR_RULES); in hybrid, bare words' too
                               (fusion.BARE_WORDS_RULE: the same legs and weights)
    long-query                 a hybrid query of fusion.LONG_QUERY_WORDS or more: the lexical rule
    key-terms                  a short hybrid query of key terms: fusion.TERM_LIST_RULE; also
                               bare words whose dense side was unsure of its answer, which
                               BARE_WORDS_RULE hands to it (fusion.UnsureDense)
    whole-document             bare words spread through their best document, the dense side
                               less sure than BM25: whole-document BM25 alone
                               (fusion.SpreadWords, WHOLE_DOCUMENT_RULE)
    chunk                      documents as their best chunk in each leg (no document leg could
                               answer), or passages (granularity "passage"): fusion.CHUNK_FUSION
    custom                     a rule the Retriever was given (`fusion=` or the settings')

Not here: the hits themselves (`docsearch.hits.Hit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from docsearch.fusion import (
    BARE_WORDS_RULE,
    CHUNK_FUSION,
    DOCUMENT_RULES,
    SIMILAR_RULES,
    TERM_LIST_RULE,
    WHOLE_DOCUMENT_RULE,
    Fusion,
)

if TYPE_CHECKING:
    from docsearch.hits import Hit

H = TypeVar("H", bound="Hit")

NO_VECTORS = "no vectors"  # the collection was built lexical only
ENCODER_UNAVAILABLE = "encoder unavailable"  # its encoder could not be loaded here


@dataclass(frozen=True)
class SearchResult(Generic[H]):
    """The hits of one search, best first, and how they were found."""

    hits: list[H]
    mode: str  # the mode that answered
    asked: str  # the mode asked for (the collection's default where none was)
    rule: str  # the fusion rule that ranked (see the module's table)
    fallback: str | None = None  # why `mode` is not `asked`: NO_VECTORS, ENCODER_UNAVAILABLE


def rule_name(rule: Fusion, mode: str) -> str:
    """The name (module table) of `rule`, a rule `mode` ranked by."""
    if rule is CHUNK_FUSION:
        return "chunk"
    if rule is TERM_LIST_RULE:
        return "key-terms"
    if rule is WHOLE_DOCUMENT_RULE:
        return "whole-document"
    if mode == "hybrid" and rule is DOCUMENT_RULES["lexical"]:
        return "long-query"
    if rule is BARE_WORDS_RULE:
        return "hybrid"
    if rule is DOCUMENT_RULES.get(mode) or rule is SIMILAR_RULES.get(mode):
        return mode
    return "custom"
