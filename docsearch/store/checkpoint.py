"""The vector checkpoint: vectors embedded by a run but not yet committed with their chunks.

Embedding a large file takes minutes, but its chunks are committed in one step. Vectors embedded
meanwhile are appended to `<prefix>__pending_vectors` (text_sha, vector) every few seconds, so a
run killed before the commit resumes from them (`Store.vectors_for` reads them). The table is a
cache: rows whose chunks are committed are deleted, the table is dropped at the end of a run,
and a collection created anew drops any leftover (it may hold another encoder's vectors).
Not here: when a run saves (`indexer/pipeline.VectorCheckpoint`), the commits (`writes.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from docsearch.indexer.filters import sql_in
from docsearch.store.tables import INCOMPLETE, PENDING_TABLE, READY

if TYPE_CHECKING:
    from docsearch.store.reads import Store


class PendingVectors:
    """The checkpoint table of one version of a collection (written holding the writer lock)."""

    def __init__(self, store: Store) -> None:
        self.database, self.prefix = store.database, store.prefix
        self.table = f"{store.prefix}__{PENDING_TABLE}"

    def exists(self) -> bool:
        return self.database.table_state(self.table) == READY

    def save(self, text_shas: Sequence[str], vectors: np.ndarray) -> None:
        """Append embedded vectors (n, dim) to the checkpoint table, creating it if needed."""
        import pyarrow as pa

        dim = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        data = pa.table(
            {
                "text_sha": pa.array(list(text_shas), pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            }
        )
        db, state = self.database.connection, self.database.table_state(self.table)
        if state == READY:
            db.open_table(self.table).add(data)
            return
        if state == INCOMPLETE:  # a kill while creating it: nothing in it
            db.drop_table(self.table)
        db.create_table(self.table, data=data)

    def clear(self, text_shas: Iterable[str]) -> None:
        """Forget checkpointed vectors whose chunks are committed now."""
        shas = sorted(set(text_shas))
        if not shas or not self.exists():
            return
        table = self.database.connection.open_table(self.table)
        for start in range(0, len(shas), 500):
            table.delete(sql_in("text_sha", shas[start : start + 500]))

    def drop(self) -> None:
        self.database.drop_tables(self.prefix, [PENDING_TABLE])


def read_pending_vectors(store: Store, wanted: set[str]) -> dict[str, np.ndarray]:
    """The checkpointed vectors of the `wanted` text hashes (none without a checkpoint)."""
    pending = PendingVectors(store)
    if not pending.exists():
        return {}
    dataset = store.database.dataset(pending.table)
    present = sorted(
        wanted.intersection(dataset.to_table(columns=["text_sha"])["text_sha"].to_pylist())
    )
    found: dict[str, np.ndarray] = {}
    for start in range(0, len(present), 500):
        where = sql_in("text_sha", present[start : start + 500])
        for row in dataset.to_table(filter=where, columns=["text_sha", "vector"]).to_pylist():
            found[row["text_sha"]] = np.asarray(row["vector"], dtype=np.float32)
    return found
