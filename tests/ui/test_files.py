"""The file guard: only indexed documents, spelled as recorded, unchanged, inside their folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from docsearch.app.web.files import (
    DocumentGuard,
    FileRefusedError,
    check_spelling,
    file_headers,
    list_folders,
    passage_span,
    resolve_folder,
    text_preview_html,
)
from docsearch.store.reads import Store
from tests.ui.corpus import SECRET, Corpus


@pytest.fixture(scope="module")
def guard(corpus: Corpus) -> DocumentGuard:
    return DocumentGuard(Store.open(corpus.db, corpus.collection), [corpus.root])


def test_an_indexed_document_is_served_byte_for_byte(corpus: Corpus, guard: DocumentGuard) -> None:
    verified = guard.open(corpus.doc("policy.pdf"))
    assert verified.data == (corpus.docs / "policy.pdf").read_bytes()
    assert verified.suffix == ".pdf"


@pytest.mark.parametrize(
    "requested",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "notes.md",  # relative: not as recorded
        "",
        "\x00/etc/passwd",
        "/x' OR path LIKE '%",  # quoted into SQL, never interpreted
        None,
    ],
)
def test_paths_outside_the_index_are_refused(guard: DocumentGuard, requested: object) -> None:
    with pytest.raises(FileRefusedError):
        guard.open(requested)


def test_traversal_through_an_indexed_folder_is_refused(
    corpus: Corpus, guard: DocumentGuard
) -> None:
    sneaky = f"{corpus.docs}/../../outside/{corpus.secret.name}"
    with pytest.raises(FileRefusedError, match=r"'\.\.'"):
        guard.open(sneaky)
    with pytest.raises(FileRefusedError, match="not a document"):
        guard.open(str(corpus.secret))


def test_a_symlink_leading_outside_is_neither_indexed_nor_served(
    corpus: Corpus, guard: DocumentGuard
) -> None:
    # The pipeline skips file symlinks whose target is outside the folder...
    with pytest.raises(FileRefusedError, match="not a document"):
        guard.record(corpus.doc("link-out.md"))
    # ...and the UI would not hand out such a file even if it were recorded.
    with pytest.raises(FileRefusedError):
        guard.open(corpus.doc("link-out.md"))


def test_a_file_swapped_for_a_symlink_after_indexing_is_refused(
    corpus: Corpus, guard: DocumentGuard
) -> None:
    swapped = corpus.docs / "sub" / "swap.md"
    guard.open(str(swapped))  # fine before the swap
    swapped.unlink()
    swapped.symlink_to(corpus.secret)
    with pytest.raises(FileRefusedError) as refused:
        guard.open(str(swapped))
    assert SECRET not in str(refused.value)


def test_changed_unindexed_and_failed_files_are_refused(
    corpus: Corpus, guard: DocumentGuard, tmp_path: Path
) -> None:
    with pytest.raises(FileRefusedError, match="not indexed"):
        guard.open(corpus.doc("broken.pdf"))
    with pytest.raises(FileRefusedError, match="not a document"):
        guard.open(corpus.doc("data.bin"))
    notes = corpus.docs / "notes.md"
    original = notes.read_bytes()
    try:
        notes.write_bytes(original + b"\nappended after indexing\n")
        with pytest.raises(FileRefusedError, match="changed since"):
            guard.open(str(notes))
    finally:
        notes.write_bytes(original)
    assert guard.open(str(notes)).data == original


def test_check_spelling_keeps_clean_absolute_paths() -> None:
    assert check_spelling("/data/contracts/a.pdf") == "/data/contracts/a.pdf"
    with pytest.raises(FileRefusedError):
        check_spelling("/data/contracts/../secrets/a.pdf")


def test_folders_for_indexing_stay_under_the_root(corpus: Corpus, tmp_path: Path) -> None:
    assert resolve_folder(corpus.root, "docs") == (corpus.docs).resolve()
    assert resolve_folder(corpus.root, str(corpus.docs)) == corpus.docs.resolve()
    assert resolve_folder(corpus.root, "") == corpus.root.resolve()
    for bad in ("..", "../outside", "docs/../../outside", "/etc", str(corpus.secret.parent)):
        with pytest.raises(FileRefusedError):
            resolve_folder(corpus.root, bad)
    with pytest.raises(FileRefusedError, match="no such folder"):
        resolve_folder(corpus.root, "nope")
    link = corpus.root / "link-to-outside"
    link.symlink_to(corpus.secret.parent, target_is_directory=True)
    try:
        with pytest.raises(FileRefusedError):
            resolve_folder(corpus.root, "link-to-outside")
        assert "link-to-outside" not in list_folders(corpus.root)
        assert {".", "docs", "docs/sub"} <= set(list_folders(corpus.root))
    finally:
        link.unlink()


def test_text_is_never_served_as_html(corpus: Corpus, guard: DocumentGuard) -> None:
    media, headers = file_headers(guard.open(corpus.doc("notes.md")))
    assert media.startswith("text/plain")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in headers["Content-Security-Policy"]
    media, headers = file_headers(guard.open(corpus.doc("policy.pdf")))
    assert media == "application/pdf" and headers["Content-Disposition"].startswith("inline")


def test_passage_span_ignores_whitespace_and_case() -> None:
    text = "ARTICLE 7\r\nTermination for\r\ncause.  Either party may end it."
    expected = (text.index("Termination"), text.index("cause.") + len("cause"))
    assert passage_span(text, "termination  for cause.") == expected
    assert passage_span(text, "“Termination” for — cause") == expected  # other punctuation
    assert passage_span(text, "nothing like it") is None


def test_text_preview_marks_passage_terms_and_pages() -> None:
    text = "Intro <b>page</b> one.\n\nTermination for cause needs notice.\n\nLast page."
    start = text.index("Termination")
    html = text_preview_html(
        text, (start, start + 35), (start, start + 21), "termination cause", [(1, 0), (2, 24)]
    )
    assert (
        '<span id="ds-passage" class="ds-passage"><mark>Termination</mark> for <mark>cause' in html
    )
    assert '<span class="ds-pagemark" data-page="2">page 2</span>' in html
    assert "&lt;b&gt;page&lt;/b&gt;" in html  # document text is escaped, never rendered
