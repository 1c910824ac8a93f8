"""Progress on stderr for long runs: a rich bar on a terminal, a log line every few seconds otherwise.

Implements the indexer's `ProgressSink` (files, chunks, tokens/s, ETA).
"""

from __future__ import annotations

import sys
import time
from typing import Any


class ConsoleProgress:
    """Files done / to do, chunks embedded, tokens per second, ETA."""

    def __init__(self, label: str = "indexing", interval: float = 5.0) -> None:
        self.label, self.interval = label, interval
        self.files_total = self.files_done = 0
        self.chunks_done = self.tokens = 0
        self.started = time.perf_counter()
        self._last = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> ConsoleProgress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} files"),
                TextColumn("{task.fields[detail]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=None, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    # ProgressSink
    def start(self, files: int) -> None:
        self.files_total = files
        self._update(force=True)

    def file_done(self, path: str) -> None:
        self.files_done += 1
        self._update()

    def planned_chunks(self, chunks: int) -> None: ...

    def embedded(self, chunks: int, tokens: int) -> None:
        self.chunks_done += chunks
        self.tokens += tokens
        self._update()

    def _detail(self) -> str:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        rate = self.tokens / elapsed
        return f"{self.chunks_done} chunks embedded, {rate:,.0f} tokens/s"

    def _update(self, force: bool = False) -> None:
        if self._bar is not None:
            self._bar.update(
                self._task, total=self.files_total, completed=self.files_done, detail=self._detail()
            )
            return
        now = time.perf_counter()
        if force or now - self._last >= self.interval:
            self._last = now
            print(
                f"{self.label}: {self.files_done}/{self.files_total} files, {self._detail()}",
                file=sys.stderr,
                flush=True,
            )
