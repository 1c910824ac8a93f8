"""`DocsearchRetriever`: a docsearch collection as a LangChain retriever (`docsearch[langchain]`).

    from docsearch.integrations.langchain import DocsearchRetriever
    retriever = DocsearchRetriever(collection="contracts", k=4)
    docs = retriever.invoke("termination for cause")
    docs[0].page_content, docs[0].metadata["path"], docs[0].metadata["pages"]
    retriever.invoke("termination for cause", k=1, path="*.pdf")  # options for this call only

Each `Document` holds one passage (or, with `granularity="document"`, each document's best
passage) and the hit's provenance and scores as metadata (see `hit_metadata`). Search options
given to `invoke`/`ainvoke` (`k`, `mode`, `where`, `path`, `granularity`) replace the
constructor's for that call, validated as the constructor validates them. The docsearch
`Retriever` is opened on first use and kept. Not here: async search of its own (`ainvoke` runs
the sync search in LangChain's executor), indexing, answer generation.
"""

from __future__ import annotations

from typing import Any, Literal

from docsearch.errors import UsageError
from docsearch.integrations import SEARCH_OPTIONS, CollectionSearch, hit_metadata, missing_extra

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
except ImportError as exc:
    raise missing_extra("langchain-core", "langchain") from exc

# Invoke arguments LangChain reads itself but still hands on to the retriever with the options.
LANGCHAIN_OWN = frozenset({"verbose"})


class DocsearchRetriever(CollectionSearch, BaseRetriever):
    """Search one docsearch collection; the arguments are those of `Retriever.search`."""

    collection: str | None = None  # None: the database's only collection
    db: str | None = None  # None: the configured database (DOCSEARCH_DB)
    k: int = 5
    mode: Literal["hybrid", "vector", "lexical"] | None = None  # None: hybrid if it has vectors
    where: str | None = None  # SQL filter on chunk columns, e.g. "page_start >= 3"
    path: str | None = None  # glob on the file path, e.g. "*.pdf"
    granularity: Literal["passage", "document"] = "passage"

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        hits = self.hits(query, **self._call_options(options))
        collection = self.retriever.collection
        return [
            Document(page_content=hit.text, metadata=hit_metadata(hit, collection), id=hit.chunk_id)
            for hit in hits
        ]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        # BaseRetriever's own version drops the invoke options on the way to the executor.
        return await run_in_executor(
            None,
            self._get_relevant_documents,
            query,
            run_manager=run_manager.get_sync(),
            **options,
        )

    def _call_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """`options` checked by the constructor's own validator (on a throwaway copy, so this
        retriever keeps its settings): a bad value raises the constructor's ValidationError."""
        options = {name: value for name, value in options.items() if name not in LANGCHAIN_OWN}
        unknown = sorted(set(options) - set(SEARCH_OPTIONS))
        if unknown:
            raise UsageError(
                f"unknown search option {unknown[0]!r}; per call: {', '.join(SEARCH_OPTIONS)}"
            )
        probe = self.model_copy()
        for name, value in options.items():
            self.__pydantic_validator__.validate_assignment(probe, name, value)
        return {name: getattr(probe, name) for name in options}
