"""Helpers that compare two collections built by different engines, and edit a corpus."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from docsearch.retriever import Retriever
from docsearch.store.reads import Store
from tests.helpers import documents, make_pdf

QUERIES = [
    "termination for cause",
    "confidential information survives",
    "blood pressure measurement",
    "infusion pump occlusion alarm",
    "7.2(a)",
    "llamas",
]


def chunks(db: str, name: str = "c") -> dict[str, dict[str, Any]]:
    store = Store.open(db, name)
    return {row["id"]: row for row in store.rows("ordinal >= 0")}


def files(db: str, name: str = "c") -> dict[str, dict[str, Any]]:
    records = Store.open(db, name).file_records()
    return {path: {**r.__dict__, "indexed_at": 0.0} for path, r in records.items()}


def assert_same_chunks(db_a: str, db_b: str, atol: float = 1e-6) -> int:
    """Same chunk ids, same columns, vectors within `atol`; returns the number of chunks."""
    a, b = chunks(db_a), chunks(db_b)
    assert sorted(a) == sorted(b)
    for chunk_id, row in a.items():
        other = dict(b[chunk_id])
        if "vector" in row:
            mine, theirs = np.asarray(row["vector"]), np.asarray(other.pop("vector"))
            assert np.allclose(mine, theirs, atol=atol), chunk_id
        assert {k: v for k, v in row.items() if k != "vector"} == other
    return len(a)


def assert_same_documents(db_a: str, db_b: str, atol: float = 1e-6) -> int:
    """Same document rows (each the one its own chunks make; vectors within `atol`) and the
    same whole-document BM25 rankings; returns the number of documents."""
    a, b = documents(db_a), documents(db_b)
    assert sorted(a) == sorted(b)
    for path, row in a.items():
        other = dict(b[path])
        if "vector" in row:
            assert np.allclose(row["vector"], other.pop("vector"), atol=atol), path
        assert {k: v for k, v in row.items() if k != "vector"} == other
    stores = Store.open(db_a, "c"), Store.open(db_b, "c")
    for query in QUERIES:
        found = [
            [(d.doc_id, d.score) for d in s.search_documents_text(query, 8, None)] for s in stores
        ]
        assert_same_ranking(*found)
    return len(a)


# Two engines may compute one float32 cosine with different kernels (a flat scan, an IVF index):
# the same score to about 1e-6, so two chunks whose scores tie may come back in either order.
SCORE_TOLERANCE = 1e-5


def search_results(db: str, modes: tuple[str, ...]) -> dict[tuple[str, str], list[tuple]]:
    retriever = Retriever("c", db=db)
    out = {}
    for mode in modes:
        for query in QUERIES:
            hits = retriever.search(query, k=8, mode=mode, granularity="passage")
            out[(mode, query)] = [(h.chunk_id, h.score) for h in hits]
    return out


def assert_same_ranking(
    a: list[tuple[str, float]], b: list[tuple[str, float]], tol: float = SCORE_TOLERANCE
) -> None:
    """The same hits with the same scores (within `tol`), in the same order but for hits whose
    scores tie within `tol`; at the cut-off such a tie may keep a different one of them."""
    assert len(a) == len(b)
    assert all(abs(sa - sb) <= tol for (_, sa), (_, sb) in zip(a, b, strict=True))
    score_a, score_b = dict(a), dict(b)
    cut = min(score_a.values(), default=0.0)
    for chunk_id in score_a.keys() | score_b.keys():
        if chunk_id in score_a and chunk_id in score_b:
            assert abs(score_a[chunk_id] - score_b[chunk_id]) <= tol, chunk_id
        else:  # in one list only: it must tie with the last hit kept
            assert abs(score_a.get(chunk_id, score_b.get(chunk_id, cut)) - cut) <= tol, chunk_id


def assert_same_search(
    db_a: str,
    db_b: str,
    modes: tuple[str, ...] = ("lexical", "vector", "hybrid"),
    score_atol: float = 2e-4,
) -> None:
    """Same hits in the same order (hits tied within `score_atol` may swap), scores within it.

    Vectors embedded in other batches differ by float32 rounding (up to 1e-5 per component
    for a real model), which moves a cosine score by at most sqrt(384) x 1e-5 = 2e-4 for
    MiniLM; rounded scores compared for equality would flip whenever one sits on an edge.
    """
    a, b = search_results(db_a, modes), search_results(db_b, modes)
    assert a.keys() == b.keys()
    for key in a:
        try:
            assert_same_ranking(a[key], b[key], score_atol)
        except AssertionError as exc:
            raise AssertionError(f"{key}: {a[key]} != {b[key]} ({exc})") from None
    assert any(a.values())  # the queries found something


def same_counts(report_a: Any, report_b: Any) -> bool:
    """Two IndexReports agree on everything but timing."""
    keys = [k for k in report_a.__dict__ if k != "seconds"]
    return all(getattr(report_a, k) == getattr(report_b, k) for k in keys)


def edit_corpus(root: Path) -> None:
    """One of each: changed, renamed, deleted, new, touched (same bytes), and a failing file."""
    nda = root / "contracts" / "mutual-nda-initech.md"
    nda.write_text(nda.read_text() + "\n\n## 12. Llamas\n\nNo llamas may be disclosed.\n")
    (root / "manuals" / "x200-infusion-pump-service-manual.txt").rename(
        root / "manuals" / "pump.txt"
    )
    (root / "clinical" / "hypertension-guideline.html").unlink()
    make_pdf(root / "new.pdf", ["Llamas graze on page one.", "Page two: alpacas."])
    (root / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage")
    later = time.time() + 60
    os.utime(root / "contracts" / "acme-globex-msa.pdf", (later, later))
