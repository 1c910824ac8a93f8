"""Extraction ahead of the encoder: `prefetched` runs a file's extraction on a thread, a few
files ahead of the one being chunked and embedded, so the encoder does not wait on parsers.

Not here: what extraction does (`extract.py`, `extract_process.py`), the stages that consume
the results (`pipeline.py`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from docsearch.indexer.extract import Document

_DONE = object()


class prefetched:  # noqa: N801 - used as a context manager, like a function
    """`work(item)` for each of `items` in a thread, at most `ahead` results ahead of the
    consumer; as a context manager, the results in order. An exception in `work` is raised
    where its result would have come. Leaving early stops the thread after its current item
    (the results it made are discarded: their spool files go)."""

    def __init__(self, work: Any, items: Sequence[Any], ahead: int) -> None:
        self._work, self._items = work, items
        self._results: queue.Queue[Any] = queue.Queue(maxsize=max(1, ahead))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docsearch-extract", daemon=True)

    def _run(self) -> None:
        for item in self._items:
            if self._stop.is_set():
                return
            try:
                result: Any = self._work(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                result = _Raised(exc)
            self._put(result)
        self._put(_DONE)

    def _put(self, result: Any) -> None:
        while not self._stop.is_set():
            try:
                self._results.put(result, timeout=0.1)
                return
            except queue.Full:
                continue
        _discard(result)

    def __enter__(self) -> Iterator[Any]:
        self._thread.start()
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        while (result := self._results.get()) is not _DONE:
            if isinstance(result, _Raised):
                raise result.exc
            yield result

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        while not self._results.empty():
            _discard(self._results.get_nowait())


@dataclass
class _Raised:
    exc: BaseException


def _discard(result: Any) -> None:
    doc = getattr(result, "doc", None)
    if isinstance(doc, Document):
        doc.discard()
