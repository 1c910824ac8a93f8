"""Adapters that let LangChain and LlamaIndex pipelines use a docsearch collection as a retriever.

`docsearch.integrations.langchain` holds `DocsearchRetriever` (extra `docsearch[langchain]`),
`docsearch.integrations.llamaindex` holds `DocsearchLlamaRetriever` (extra `docsearch[llamaindex]`).
Each is imported on its own, so neither library is needed to use the other (nor by `import
docsearch`). This module only holds the metadata both attach to a result. Not here: indexing,
vector-store adapters, answer generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docsearch.retriever import Hit


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
