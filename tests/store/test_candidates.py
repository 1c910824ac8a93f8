"""`candidate`: a search row becomes a Candidate the same way whether every column came back (the
fast path, fields set at once) or not (through the dataclass's __init__, defaults filled)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from docsearch.store.schema import RESULT_COLUMNS, Candidate, candidate


def _row() -> dict[str, Any]:
    values: dict[str, Any] = {name: f"v-{name}" for name in RESULT_COLUMNS}
    values.update(page_start=2, page_end=3, char_start=10, char_end=90, ordinal=4, ocr=True)
    return values


def test_a_full_row_makes_the_candidate_the_init_makes() -> None:
    made = candidate(_row(), 0.25)
    row = _row()
    row["chunk_id"] = row.pop("id")
    assert made == Candidate(**row, score=0.25, raw_score=0.25)
    assert type(made) is Candidate
    for field in fields(Candidate):  # every field set, none left to a default
        assert field.name in made.__dict__
    with pytest.raises(AttributeError):  # still frozen
        made.score = 1.0  # type: ignore[misc]


def test_a_row_without_the_later_columns_gets_their_defaults() -> None:
    row = _row()
    for later in ("ocr", "part", "page_breaks", "text"):
        del row[later]
    made = candidate(row, 1)
    assert (made.ocr, made.part, made.page_breaks, made.text) == (False, "", "", "")
    assert made.score == made.raw_score == 1.0 and isinstance(made.score, float)


def test_an_unknown_column_is_refused_as_before() -> None:
    row = _row() | {"surprise": 1}
    with pytest.raises(TypeError):
        candidate(row, 0.5)


def test_a_candidate_hashes_and_compares_by_its_fields() -> None:
    assert candidate(_row(), 0.5) == candidate(_row(), 0.5)
    assert hash(candidate(_row(), 0.5)) == hash(candidate(_row(), 0.5))
    assert candidate(_row(), 0.5) != candidate(_row(), 0.6)
