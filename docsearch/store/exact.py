"""Exact cosine search over a table's vectors held in memory, for tables without a vector index.

Below `tables.VECTOR_INDEX_MIN_ROWS` rows a table has no ANN index, and Lance answers a nearest
query by reading and decoding the whole vector column each time: a short query's two dense legs
spent 17-30 ms there at 10k chunks and 1k-10k documents, where a matrix product over the same
vectors takes under a millisecond. `ExactVectors` is that matrix (unit rows), with the columns a
search returns; the store reads one per version of the table, so a write makes the next search
read it again.
Not here: reading the table, filters (a filtered search goes to Lance), ANN indexes (`reads.py`, `indexes.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ExactVectors:
    """A table's vectors, as unit rows, and the columns a search returns."""

    unit: np.ndarray  # (rows, dim) float32; a zero vector stays zero (similarity 0)
    columns: Any  # a pyarrow Table, row i describing unit[i]
    texts: dict[str, str] | None = None  # id -> text, where held (`of(..., texts=True)`)

    @classmethod
    def of(cls, table: Any, *, texts: bool = False) -> ExactVectors:
        """From an Arrow table holding a `vector` column and the returned columns; `texts`:
        its `id` and `text` columns are held as a dict (the passages shown read their text
        there, not in a second read of the table), not returned by `nearest`."""
        rows = table.num_rows
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vectors = np.asarray(flat, dtype=np.float32).reshape(rows, -1) if rows else np.zeros((0, 0))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit = (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)
        held = None
        if texts:
            ids, text = table.column("id").to_pylist(), table.column("text").to_pylist()
            held = dict(zip(ids, text, strict=True))
            table = table.drop_columns(["text"])
        return cls(unit, table.drop_columns(["vector"]), held)

    def nearest(self, vector: np.ndarray, k: int) -> list[dict[str, Any]]:
        """The `k` rows most cosine-similar to `vector`, best first, each with its `_similarity`
        (ties broken by row order)."""
        if not len(self.unit) or k <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        # einsum, not `@`: a matrix-vector product through OpenBLAS wakes its thread pool,
        # which on a busy machine took 17 ms for 2k rows where einsum's one loop takes 0.5 ms.
        similarity = np.einsum("ij,j->i", self.unit, query / norm if norm else query)
        k = min(k, len(similarity))
        top = np.argpartition(-similarity, k - 1)[:k]
        top = top[np.lexsort((top, -similarity[top]))]
        rows = self.columns.take(top).to_pylist()
        for row, score in zip(rows, similarity[top].tolist(), strict=True):
            row["_similarity"] = score
        return rows
