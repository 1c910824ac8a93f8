"""docsearch: search over long documents that reads the whole document.

Public API: `Retriever`, `Hit`, `open_index`, `__version__`. Imported lazily so that
`import docsearch` (and `docsearch --help`) stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"
__all__ = ["Hit", "Retriever", "__version__", "open_index"]

if TYPE_CHECKING:
    from docsearch.retriever import Hit, Retriever, open_index


def __getattr__(name: str) -> Any:
    if name in {"Retriever", "Hit", "open_index"}:
        from docsearch import retriever

        return getattr(retriever, name)
    raise AttributeError(f"module 'docsearch' has no attribute {name!r}")
