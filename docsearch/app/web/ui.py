"""The search UI (gradio): search first, then the document open at the hit's page.

`build_ui()` returns a `gr.Blocks` with two tabs. Search: query, mode, collection, k and filters
(path glob, file type, modified date); ranked results; clicking one previews its document at the
page, the passage and terms marked; its "more like this" lists the documents like it instead,
each with its shared terms and passage pairs. Index: a folder under the allowed root, progress, the per-file
report. `serve()` mounts the UI next to the guarded file route (`files.py`), lets through only the
routes the page uses (none of gradio's file or upload routes), and binds localhost by default.
A handler shows a `DocsearchError` as a message in the page; anything else is logged on the
server and shown as one line, never a traceback.
Not here: the actions behind the events (`actions.py`), reading files (`files.py`).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docsearch.app.web.actions import (
    ENCODER_CHOICES,
    FILE_TYPES,
    MAX_K,
    Filters,
    Picked,
    UIContext,
    UIProgress,
    attempt,
    message_html,
    results_html,
    status_html,
)
from docsearch.app.web.files import add_file_route, list_folders
from docsearch.config import Settings
from docsearch.defaults import MODES
from docsearch.errors import UsageError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from docsearch.registry import CollectionRegistry

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The gradio layer

CSS = """
.ds-msg { padding: .6em .8em; border-radius: 6px; margin: .3em 0; }
.ds-error { background: #fdecea; color: #8a1c12; border: 1px solid #f5c2bd; }
.ds-info { background: #eef4fd; color: #163d6b; border: 1px solid #c6d9f5; }
.ds-hits { list-style: none; padding: 0; margin: 0; }
.ds-hit { padding: .6em .4em; border-bottom: 1px solid var(--border-color-primary); }
.ds-hit.ds-active { background: var(--background-fill-secondary); }
.ds-open { font-weight: 600; font-size: 1.05em; color: var(--link-text-color); background: none;
           border: none; padding: 0; cursor: pointer; text-align: left; }
.ds-open:hover { text-decoration: underline; }
.ds-rank, .ds-pages, .ds-path, .ds-score, .ds-heading, .ds-summary { color: var(--body-text-color-subdued);
           font-size: .9em; }
.ds-snippet { margin: .3em 0; line-height: 1.45; }
.ds-ocr { font-size: .75em; border: 1px solid currentColor; border-radius: 3px; padding: 0 3px; }
.ds-snippet mark, .ds-text mark { background: #ffe066; color: inherit; padding: 0 1px; }
.ds-page { position: relative; display: inline-block; width: 100%; }
.ds-page-img { width: 100%; display: block; border: 1px solid var(--border-color-primary); }
.ds-box { position: absolute; pointer-events: none; }
.ds-box.ds-hl { background: rgba(255, 214, 0, .45); }
.ds-box.ds-passage { background: rgba(80, 150, 255, .16); }
.ds-text { white-space: pre-wrap; font-family: var(--font-mono); font-size: .85em; line-height: 1.5; }
.ds-text .ds-chunk { background: rgba(80, 150, 255, .08); }
.ds-text .ds-passage { background: rgba(80, 150, 255, .22); }
.ds-pagemark { display: block; color: var(--body-text-color-subdued); border-top: 1px dashed #aaa;
               margin: .8em 0 .3em; font-family: var(--font); }
.ds-cut { color: var(--body-text-color-subdued); font-style: italic; }
.ds-similar { font-size: .85em; color: var(--link-text-color); background: none; border: none;
              padding: 0; cursor: pointer; }
.ds-terms, .ds-pair .ds-at { color: var(--body-text-color-subdued); font-size: .9em; }
.ds-pair { margin: .3em 0; }
.ds-query-side { border-left: 3px solid var(--border-color-primary); padding-left: .5em; }
"""

# Clicking a result asks the server to preview it, its "more like this" button for the documents
# like it (by rank: the server holds the hits).
RESULTS_JS = """
element.addEventListener('click', (event) => {
  if (event.target.closest('a')) return;
  const more = event.target.closest('.ds-similar');
  if (more) {
    trigger('click', {similar: Number(more.dataset.rank)});
    return;
  }
  const hit = event.target.closest('.ds-hit');
  if (!hit) return;
  element.querySelectorAll('.ds-hit').forEach((h) => h.classList.toggle('ds-active', h === hit));
  trigger('click', {rank: Number(hit.dataset.rank)});
});
"""
PREVIEW_JS = """
watch('value', () => {
  const passage = element.querySelector('#ds-passage, .ds-box.ds-passage, .ds-box.ds-hl');
  if (passage) passage.scrollIntoView({block: 'center'});
});
"""


@functools.cache
def _private_folder() -> tempfile.TemporaryDirectory[str]:
    # Mode 0700 and empty; removed when the process exits (the cache keeps it alive till then).
    return tempfile.TemporaryDirectory(prefix="docsearch-ui-", ignore_cleanup_errors=True)


def use_private_gradio_folders() -> Path:
    """Point gradio's temp folder and examples cache at a fresh folder of this process's own.

    Gradio counts both as its own files: an inherited GRADIO_TEMP_DIR may hold anyone's files,
    and the examples cache defaults to `.gradio/cached_examples` under the working directory.
    Neither is reused, even though the routes that would serve them are closed (`UIRoutesOnly`).
    """
    folder = Path(_private_folder().name)
    os.environ["GRADIO_TEMP_DIR"] = str(folder)
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(folder / "cached_examples")
    return folder


def _gradio() -> Any:
    """Import gradio with its files kept private to this process and no calls home."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    use_private_gradio_folders()
    import gradio as gr

    return gr


def build_ui(
    collection: str | None = None,
    *,
    db: str | None = None,
    root: Path | None = None,
    settings: Settings | None = None,
    collections: CollectionRegistry | None = None,
) -> Any:
    """The docsearch UI as a `gr.Blocks` (not launched; see `serve`); `collections`: the
    process's open collections, if it has them already (`docsearch serve`'s API's)."""
    gr = _gradio()
    settings = settings or Settings()
    folder = root.resolve() if root else None
    ctx = UIContext(db or settings.db, settings, collection, folder, shared=collections)
    with gr.Blocks(title="docsearch", analytics_enabled=False) as demo:
        gr.Markdown("## docsearch", elem_id="ds-header")
        status = gr.HTML("", elem_id="ds-status")
        with gr.Tab("Search", id="search"):
            collection_box = _search_tab(gr, ctx)
        with gr.Tab("Index", id="index"):
            _index_tab(gr, ctx, collection_box)
        demo.load(lambda: _on_load(gr, ctx), outputs=[collection_box, status])
        collection_box.change(lambda name: status_html(ctx, name), [collection_box], [status])
    demo.docsearch_context = ctx  # for serve() and tests
    return demo


def _on_load(gr: Any, ctx: UIContext) -> tuple[Any, str]:
    names, value = _collections(ctx)
    return gr.update(choices=names, value=value), status_html(ctx, value)


def _collections(ctx: UIContext, selected: str | None = None) -> tuple[list[str], str | None]:
    """The collection picker's choices, and its value: `selected` if it exists, else the default."""
    names = attempt(ctx.collections, lambda _: [])
    value = selected if selected in names else attempt(ctx.default_collection, lambda _: None)
    return names, value


def _search_inputs(gr: Any, ctx: UIContext) -> tuple[list[Any], Any]:
    with gr.Row(equal_height=False):
        query = gr.Textbox(
            label="Search",
            placeholder="e.g. termination for cause",
            scale=8,
            elem_id="ds-query",
            autofocus=True,
        )
        go = gr.Button("Search", variant="primary", scale=1, elem_id="ds-search")
    with gr.Row():
        names, value = _collections(ctx)
        collection = gr.Dropdown(
            names, value=value, label="Collection", elem_id="ds-collection", scale=2
        )
        mode = gr.Radio(list(MODES), value="hybrid", label="Mode", elem_id="ds-mode", scale=2)
        k = gr.Slider(1, MAX_K, value=10, step=1, label="Results (k)", elem_id="ds-k", scale=2)
    with gr.Accordion("Filters", open=False, elem_id="ds-filters"):
        with gr.Row():
            glob = gr.Textbox(
                label="Folder or path glob", placeholder="contracts/*.pdf", elem_id="ds-glob"
            )
            types = gr.CheckboxGroup(list(FILE_TYPES), label="File type", elem_id="ds-types")
        with gr.Row():
            after = gr.DateTime(label="Modified after", include_time=False, type="string")
            before = gr.DateTime(label="Modified before", include_time=False, type="string")
    return [query, collection, mode, k, glob, types, after, before], go


def _results_and_preview(gr: Any) -> tuple[Any, ...]:
    """The message line, the results list, and the preview (head, page buttons, body)."""
    message = gr.HTML("", elem_id="ds-message")
    with gr.Row():
        with gr.Column(scale=5):
            results = gr.HTML(
                '<p class="ds-summary">Type a query and press Enter.</p>',
                elem_id="ds-results",
                js_on_load=RESULTS_JS,
            )
        with gr.Column(scale=6):
            head = gr.HTML(
                '<p class="ds-summary">Click a result to open it at its page.</p>',
                elem_id="ds-preview-head",
            )
            with gr.Row():
                prev_btn = gr.Button("◀ Previous page", size="sm", visible=False, elem_id="ds-prev")
                next_btn = gr.Button("Next page ▶", size="sm", visible=False, elem_id="ds-next")
            body = gr.HTML("", elem_id="ds-preview", js_on_load=PREVIEW_JS, max_height=900)
    return message, results, head, body, prev_btn, next_btn


def _search_tab(gr: Any, ctx: UIContext) -> Any:
    """Lay out the search tab and wire its events; returns the collection picker.

    Each handler returns {component: value} for what it changes: a failure changes only the
    message, so the last results and preview stay.
    """
    inputs, go = _search_inputs(gr, ctx)
    message, results, head, body, prev_btn, next_btn = _results_and_preview(gr)
    # Kept on the server: what each result points at, and the previewed hit and page.
    hits, nav = gr.State([]), gr.State({})
    asked = gr.State({"mode": "hybrid", "k": 10})  # the last search's: more like this uses them

    def run_search(
        query: str,
        collection: str | None,
        mode: str,
        k: float,
        glob: str,
        types: list[str],
        after: str | None,
        before: str | None,
    ) -> dict[Any, Any]:
        def action() -> dict[Any, Any]:
            filters = Filters(glob or "", tuple(types or ()), after, before)
            found = ctx.search(query, collection, mode, int(k), filters)
            items = [Picked(h, found.collection, query) for h in found.hits]
            search = {"mode": mode, "k": int(k)}
            return {results: results_html(found), message: "", hits: items, asked: search}

        return attempt(action, lambda msg: {message: message_html(msg)})

    def preview_failed(msg: str) -> dict[Any, Any]:
        return {message: message_html(f"cannot preview: {msg}")}

    def show(item: Picked, page: int | None) -> dict[Any, Any]:
        def action() -> dict[Any, Any]:
            view = ctx.preview(item, page)
            first, last = view.paged and view.page > 1, view.paged and view.page < view.pages
            return {
                head: view.head,
                body: view.body,
                message: "",
                nav: {"item": item, "page": view.page},
                prev_btn: gr.update(visible=view.paged, interactive=first),
                next_btn: gr.update(visible=view.paged, interactive=last),
            }

        return attempt(action, preview_failed)

    def more_like(item: Picked, search: dict[str, Any]) -> dict[Any, Any]:
        def action() -> dict[Any, Any]:
            found = ctx.similar(item, search["mode"], int(search["k"]))
            # A similar document's preview marks the terms it shares with the query document.
            items = [
                Picked(h, found.collection, " ".join(getattr(h, "terms", {}))) for h in found.hits
            ]
            return {results: results_html(found), message: "", hits: items}

        return attempt(action, lambda msg: {message: message_html(f"more like this: {msg}")})

    def open_hit(items: list[Picked], search: dict[str, Any], evt: gr.EventData) -> dict[Any, Any]:
        data = evt._data or {}
        rank = int(data.get("similar") or data.get("rank") or 0)
        if not 1 <= rank <= len(items):
            return preview_failed("that result is gone; search again")
        if "similar" in data:
            return more_like(items[rank - 1], search)
        return show(items[rank - 1], None)

    # The annotation above is a string (postponed evaluation); gradio needs the class itself
    # to recognise the event-data parameter.
    open_hit.__annotations__["evt"] = gr.EventData

    def turn(at: dict[str, Any], step: int) -> dict[Any, Any]:
        return show(at["item"], at["page"] + step) if at else preview_failed("open a result first")

    for trigger in (inputs[0].submit, go.click):
        trigger(run_search, inputs, [results, message, hits, asked], concurrency_limit=4)
    shown = [head, body, message, nav, prev_btn, next_btn]
    results.click(open_hit, [hits, asked], [*shown, results, hits], concurrency_limit=4)
    prev_btn.click(lambda at: turn(at, -1), [nav], shown)
    next_btn.click(lambda at: turn(at, 1), [nav], shown)
    return inputs[1]


def _index_tab(gr: Any, ctx: UIContext, collection_box: Any) -> None:
    if ctx.root is None:
        gr.HTML(
            message_html(
                "Indexing from the UI is off. Start the UI with --root FOLDER to "
                "index folders under FOLDER, or run `docsearch index PATH`.",
                "info",
            )
        )
        return
    folders = attempt(lambda: list_folders(ctx.root or Path(".")), lambda _: ["."])
    gr.Markdown(f"Folders under `{ctx.root}` can be indexed. Unchanged files are skipped.")
    with gr.Row():
        folder = gr.Dropdown(
            folders,
            value=".",
            label="Folder",
            allow_custom_value=True,
            elem_id="ds-folder",
            scale=3,
        )
        name = gr.Textbox(
            label="Collection (blank: the folder's name)", elem_id="ds-new-collection", scale=2
        )
        encoder = gr.Dropdown(
            list(ENCODER_CHOICES), value="default", label="Encoder (new collections)", scale=2
        )
    start = gr.Button("Index", variant="primary", elem_id="ds-index")
    status = gr.HTML("", elem_id="ds-index-status")
    report = gr.Dataframe(
        headers=["status", "file", "reason"],
        datatype=["str", "str", "str"],
        interactive=False,
        elem_id="ds-index-report",
        wrap=True,
    )

    def run(f: str, n: str, e: str, progress: Any = gr.Progress()) -> dict[Any, Any]:  # noqa: B008
        def report_progress(done: int, total: int, what: str) -> None:
            progress((done, max(total, 1)), desc=f"indexing {what}", unit="files")

        def action() -> dict[Any, Any]:
            summary, rows = ctx.index(f or ".", n or "", e, UIProgress(report_progress))
            names, value = _collections(ctx, n.strip() or None)
            picked = gr.update(choices=names, value=value)
            return {status: message_html(summary, "info"), report: rows, collection_box: picked}

        return attempt(action, lambda msg: {status: message_html(msg)})

    start.click(
        run,
        [folder, name, encoder],
        [status, report, collection_box],
        concurrency_limit=1,
        concurrency_id="index",
    )


# ---------------------------------------------------------------------------------------------
# Serving


LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# The routes the page uses (found by driving it in Chromium: tests/ui/test_browser.py): the page
# and its config, gradio's own assets, the event queue and heartbeat, and docsearch's guarded file
# route. Everything else gradio mounts is answered 404: its file routes (which serve its temp
# folder, the examples cache and whatever `allowed_paths` names), uploads, streams, the API
# description, run history. Gradio versions that add routes stay closed until they are listed here.
UI_ROUTES = frozenset(
    "/ /config /config/ /theme.css /favicon.ico /robots.txt /docsearch/file /gradio_api/queue/join "
    "/gradio_api/queue/data /gradio_api/cancel /gradio_api/reset".split()
)
UI_ROUTE_PATTERN = re.compile(r"/(?:assets|static)(?:/[\w.-]+)+|/gradio_api/heartbeat/\w+")


def is_ui_route(path: str) -> bool:
    """Whether the UI uses `path` (as the router sees it: decoded, before any normalising).

    A path with empty, `.` or `..` segments is never one: the router would not normalise it
    the way a reader of this list might expect.
    """
    segments = path.removeprefix("/").removesuffix("/").split("/")
    if not path.startswith("/") or (path != "/" and {"", ".", ".."} & set(segments)):
        return False
    return path in UI_ROUTES or UI_ROUTE_PATTERN.fullmatch(path) is not None


def route_path(scope: Scope) -> str:
    """The path the router matches: `scope["path"]` without the app's root path (as starlette)."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :] or "/"
    return str(path)


class UIRoutesOnly:
    """ASGI middleware in front of the whole app: only the UI's own routes (`UI_ROUTES`) get
    through; every other request is a 404 and every websocket is closed before it opens."""

    def __init__(self, app: ASGIApp, context: UIContext | None = None) -> None:
        self.app = app
        self.context = context  # the UI's UIContext (its collections), for serve and tests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or (
            scope["type"] == "http" and is_ui_route(route_path(scope))
        ):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            from starlette.responses import PlainTextResponse

            await PlainTextResponse("not found\n", status_code=404)(scope, receive, send)


def make_app(demo: Any) -> Any:
    """The ASGI app: the guarded file route plus the UI, behind `UIRoutesOnly`, so gradio
    serves no files and takes no uploads."""
    from fastapi import FastAPI

    gr = _gradio()
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    add_file_route(app, demo.docsearch_context.guard)
    demo.queue(default_concurrency_limit=4)
    mounted = gr.mount_gradio_app(
        app,
        demo,
        path="",
        allowed_paths=[],
        show_error=False,
        ssr_mode=False,
        mcp_server=False,
        max_file_size="1mb",
        css=CSS,
        footer_links=[],
    )
    return UIRoutesOnly(mounted, demo.docsearch_context)


def check_port(host: str, port: int) -> None:
    """A clear message now rather than a uvicorn error after gradio has loaded."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port"
            ) from None


def serve(demo: Any, host: str = "127.0.0.1", port: int = 7860) -> None:
    """Run the UI until interrupted."""
    import uvicorn

    check_port(host, port)
    if host not in LOOPBACK:
        log.warning(
            "serving on %s: anyone who can reach it can read the indexed documents%s",
            host,
            " and index folders under the allowed root" if demo.docsearch_context.root else "",
        )
    app = make_app(demo)
    print(f"docsearch UI on http://{host}:{port} (Ctrl+C to stop)", flush=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        demo.docsearch_context.registry.close()


__all__ = ["UIContext", "UIRoutesOnly", "build_ui", "is_ui_route", "make_app", "serve"]
