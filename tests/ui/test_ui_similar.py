"""More like this in the UI: every result offers it, and the documents like a result replace the
list, each with its shared terms and passage pairs (pages of both sides).

The actions run without a browser; the last test clicks the button in headless Chromium against a
real `docsearch ui` (`pytest -m browser`, deselected by default). The corpus is the pump corpus of
tests/test_similar.py, indexed with the fake hashing encoder (so it has vectors).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from docsearch.app.web.actions import Filters, Picked, UIContext, results_html
from docsearch.config import Settings
from docsearch.retriever import SimilarHit
from tests.helpers import index_into
from tests.test_similar import _corpus


@pytest.fixture(scope="module")
def pumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("ui-similar")
    _corpus(base / "docs")
    db = str(base / "db")
    assert not index_into(db, base / "docs", "pumps", options={"max_tokens": 40}).failed
    return base / "docs", db


@pytest.fixture(scope="module")
def ctx(pumps: tuple[Path, str]) -> UIContext:
    return UIContext(pumps[1], Settings(db=pumps[1]), "pumps", None)


def _report(ctx: UIContext) -> Picked:
    found = ctx.search("cavitation impeller strainer", "pumps", "lexical", 5, Filters())
    hit = next(h for h in found.hits if h.path.endswith("report.md"))
    return Picked(hit, found.collection, "cavitation impeller strainer")


def test_every_result_offers_more_like_this(ctx: UIContext) -> None:
    found = ctx.search("pump", "pumps", "lexical", 5, Filters())
    page = results_html(found)
    assert found.hits
    for rank in range(1, len(found.hits) + 1):
        assert f'<button class="ds-similar" data-rank="{rank}"' in page
    assert page.count('class="ds-similar"') == len(found.hits)


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_more_like_a_result_lists_similar_documents_with_their_explanations(
    ctx: UIContext, mode: str
) -> None:
    found = ctx.similar(_report(ctx), mode, 5)
    names = [Path(h.path).name for h in found.hits]
    assert names[0] == "report_copy.txt" and "report.md" not in names
    assert found.like == "Pump report" and found.mode == mode
    best = found.hits[0]
    assert isinstance(best, SimilarHit) and "strainer" in best.terms
    page = results_html(found)
    assert "results like Pump report" in page
    assert page.count('class="ds-similar"') == len(found.hits)  # more like those, too
    assert "shared terms: " in page and "strainer" in page
    by = "vectors" if mode == "hybrid" else "terms"
    pair = best.pairs[0]
    assert f'<div class="ds-pair" data-by="{by}" data-query-pages="1" data-match-pages="1">' in page
    assert f"this document p. {pair.query.pages} ↔ p. {pair.match.pages}" in page
    assert "<mark>strainer</mark>" in page or "<mark>cavitation</mark>" in page


def test_a_similar_result_previews_at_its_passage(ctx: UIContext) -> None:
    found = ctx.similar(_report(ctx), "hybrid", 6)
    manual = next(h for h in found.hits if h.path.endswith("manual.pdf"))
    assert isinstance(manual, SimilarHit)
    view = ctx.preview(Picked(manual, found.collection, " ".join(manual.terms)))
    assert view.page == int(manual.pages.split("-")[0]) and view.paged


def test_similar_explanations_are_escaped(ctx: UIContext) -> None:
    found = ctx.similar(_report(ctx), "lexical", 3)
    best = found.hits[0]
    assert isinstance(best, SimilarHit)
    found.hits[0] = replace(best, terms={'<script>alert("x")</script>': 1.0})
    found.like = "<b>evil</b>"
    page = results_html(found)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<b>evil</b>" not in page


def test_more_like_this_errors_are_messages(ctx: UIContext) -> None:
    from docsearch.errors import UsageError

    with pytest.raises(UsageError, match="mode"):
        ctx.similar(_report(ctx), "telepathic", 5)


# ---------------------------------------------------------------------------------------------
# In the browser


@pytest.fixture(scope="module")
def site(pumps: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.ui.browser import chromium_missing, ui_server

    if why := chromium_missing():
        pytest.fail(f"the browser test cannot run: {why}")
    log = tmp_path_factory.mktemp("ui-similar-log") / "ui-server.log"
    env = {"DOCSEARCH_PLUGINS": "tests.fakes"}
    with ui_server(pumps[1], "--collection", "pumps", log=log, env=env) as url:
        yield url


@pytest.mark.browser
def test_clicking_more_like_this_shows_the_similar_documents(site: str) -> None:
    from playwright.sync_api import sync_playwright

    from tests.ui.browser import launch, open_ui, search

    with sync_playwright() as playwright:
        browser: Any = launch(playwright)
        try:
            page = open_ui(browser, site)
            results = search(page, "cavitation impeller strainer")
            report = results.locator(".ds-hit[data-path$='report.md']")
            before = results.get_attribute("data-search-id")
            report.locator(".ds-similar").click()
            page.wait_for_function(
                "(prev) => { const r = document.querySelector('#ds-results .ds-results');"
                " return r && r.dataset.searchId !== prev; }",
                arg=before,
                timeout=60_000,
            )
            similar = page.locator("#ds-results .ds-results")
            assert "like Pump report" in similar.locator(".ds-summary").inner_text()
            paths = [h.get_attribute("data-path") for h in similar.locator(".ds-hit").all()]
            assert paths[0].endswith("report_copy.txt")
            assert not any(p.endswith("/report.md") for p in paths)
            first = similar.locator(".ds-hit").first
            assert "strainer" in first.locator(".ds-terms").inner_text()
            assert first.locator(".ds-pair").first.get_attribute("data-match-pages") == "1"
            first.locator(".ds-open").click()  # a similar result still opens its preview
            page.locator("#ds-preview-head .ds-preview-head").wait_for(timeout=30_000)
            assert "Traceback" not in page.content()
        finally:
            browser.close()
