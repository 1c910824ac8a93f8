"""Paths pending in a table version: rows written by a commit whose file records are not yet.

`Writer.commit` (writes.py) lists the paths whose rows it replaces under PENDING_PATHS_KEY in the chunks and
docs tables' config (Lance keeps it in each version's manifest) before it changes their rows, and
clears them once their file records are written. A search reads the list from the very version it
searches and leaves those paths out; an empty list adds no filter, so a search costs what it did.
A run killed in between leaves the list behind: `docsearch doctor` reports it and the next run
redoes (or drops) those files. Not here: the commits themselves (`writes.py`).
"""

from __future__ import annotations

import json
from typing import Any

from docsearch.indexer.filters import sql_in

PENDING_PATHS_KEY = "docsearch.pending_paths"


def pending_paths(dataset: Any) -> frozenset[str]:
    """The paths a Lance table version holds rows of that are not committed in every table yet
    (read from its manifest, already open: no data is read)."""
    raw = dataset.config().get(PENDING_PATHS_KEY)
    return frozenset(json.loads(raw)) if raw else frozenset()


def hiding(sql: str | None, hidden: frozenset[str]) -> str | None:
    """`sql` narrowed to the rows whose path is not in `hidden` (unchanged when none is)."""
    if not hidden:
        return sql
    not_hidden = f"NOT ({sql_in('path', sorted(hidden))})"
    return not_hidden if sql is None else f"({sql}) AND {not_hidden}"
