"""Following a collection's serving version: which Retriever reads it now.

A Retriever reads one version of its collection, and nothing changes under it once made, so a
search reads one version, with that version's encoder, from its start to its end. Once a switch
(`docsearch index --switch`) swaps in another version, or the collection is dropped and built
again, `Succession.serving` opens a Retriever on the serving version (once; that one is followed
in turn when it is swapped out) and reads go there; `on_serving` runs a read that a swap
interrupted once more, on the new version.
Not here: searching (`docsearch.retriever`), the versions themselves (`docsearch.store`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from docsearch.errors import DocsearchError

if TYPE_CHECKING:
    from docsearch.retriever import Retriever

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class Succession:
    """The Retrievers that read a collection's versions one after another, from `first` on;
    `open_next` opens one on the version serving now."""

    def __init__(self, first: Retriever, open_next: Callable[[], Retriever]) -> None:
        self._first = first
        self._open_next = open_next
        self._next: Retriever | None = None
        self._lock = threading.Lock()

    def serving(self) -> Retriever:
        """The Retriever of the version that serves searches now: the first until the
        collection switches to another version, then the one that follows it."""
        if self._next is None and self._first.store.is_current():
            return self._first
        with self._lock:
            if self._next is None:
                self._next = self._open_next()
        return self._next._serving()

    def on_serving(self, read: Callable[[Retriever], _T]) -> _T:
        """`read` on the serving version's Retriever; once more on the next one if a switch
        swapped versions while it read (the old version's tables are dropped then, so a read
        that was under way can fail). Bad input (a DocsearchError) is never retried."""
        current = self.serving()
        try:
            return read(current)
        except DocsearchError:
            raise
        except Exception:
            if current.store.is_current(fresh=True):  # not the version the read began on
                raise
            log.info("collection %r switched during a read; reading again", current.collection)
            return read(self.serving())

    def close(self) -> None:
        """Close the Retrievers that followed the first (the first closes itself)."""
        with self._lock:
            following = self._next
        if following is not None:
            following.close()
