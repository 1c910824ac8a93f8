"""A table held in memory for the searches that need no filter: exact cosine search over its
vectors, and its rows as Python values, for tables without a vector index.

Below `tables.VECTOR_INDEX_MIN_ROWS` rows a table has no ANN index, and Lance answers a nearest
query by reading and decoding the whole vector column each time: a short query's two dense legs
spent 17-30 ms there at 10k chunks and 1k-10k documents, where a matrix product over the same
vectors takes under a millisecond. `ExactVectors` is that matrix (unit rows) and the columns a
search returns, row by row: a leg's pool of 500 chunks is then built from held values (the BM25
leg reads only Lance's row ids and scores, `at_row_ids`), where reading its columns from Lance
and converting them took 2-3 ms a leg at 2k chunks; each row's Candidate fields are made once
(when a small table is read, else when a search first meets the row) and copied after
(`candidates`: 0.25 ms a pool, not 0.75). The store holds one per version of the
table, so a write makes the next search read it again.
Not here: reading the table, filters (a filtered search goes to Lance), ANN indexes (`reads.py`, `indexes.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from docsearch.store.schema import Candidate, candidate, candidate_fields, scored

ROW_ID = "_rowid"  # Lance's row address column, asked for with `with_row_id=True`
# Up to this many rows a held chunk table makes every row's Candidate fields when it is read
# (~2 us and ~1 KB a row: 20 ms and 10 MB at most), so a process's first searches find them
# made; a larger one makes a row's the first time a search meets it.
FIELDS_AT_ONCE_ROWS = 10_000


@dataclass(frozen=True)
class ExactVectors:
    """A table's vectors, as unit rows, and the values of the columns a search returns."""

    unit: np.ndarray  # (rows, dim) float32; a zero vector stays zero (similarity 0)
    names: tuple[str, ...]  # the returned columns
    values: list[tuple[Any, ...]]  # row i's values of `names` (repeated strings stored once)
    texts: dict[str, str] | None = None  # id -> text, where held (`of(..., texts=True)`)
    row_ids: dict[int, int] | None = None  # Lance row id -> row, where read with them
    # row -> its Candidate fields less the scores: every row's when a small table is read
    # (`make_fields`), else a row's the first time a search meets it (a dict a row is ~1 KB,
    # the values' tuple ~0.2 KB)
    fields: dict[int, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, table: Any, *, texts: bool = False) -> ExactVectors:
        """From an Arrow table holding a `vector` column and the returned columns (and Lance's
        `_rowid`, for `at_row_ids`); `texts`: its `id` and `text` columns are held as a dict
        (the passages shown read their text there, not in a second read of the table), not
        returned by `nearest`."""
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
        row_ids = None
        if ROW_ID in table.column_names:
            row_ids = {at: i for i, at in enumerate(table.column(ROW_ID).to_pylist())}
            table = table.drop_columns([ROW_ID])
        table = table.drop_columns(["vector"])
        columns = [_shared(table.column(name).to_pylist()) for name in table.column_names]
        values = list(zip(*columns, strict=True)) if columns else [()] * rows
        return cls(unit, tuple(table.column_names), values, held, row_ids)

    def nearest_rows(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(row, cosine similarity) of the `k` rows most similar to `vector`, best first (ties
        broken by row order)."""
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
        return list(zip(top.tolist(), similarity[top].tolist(), strict=True))

    def nearest(self, vector: np.ndarray, k: int) -> list[dict[str, Any]]:
        """The `k` rows most cosine-similar to `vector`, best first, each with its `_similarity`."""
        return [self.row(i) | {"_similarity": score} for i, score in self.nearest_rows(vector, k)]

    @cached_property
    def _make_fields(self) -> Callable[[tuple[Any, ...]], dict[str, Any]] | None:
        """`schema.candidate_fields` of the returned columns, worked out once."""
        return candidate_fields(self.names)

    def make_fields(self) -> None:
        """Every row's Candidate fields made now (`fields`), where the table is small enough
        (FIELDS_AT_ONCE_ROWS) and its columns are a Candidate's."""
        make = self._make_fields
        if make is not None and len(self.values) <= FIELDS_AT_ONCE_ROWS:
            self.fields.update((i, make(row)) for i, row in enumerate(self.values))

    def candidates(self, rows: Sequence[int], scores: Sequence[float]) -> list[Candidate]:
        """Candidates of these rows (their returned columns must be a Candidate's less its text),
        each with its score, in order."""
        make = self._make_fields
        if make is None:
            return [candidate(self.row(i), s) for i, s in zip(rows, scores, strict=True)]
        held = self.fields
        return scored(
            [held.get(i) or held.setdefault(i, make(self.values[i])) for i in rows], scores
        )

    def row(self, i: int) -> dict[str, Any]:
        """Row `i`'s returned columns, by name (a new dict: the caller may change it)."""
        return dict(zip(self.names, self.values[i], strict=True))

    def at_row_ids(self, row_ids: list[int]) -> list[int] | None:
        """The rows Lance reports by these row ids, or None if one is not held (read Lance)."""
        if self.row_ids is None:
            return None
        rows = list(map(self.row_ids.get, row_ids))
        return None if None in rows else rows  # type: ignore[return-value]


def _shared(values: list[Any]) -> list[Any]:
    """`values` with equal strings as one object: a document's path, title and id repeat on
    each of its chunks."""
    if not values or not isinstance(values[0], str):
        return values
    seen: dict[Any, Any] = {}
    return [seen.setdefault(v, v) if isinstance(v, str) else v for v in values]
