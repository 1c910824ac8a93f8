"""Common words: which words count as common, when they are counted, and that only a long
query's BM25 searches leave them out (the snippets still mark them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from docsearch import common_words as cw
from docsearch.fusion import LONG_QUERY_WORDS
from docsearch.retriever import Retriever
from docsearch.store.reads import Store
from docsearch.text import stem
from tests.helpers import index_into

RARE = ["quarterly", "audit", "ledger", "pension", "tariff", "harbour", "vaccine", "turbine"]


def _write(root: Path, files: int, start: int = 0) -> None:
    """Files of four paragraphs, each its own chunk: every paragraph holds a form of "report"
    (half "reports", half "reporting": one stem), one paragraph in four a rare word."""
    root.mkdir(exist_ok=True)
    for f in range(start, start + files):
        paragraphs = []
        for p in range(4):
            form = "reports" if p % 2 else "reporting"
            rare = f" {RARE[f % len(RARE)]}" if p == 0 else ""
            paragraphs.append(f"The {form} of unit {f} part {p} mention gravel {p}{rare}.")
        (root / f"f{f}.txt").write_text("\n\n".join(paragraphs) + "\n")


@pytest.fixture
def small_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cw, "MIN_CHUNKS", 8)
    monkeypatch.setattr(cw, "COMMON_SHARE", 0.5)


@pytest.fixture
def collection(tmp_path: Path) -> tuple[str, Path]:
    _write(tmp_path / "docs", 6)
    db = str(tmp_path / "db")
    report = index_into(db, tmp_path / "docs", "c", encoder="none", max_tokens=14)
    assert not report.failed
    assert Store.open(db, "c").count_chunks() == 24  # one chunk a paragraph
    return db, tmp_path / "docs"


def test_a_word_is_common_when_more_than_the_share_of_chunks_hold_its_stem(
    collection: tuple[str, Path], small_counts: None
) -> None:
    common = cw.common_words(Store.open(collection[0], "c"))
    assert stem("reports") in common  # every chunk, in two forms
    assert stem("gravel") in common
    assert stem("quarterly") not in common  # one chunk in 24
    assert stem("unit") in common and "0" not in common  # "0": 4 chunks of 24


def test_the_share_decides(
    collection: tuple[str, Path], small_counts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(collection[0], "c")
    monkeypatch.setattr(cw, "COMMON_SHARE", 0.99)
    assert stem("gravel") in cw.common_words(store)  # 24 of 24
    monkeypatch.setattr(cw, "COMMON_SHARE", 1.0)  # "more than all": nothing
    assert cw.common_words(store) == frozenset()
    monkeypatch.setattr(cw, "COMMON_SHARE", None)
    assert cw.common_words(store) == frozenset()


def test_a_small_collection_keeps_every_word(
    collection: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cw, "MIN_CHUNKS", 25)  # one more than the collection holds
    assert cw.common_words(Store.open(collection[0], "c")) == frozenset()


def test_counted_once_per_version_of_the_chunks(
    collection: tuple[str, Path], small_counts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, docs = collection
    reads: list[int] = []
    spread = Store.spread_texts

    def counted(self: Store, limit: int) -> list[str]:
        texts = spread(self, limit)
        reads.append(len(texts))
        return texts

    monkeypatch.setattr(Store, "spread_texts", counted)
    store = Store.open(db, "c")
    first = cw.common_words(store)
    assert cw.common_words(store) is first and reads == [24]
    # A new version: 18 files more of two chunks each that hold "report" and no "gravel".
    for f in range(6, 24):
        (docs / f"f{f}.txt").write_text("\n\n".join(["The reports say little."] * 4) + "\n")
    assert not index_into(db, docs, "c", encoder="none", max_tokens=14).failed
    again = cw.common_words(Store.open(db, "c"))
    assert reads == [24, 60]
    assert stem("report") in again and stem("gravel") not in again  # 24 of 60 hold it


def test_the_sample_is_spread_over_the_table(collection: tuple[str, Path]) -> None:
    store = Store.open(collection[0], "c")
    every = store.spread_texts(1000)
    some = store.spread_texts(6)
    assert len(every) == 24 and len(some) == 6
    assert some == every[::4]  # rows 0, 4, 8, ...: one a file here
    assert some == store.spread_texts(6)  # the same sample for the same version


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Reports on the gravel ledger", "  on the   ledger"),  # by stem, any case
        ("gravel-pit 7.2(a) ledger", " -pit 7.2(a) ledger"),  # the rest as written
        ('"gravel ledger" reports', '"gravel ledger" reports'),  # a phrase keeps its words
        ("gravel reports", "gravel reports"),  # nothing would be left
    ],
)
def test_without_common(query: str, expected: str) -> None:
    common = frozenset({stem("report"), stem("gravel")})
    assert cw.without_common(query, common) == expected
    assert cw.without_common(query, frozenset()) == query


def _searched(retriever: Retriever, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queries `retriever`'s store is asked for by BM25, in order."""
    asked: list[str] = []
    store = retriever.store
    for method in ("search_text", "search_documents_text"):
        real = getattr(store, method)

        def spy(query: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            asked.append(query)
            return _real(query, *args, **kwargs)

        monkeypatch.setattr(store, method, spy)
    return asked


def test_a_long_query_searches_bm25_without_the_common_words(
    collection: tuple[str, Path], small_counts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever = Retriever("c", db=collection[0])
    asked = _searched(retriever, monkeypatch)
    words = ["gravel", "reports", "quarterly"] + [f"x{i}" for i in range(LONG_QUERY_WORDS - 3)]
    query = " ".join(words)
    hits = retriever.search(query, k=3, mode="lexical")
    assert asked and all("gravel" not in q and "reports" not in q for q in asked)
    assert all("quarterly" in q and "x0" in q for q in asked)
    assert "quarterly" in Path(hits[0].path).read_text()  # f0: the one rare word it holds
    marked = {hits[0].snippet.text[a:b].lower() for a, b in hits[0].snippet.marks}
    assert {"gravel", "quarterly"} <= marked  # snippets read the query as written

    asked.clear()
    short = "gravel reports quarterly"
    retriever.search(short, k=3, mode="lexical")
    assert asked and set(asked) == {short}
    asked.clear()
    monkeypatch.setattr(cw, "COMMON_SHARE", None)
    retriever.search(query, k=3, mode="lexical")
    assert asked and set(asked) == {query}
