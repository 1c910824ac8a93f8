"""The UI without a browser: the Blocks it builds, its actions, and every route that serves files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from docsearch.app.web.actions import (
    Filters,
    Picked,
    UIContext,
    UIProgress,
    attempt,
    filtered_paths,
    parse_day,
    results_html,
)
from docsearch.app.web.files import FileRefusedError
from docsearch.config import Settings
from docsearch.errors import UsageError
from docsearch.hits import Hit
from docsearch.snippets import Snippet
from docsearch.store.schema import FileRecord
from tests.helpers import REPO
from tests.ui.corpus import SECRET, Corpus


@pytest.fixture(scope="module")
def ctx(corpus: Corpus) -> UIContext:
    return UIContext(corpus.db, Settings(db=corpus.db), "docs", corpus.root)


@pytest.fixture(scope="module")
def client(corpus: Corpus) -> Any:
    from fastapi.testclient import TestClient

    from docsearch.app.web.ui import build_ui, make_app

    app = make_app(build_ui("docs", db=corpus.db, root=corpus.root))
    with TestClient(app) as test_client:
        yield test_client


# ---------------------------------------------------------------------------------------------
# Pure helpers


def with_first(hit: Hit, **changes: Any) -> Hit:
    """`hit` with its first passage (what a result shows first) changed."""
    return replace(hit, passages=(replace(hit.best, **changes), *hit.passages[1:]))


def test_parse_day_and_date_filter() -> None:
    assert parse_day("") is None
    start, end = parse_day("2025-03-01"), parse_day("2025-03-01", end_of_day=True)
    assert start is not None and end is not None and 86399 < end - start < 86400
    with pytest.raises(UsageError, match="YYYY-MM-DD"):
        parse_day("March 1st")
    records = {
        "/d/a.pdf": FileRecord("/d/a.pdf", "", 1, start + 10, "indexed"),
        "/d/b.md": FileRecord("/d/b.md", "", 1, start - 10, "indexed"),
        "/d/c.pdf": FileRecord("/d/c.pdf", "", 1, start + 10, "failed"),
    }
    assert filtered_paths(records, ["PDF"], None, None) == ["/d/a.pdf"]
    assert filtered_paths(records, [], start, None) == ["/d/a.pdf"]
    assert filtered_paths(records, ["Markdown"], start, None) == []


def test_attempt_turns_errors_into_messages(caplog: pytest.LogCaptureFixture) -> None:
    def domain() -> str:
        raise UsageError("empty query: type some words")

    def bug() -> str:
        raise KeyError("x")

    assert attempt(domain, lambda m: f"shown: {m}") == "shown: empty query: type some words"
    shown = attempt(bug, lambda m: m)
    assert "KeyError" in shown and "server log" in shown and "Traceback" not in shown
    assert "Traceback" in caplog.text  # the details go to the server log


# ---------------------------------------------------------------------------------------------
# Actions


def test_search_ranks_the_pdf_first_with_its_page_and_marks(ctx: UIContext) -> None:
    found = ctx.search("termination for cause", "docs", "hybrid", 5, Filters())
    top = found.hits[0]
    assert top.path.endswith("policy.pdf") and top.pages == "1-3"  # one chunk: a short PDF
    assert found.mode == "lexical (no vectors)"
    page = results_html(found)
    assert f'data-search-id="{found.search_id}"' in page
    assert "<mark>Termination</mark>" in page and "<mark>cause</mark>" in page
    # a pin cite: the page of the marked words, not the chunk's range
    assert top.page is not None and f'<span class="ds-pages">p. {top.page}</span>' in page
    assert "lexical #1" in page


def test_results_html_escapes_document_text(ctx: UIContext) -> None:
    found = ctx.search("escrow", "docs", "lexical", 5, Filters())
    found.hits[0] = with_first(found.hits[0], title='<img src=x onerror="alert(1)">')
    page = results_html(found)
    assert "<img src=x" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_a_hit_read_by_ocr_carries_the_ocr_badge(ctx: UIContext) -> None:
    found = ctx.search("escrow", "docs", "lexical", 5, Filters())
    assert 'class="ds-ocr"' not in results_html(found)
    found.hits[0] = with_first(found.hits[0], ocr=True)
    assert results_html(found).count('class="ds-ocr"') == 1


def test_snippets_are_marked_by_their_spans_even_when_the_text_has_stars(
    ctx: UIContext,
) -> None:
    text = "a **bold** claim on termination for cause"
    spans = ((text.index("termination"), text.index(" for")), (text.index("cause"), len(text)))
    snippet = Snippet(text, spans)
    assert snippet.marked() == "a **bold** claim on **termination** for **cause**"
    found = ctx.search("escrow", "docs", "lexical", 5, Filters())
    found.hits[0] = with_first(found.hits[0], snippet=snippet)
    assert "a **bold** claim on <mark>termination</mark> for <mark>cause</mark>" in results_html(
        found
    )


def test_a_result_lists_its_other_best_passages_with_their_pages(ctx: UIContext) -> None:
    found = ctx.search("escrow", "docs", "lexical", 5, Filters())
    hit = found.hits[0]
    assert hit.passages and hit.passages[0].snippet == hit.snippet
    other = replace(
        hit.passages[0], page_start=4, page_end=5, snippet=Snippet("the <second> one", ((5, 11),))
    )
    found.hits[0] = replace(hit, passages=(hit.passages[0], other))
    page = results_html(found)
    assert '<span class="ds-at">p. 4-5</span> the &lt;<mark>second</mark>&gt; one' in page
    shown = sum(len(h.passages) for h in found.hits)  # the first passage is the hit's snippet
    assert page.count('<div class="ds-snippet') == shown


def test_filters_narrow_the_results(ctx: UIContext) -> None:
    def paths(**kwargs: Any) -> list[str]:
        found = ctx.search("termination escrow invoices", "docs", "lexical", 10, Filters(**kwargs))
        return sorted(Path(h.path).name for h in found.hits)

    assert paths() == ["notes.md", "policy.pdf"]
    assert paths(types=("PDF",)) == ["policy.pdf"]
    assert paths(glob="docs/*.md") == ["notes.md"]
    assert paths(after="2999-01-01") == []
    assert paths(before="2999-01-01", types=("Markdown",)) == ["notes.md"]


def test_search_errors_are_domain_errors(ctx: UIContext) -> None:
    with pytest.raises(UsageError, match="empty query"):
        ctx.search("  ", "docs", "hybrid", 5, Filters())
    with pytest.raises(UsageError, match="no vectors"):
        ctx.search("termination", "docs", "vector", 5, Filters())
    with pytest.raises(UsageError, match="no collection named"):
        ctx.search("termination", "nope", "hybrid", 5, Filters())


def test_pdf_preview_opens_at_the_page_with_terms_boxed(ctx: UIContext) -> None:
    hit = ctx.search("termination for cause", "docs", "lexical", 1, Filters()).hits[0]
    view = ctx.preview(Picked(hit, "docs", "termination for cause"))
    assert (view.page, view.pages, view.paged) == (2, 3, True)
    assert 'data-page="2"' in view.head and "page 2 of 3" in view.head
    assert view.body.count('class="ds-box ds-hl"') >= 2  # "Termination", "cause"
    assert 'class="ds-box ds-passage"' in view.body
    assert "data:image/png;base64," in view.body
    assert ctx.preview(Picked(hit, "docs", "x"), page=3).page == 3


def test_text_preview_marks_the_passage(ctx: UIContext) -> None:
    hit = ctx.search("invoices payable", "docs", "lexical", 1, Filters()).hits[0]
    view = ctx.preview(Picked(hit, "docs", "invoices payable"))
    assert not view.paged and view.page == 1
    assert 'id="ds-passage"' in view.body and "<mark>payable</mark>" in view.body


def test_preview_refuses_paths_it_was_not_given_by_a_search(ctx: UIContext, corpus: Corpus) -> None:
    hit = ctx.search("termination for cause", "docs", "lexical", 1, Filters()).hits[0]
    for path in ("/etc/passwd", str(corpus.secret), corpus.doc("link-out.md"), "../../etc/passwd"):
        with pytest.raises(FileRefusedError):
            moved = tuple(replace(p, path=path) for p in hit.passages)
            ctx.preview(Picked(replace(hit, passages=moved), "docs", "x"))


def test_index_from_the_ui_reports_failed_and_skipped_files(corpus: Corpus, tmp_path: Path) -> None:
    ctx = UIContext(str(tmp_path / "db"), Settings(db=str(tmp_path / "db")), None, corpus.root)
    seen: list[tuple[int, int]] = []
    summary, rows = ctx.index(
        "docs", "fresh", "none (lexical only)", UIProgress(lambda d, t, _: seen.append((d, t)))
    )
    assert summary.startswith("fresh: ") and "1 failed" in summary
    by_file = {row[1]: row for row in rows}
    assert by_file["broken.pdf"][0] == "failed" and "PDF" in by_file["broken.pdf"][2]
    assert by_file["data.bin"][:2] == ["skipped", "data.bin"]
    assert by_file["notes.md"][0] == "indexed"
    assert rows[0][0] == "failed"  # failures first
    assert seen[-1][0] == seen[-1][1] > 0  # progress reached the end
    assert ctx.collections() == ["fresh"]
    with pytest.raises(FileRefusedError):
        ctx.index("../outside", "", "default", UIProgress(lambda *_: None))


def test_the_ui_cannot_index_a_collection_while_an_index_run_holds_it(
    corpus: Corpus, tmp_path: Path
) -> None:
    """Every door takes the writer lock: while `docsearch index` writes a collection, indexing
    it from the UI is refused with a message (not run alongside, duplicating rows)."""
    db = str(tmp_path / "db")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOCSEARCH_PLUGINS": "tests.fakes"}
    args = ["index", str(corpus.docs), "--collection", "docs", "--encoder", "hashing", "--db", db]
    run = subprocess.Popen(
        [sys.executable, "-m", "docsearch.app.cli", *args],
        env={**env, "DOCSEARCH_FAKE_SLEEP": "1.5"},  # each encoder call: the run is under way
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    created = Path(db) / "docs__chunks.lance" / "_versions"  # made under the lock, then it embeds
    deadline = time.monotonic() + 120
    while not created.is_dir() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    ctx = UIContext(db, Settings(db=db), None, corpus.root)
    try:
        assert run.poll() is None, "the index run ended before the UI asked"
        with pytest.raises(UsageError, match="'docs' is being indexed by another process; wait"):
            ctx.index("docs", "docs", "default", UIProgress(lambda *_: None))
    finally:
        _, stderr = run.communicate(timeout=120)
    assert run.returncode == 3, stderr  # broken.pdf fails; everything else is indexed
    summary, _ = ctx.index("docs", "docs", "default", UIProgress(lambda *_: None))
    assert summary.startswith("docs: 0 new") and "1 failed" in summary  # free again


def test_indexing_is_off_without_a_root(corpus: Corpus) -> None:
    ctx = UIContext(corpus.db, Settings(db=corpus.db), "docs", None)
    with pytest.raises(UsageError, match="--root"):
        ctx.index("docs", "", "default", UIProgress(lambda *_: None))


# ---------------------------------------------------------------------------------------------
# The Blocks and the HTTP routes


def test_build_ui_has_the_search_first_layout(corpus: Corpus) -> None:
    import gradio as gr

    from docsearch.app.web.ui import build_ui

    demo = build_ui("docs", db=corpus.db)
    assert isinstance(demo, gr.Blocks)
    ids = {block.elem_id for block in demo.blocks.values()}
    assert {"ds-query", "ds-collection", "ds-mode", "ds-k", "ds-results", "ds-preview"} <= ids
    assert {"ds-glob", "ds-types", "ds-status"} <= ids
    assert "ds-folder" not in ids  # no root: no indexing controls
    # Previews take server-held state (a rank into the last results), never a path from the page.
    for dep in demo.fns.values():
        if any(getattr(o, "elem_id", None) == "ds-preview" for o in dep.outputs):
            assert all(isinstance(i, gr.State) for i in dep.inputs)


def test_the_file_route_serves_indexed_documents_only(client: Any, corpus: Corpus) -> None:
    ok = client.get(
        "/docsearch/file", params={"collection": "docs", "path": corpus.doc("policy.pdf")}
    )
    assert ok.status_code == 200 and ok.content == (corpus.docs / "policy.pdf").read_bytes()
    assert ok.headers["content-type"] == "application/pdf"
    refused = [
        "../../etc/passwd",
        "/etc/passwd",
        str(corpus.secret),
        corpus.doc("link-out.md"),
        f"{corpus.docs}/../../outside/secret.md",
        corpus.doc("broken.pdf"),
    ]
    for path in refused:
        response = client.get("/docsearch/file", params={"collection": "docs", "path": path})
        assert response.status_code == 403, path
        assert SECRET not in response.text and "root:" not in response.text
    for collection in ("nope", "../docs", ""):
        response = client.get(
            "/docsearch/file", params={"collection": collection, "path": corpus.doc("notes.md")}
        )
        assert response.status_code == 404


@pytest.mark.parametrize("route", ["/gradio_api/file=", "/file=", "/gradio_api/file/", "/file/"])
def test_gradio_file_routes_serve_no_documents(client: Any, corpus: Corpus, route: str) -> None:
    for path in (
        "/etc/passwd",
        "../../etc/passwd",
        str(corpus.secret),
        corpus.doc("policy.pdf"),  # even indexed documents go through our guard only
        corpus.doc("link-out.md"),
        "pyproject.toml",
    ):
        response = client.get(route + path)
        assert response.status_code in (403, 404), (route, path, response.status_code)
        assert SECRET not in response.text and "root:x:" not in response.text


def test_the_ui_sees_what_a_later_index_run_wrote(tmp_path: Path) -> None:
    from tests.ui.corpus import build_corpus, index_corpus

    fresh = build_corpus(tmp_path)
    index_corpus(fresh)
    ctx = UIContext(fresh.db, Settings(db=fresh.db), "docs", None)
    assert ctx.search("zebra crossing", "docs", "lexical", 5, Filters()).hits == []
    (fresh.docs / "zebra.md").write_text(
        "# Roads\n\nA zebra crossing gives pedestrians priority.\n"
    )
    index_corpus(fresh)  # another writer, as `docsearch index` would be
    hits = ctx.search("zebra crossing", "docs", "lexical", 5, Filters()).hits
    assert [Path(h.path).name for h in hits] == ["zebra.md"]


def test_ui_command_is_light_typed_and_reports_errors() -> None:
    import subprocess
    import sys

    import typer
    from typer.testing import CliRunner

    from docsearch.app.ui_cmd import ui_command

    probe = "import sys, docsearch.app.ui_cmd; print('gradio' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.stdout.strip() == "False"  # gradio only when the command runs
    app = typer.Typer()
    app.command("ui")(ui_command)
    app.command("other")(lambda: None)  # a group, as in cli.py
    runner = CliRunner()
    shown = runner.invoke(app, ["ui", "--help"])
    assert shown.exit_code == 0
    assert all(
        opt in shown.output for opt in ("--collection", "--host", "--port", "--root", "--db")
    )
    refused = runner.invoke(app, ["ui", "--root", "/no/such/folder"])
    assert refused.exit_code == 2 and "--root must be an existing folder" in refused.output
