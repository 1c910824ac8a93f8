"""Previews place a hit by the offsets stored with its chunk, not by searching the document.

The PDF below says the same twelve words on both pages; the passage that answers the query is on
page 2. Finding the passage again by its words would open page 1.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from docsearch.app.web.actions import Filters, Picked, UIContext
from docsearch.config import Settings
from docsearch.indexer.extract import extract
from tests.ui.corpus import Corpus, index_corpus, make_pdf

OPENING = "Termination for cause requires notice of thirty days in writing to the other"
FILLER = [
    "The parties met in spring to review the delivery schedule.",
    "Lunch was served in the main hall after the meeting.",
    "Minutes were taken by the secretary of the board.",
    "The weather that week was mild and mostly dry.",
    "Several suppliers sent their regrets in advance.",
    "A second meeting was planned for the late summer.",
    "Travel costs were shared equally between both sides.",
    "Nobody raised any question about the catering.",
]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> UIContext:
    base = tmp_path_factory.mktemp("offsets")
    docs = base / "docs"
    docs.mkdir()
    make_pdf(
        docs / "repeat.pdf",
        [f"{OPENING} side.\n" + "\n".join(FILLER), f"{OPENING} party and the escrow agent."],
    )
    (docs / "repeat.md").write_text(
        "# Repeat\n\n" + " ".join(FILLER) + "\n\nThe escrow agent holds the deposit. "
        "The escrow agent holds the deposit until the escrow closes.\n"
    )
    corpus = Corpus(str(base / "db"), base, docs, base / "none")
    index_corpus(corpus)
    return UIContext(corpus.db, Settings(db=corpus.db), "docs", base)


def test_a_pdf_preview_opens_at_the_page_of_the_stored_passage(ctx: UIContext) -> None:
    hit = ctx.search("termination escrow", "docs", "lexical", 5, Filters(types=("PDF",))).hits[0]
    assert (hit.page_start, hit.page_end) == (1, 2)  # one chunk over both pages
    document = extract(Path(hit.path))
    assert document.page_at(hit.snippet.anchor) == 2
    view = ctx.preview(Picked(hit, "docs", "termination escrow"))
    assert (view.page, view.pages) == (2, 2)
    assert 'class="ds-box ds-passage"' in view.body  # the passage's part on page 2 is boxed
    assert ctx.preview(Picked(hit, "docs", "termination escrow"), page=1).page == 1


def test_a_text_preview_marks_the_stored_passage(ctx: UIContext) -> None:
    query = "escrow closes"
    hit = ctx.search(query, "docs", "lexical", 5, Filters(types=("Markdown",))).hits[0]
    text = extract(Path(hit.path)).text
    passage = text[hit.snippet.char_start : hit.snippet.char_end]
    assert "escrow closes" in passage
    body = ctx.preview(Picked(hit, "docs", query)).body
    marked = body.split('<span id="ds-passage" class="ds-passage">', 1)[1].split("</span>", 1)[0]
    shown = marked.replace("<mark>", "").replace("</mark>", "")
    assert html.unescape(shown) == passage
    assert "<mark>escrow</mark>" in marked and "<mark>closes</mark>" in marked
