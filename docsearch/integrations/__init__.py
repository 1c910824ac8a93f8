"""Adapters that let LangChain and LlamaIndex pipelines use a docsearch collection as a retriever.

`docsearch.integrations.langchain` holds `DocsearchRetriever` (extra `docsearch[langchain]`),
`docsearch.integrations.llamaindex` holds `DocsearchLlamaRetriever` (extra `docsearch[llamaindex]`).
Each is imported on its own, so neither library is needed to use the other (nor by `import
docsearch`). This module holds what both share: the search they run and the metadata they
attach to a result. Not here: indexing, vector-store adapters, answer generation.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docsearch.retriever import Hit, Retriever


SEARCH_OPTIONS = ("k", "mode", "where", "path", "granularity")  # settable per call as well


class CollectionSearch:
    """The adapters' search: `Retriever.search` with their arguments, on a docsearch `Retriever`
    opened on first use and kept."""

    if TYPE_CHECKING:  # declared by each adapter (LangChain's as pydantic fields)
        collection: str | None
        db: str | None
        k: int
        mode: str | None
        where: str | None
        path: str | None
        granularity: str

    @cached_property
    def retriever(self) -> Retriever:
        """The underlying docsearch `Retriever`, opened on first use."""
        from docsearch.retriever import Retriever

        return Retriever(self.collection, db=self.db)

    def hits(self, query: str, **overrides: Any) -> list[Hit]:
        """The search with the adapter's options, `overrides` (validated by the adapter) replacing
        some of them for this call only."""
        options = {name: getattr(self, name) for name in SEARCH_OPTIONS} | overrides
        return self.retriever.search(
            query,
            options["k"],
            options["mode"],
            options["where"],
            path=options["path"],
            granularity=options["granularity"],
        )


def hit_metadata(hit: Hit, collection: str) -> dict[str, Any]:
    """Everything a `Hit` says about where its text comes from and how it scored, minus the text."""
    meta = {
        key: value
        for key, value in hit.as_dict().items()
        if key not in ("text", "snippet_marks", "snippet_span")
    }
    return meta | {"collection": collection}


def missing_extra(library: str, extra: str) -> ImportError:
    return ImportError(f"{library} is not installed: pip install 'docsearch[{extra}]'")
