"""`DocsearchRetriever`: a docsearch collection as a LangChain retriever (`docsearch[langchain]`).

    from docsearch.integrations.langchain import DocsearchRetriever
    docs = DocsearchRetriever(collection="contracts", k=4).invoke("termination for cause")
    docs[0].page_content, docs[0].metadata["path"], docs[0].metadata["pages"]

Each `Document` holds one passage (or, with `granularity="document"`, each document's best
passage) and the hit's provenance and scores as metadata (see `hit_metadata`). The docsearch
`Retriever` is opened on first use and kept. Not here: async search of its own (LangChain runs
the sync search in an executor), indexing, answer generation.
"""

from __future__ import annotations

from typing import Literal

from docsearch.integrations import CollectionSearch, hit_metadata, missing_extra

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:
    raise missing_extra("langchain-core", "langchain") from exc


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
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits, collection = self.hits(query), self.retriever.collection
        return [
            Document(page_content=hit.text, metadata=hit_metadata(hit, collection), id=hit.chunk_id)
            for hit in hits
        ]
