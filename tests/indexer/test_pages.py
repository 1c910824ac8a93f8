"""Page starts recorded at index time, and a page's text rebuilt from the stored chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from docsearch.indexer.extract import Limits, extract
from docsearch.indexer.pages import (
    PageNotFound,
    decode_starts,
    encode_starts,
    page_starts,
    page_text,
)
from docsearch.store.reads import Store
from docsearch.store.writes import Writer
from tests.helpers import index_into


def test_page_starts_survive_their_encoding() -> None:
    for starts in ([], [0], [0, 1834, 2011, 2011, 90_000]):
        assert decode_starts(encode_starts(starts)) == starts


def test_a_spooled_document_has_the_same_page_starts_as_one_in_memory(tmp_path: Path) -> None:
    text = "\f".join(f"Page {n} " + "walnut orchard lease " * 3_000 for n in range(1, 40))
    (tmp_path / "long.txt").write_text(text)
    in_memory = extract(tmp_path / "long.txt", None, limits=Limits())
    spooled = extract(tmp_path / "long.txt", None, limits=Limits(), spool=str(tmp_path))
    assert spooled.spool and len(in_memory.pages) == 39
    assert (
        page_starts(spooled) == page_starts(in_memory) == [p.char_offset for p in in_memory.pages]
    )
    spooled.discard()


def test_every_page_is_rebuilt_from_small_overlapping_chunks(tmp_path: Path) -> None:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    pages = [f"Page {n}: " + " ".join(f"word{n}x{i}" for i in range(60)) for n in range(1, 8)]
    (root / "book.txt").write_text("\f".join(pages))
    index_into(db, root, options={"max_tokens": 16, "overlap": 4})
    store = Store.open(db, "c")
    row = store.rows("ordinal = 0", ["doc_id", "path"])[0]
    assert store.count_chunks() > 2 * len(pages)  # chunks cross page boundaries
    for number, expected in enumerate(pages, start=1):
        assert page_text(store, row["path"], row["doc_id"], number) == expected


def test_a_document_indexed_before_page_starts_were_kept_says_how_to_rebuild(
    tmp_path: Path,
) -> None:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "a.md").write_text("# A\n\nWalnut orchard lease.\n")
    index_into(db, root)
    Writer(Store.open(db, "c")).files_table.update(
        values={"page_starts": ""}
    )  # as an older version
    store = Store.open(db, "c")
    row = store.rows("ordinal = 0", ["doc_id", "path"])[0]
    with pytest.raises(PageNotFound, match="--switch"):
        page_text(store, row["path"], row["doc_id"], 1)


def test_a_file_of_several_documents_records_each_ones_page_starts():
    from docsearch.indexer.extract import Document, Page
    from docsearch.indexer.pages import encode_file_starts, starts_of

    attached = Document("a.eml", "", [Page(1, "lease", 0), Page(2, "annex", 7)], part="x.pdf")
    message = Document("a.eml", "", [Page(1, "hello", 0)], attachments=[attached])
    recorded = encode_file_starts(message)
    assert starts_of(recorded, "") == [0]
    assert starts_of(recorded, "x.pdf") == [0, 7]
    assert starts_of(recorded, "y.pdf") == []  # no such part: the API answers 404
    plain = encode_file_starts(Document("b.pdf", "", [Page(1, "a", 0), Page(2, "b", 3)]))
    assert starts_of(plain, "") == [0, 3] and starts_of(plain, "x.pdf") == []
