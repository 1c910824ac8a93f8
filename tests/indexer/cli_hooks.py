"""The `docsearch` CLI with test hooks, run as `python -m tests.indexer.cli_hooks ARGS`.

Tests start it in a subprocess to reproduce what a real kill leaves on disk. Hooks (env vars):
- DOCSEARCH_TEST_KILL_AFTER_CREATE=SUFFIX: SIGKILL right after creating a table named `*SUFFIX`;
- DOCSEARCH_TEST_KILL_AFTER_DROP=SUFFIX: SIGKILL right after dropping a table named `*SUFFIX`;
- DOCSEARCH_TEST_KILL_BEFORE_MERGE=SUFFIX: SIGKILL as the first merge into a table named
  `*SUFFIX` starts (`__files`: a group's chunks and documents committed, its file records not);
- DOCSEARCH_TEST_CHECKPOINT_SECONDS=S: checkpoint embedded vectors every S seconds;
- DOCSEARCH_TEST_EMBED_LOG=FILE: append the text hash of every chunk the fake encoder finished
  embedding (one line each, written before the next batch starts, so it survives a SIGKILL).
The fake encoder's own hooks (tests/fakes.py: DOCSEARCH_FAKE_KILL_AFTER...) work as usual.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tests.helpers import run_cli


def _kill_after(method: Callable[..., Any], suffix: str) -> Callable[..., Any]:
    def wrapped(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        result = method(self, name, *args, **kwargs)
        if name.endswith(suffix):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    return wrapped


def _install_table_hooks() -> None:
    from lancedb.db import LanceDBConnection

    if suffix := os.environ.get("DOCSEARCH_TEST_KILL_AFTER_CREATE"):
        LanceDBConnection.create_table = _kill_after(LanceDBConnection.create_table, suffix)  # type: ignore[method-assign]
    if suffix := os.environ.get("DOCSEARCH_TEST_KILL_AFTER_DROP"):
        LanceDBConnection.drop_table = _kill_after(LanceDBConnection.drop_table, suffix)  # type: ignore[method-assign]
    if suffix := os.environ.get("DOCSEARCH_TEST_KILL_BEFORE_MERGE"):
        _kill_before_merge(suffix)


def _kill_before_merge(suffix: str) -> None:
    from lancedb.table import LanceTable

    merge = LanceTable.merge_insert

    def killing(table: LanceTable, *args: Any, **kwargs: Any) -> Any:
        if table.name.endswith(suffix):
            os.kill(os.getpid(), signal.SIGKILL)
        return merge(table, *args, **kwargs)

    LanceTable.merge_insert = killing  # type: ignore[method-assign]


def _install_embedding_hooks() -> None:
    from docsearch.indexer import pipeline
    from tests.fakes import HashingEncoder

    if seconds := os.environ.get("DOCSEARCH_TEST_CHECKPOINT_SECONDS"):
        pipeline.CHECKPOINT_SECONDS = float(seconds)
    if log_path := os.environ.get("DOCSEARCH_TEST_EMBED_LOG"):
        encode = HashingEncoder.encode_documents

        def logged(self: HashingEncoder, texts: Sequence[str]) -> np.ndarray:
            vectors = encode(self, texts)
            with open(log_path, "a") as log:
                log.writelines(pipeline.text_sha(t) + "\n" for t in texts)
            return vectors

        HashingEncoder.encode_documents = logged  # type: ignore[method-assign]


def run_hooked(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """This module's CLI in a fresh interpreter, as `tests.helpers.run_cli` runs the real one."""
    return run_cli(*args, env=env, timeout=timeout, module="tests.indexer.cli_hooks")


if __name__ == "__main__":
    _install_table_hooks()
    _install_embedding_hooks()
    from docsearch.app.cli import main

    main()
