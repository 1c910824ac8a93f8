"""`DocsearchLlamaRetriever`: a collection as a LlamaIndex retriever (`docsearch[llamaindex]`).

    from docsearch.integrations.llamaindex import DocsearchLlamaRetriever
    nodes = DocsearchLlamaRetriever("contracts", k=4).retrieve("termination for cause")
    nodes[0].score, nodes[0].node.text, nodes[0].node.metadata["pages"]

Each `NodeWithScore` holds a `TextNode` with one passage (id = chunk id, source = document id,
character offsets in the document) and the score that ordered the results; provenance and
per-leg scores are metadata (see `hit_metadata`). Only path, title, pages and heading reach an
LLM prompt or an embedding, so scores and snippets do not bloat the context. As LlamaIndex's own
retrievers do, it takes `similarity_top_k` (the same setting as `k`, in the constructor or set
between calls); `retrieve` takes no per-call options in LlamaIndex. The docsearch `Retriever` is
opened on first use and kept. Not here: async search of its own (`aretrieve` runs the search in
a worker thread), indexing, query engines.
"""

from __future__ import annotations

import asyncio
from typing import Any

from docsearch.errors import UsageError
from docsearch.integrations import CollectionSearch, hit_metadata, missing_extra
from docsearch.retriever import Hit

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as exc:
    raise missing_extra("llama-index-core", "llamaindex") from exc

PROMPT_KEYS = ("path", "title", "pages", "heading_path")  # the metadata an LLM gets to see


def _node(hit: Hit, collection: str) -> NodeWithScore:
    metadata = hit_metadata(hit, collection)
    hidden = [key for key in metadata if key not in PROMPT_KEYS]
    node = TextNode(
        id_=hit.chunk_id,
        text=hit.text,
        metadata=metadata,
        start_char_idx=hit.char_start,
        end_char_idx=hit.char_end,
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=hidden,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.doc_id)},
    )
    return NodeWithScore(node=node, score=hit.score)


class DocsearchLlamaRetriever(CollectionSearch, BaseRetriever):
    """Search one docsearch collection; the arguments are those of `Retriever.search`."""

    def __init__(
        self,
        collection: str | None = None,
        *,
        db: str | None = None,
        k: int | None = None,  # None: similarity_top_k, else 5
        mode: str | None = None,
        where: str | None = None,
        path: str | None = None,
        granularity: str = "passage",
        similarity_top_k: int | None = None,  # LlamaIndex's name for k
        **kwargs: Any,  # callback_manager, verbose... for LlamaIndex's BaseRetriever
    ) -> None:
        super().__init__(**kwargs)
        if k is not None and similarity_top_k is not None:
            raise UsageError("give k or similarity_top_k (the same setting), not both")
        self.collection, self.db = collection, db
        self.k = k if k is not None else similarity_top_k if similarity_top_k is not None else 5
        self.mode, self.where, self.path = mode, where, path
        self.granularity = granularity

    @property
    def similarity_top_k(self) -> int:
        """`k` under the name LlamaIndex's vector retrievers give it (settable between calls)."""
        return self.k

    @similarity_top_k.setter
    def similarity_top_k(self, value: int) -> None:
        self.k = value

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.hits(query_bundle.query_str)
        return [_node(hit, self.retriever.collection) for hit in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # LlamaIndex's default runs `_retrieve` on the event loop, stalling it for the search.
        return await asyncio.to_thread(self._retrieve, query_bundle)
