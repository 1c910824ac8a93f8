"""What the search UI does, without gradio: search with filters, previews, indexing, HTML.

`UIContext` holds the database, the allowed indexing root and one `Retriever` per collection;
its methods are the UI's actions (search, more like a result, preview a hit at its page, index
a folder) and raise
`DocsearchError`s that the gradio layer (`ui.py`) shows as messages. The HTML helpers render
results (snippets with the query terms in <mark>, score breakdown; a similar document's shared
terms and passage pairs) with everything escaped.
A preview places the hit by the offsets stored with its chunk and snippet; the document is
extracted again only to show its text (or, for a chunk over several PDF pages, to learn the page).
Not here: layout and events (`ui.py`), reading files from disk (`files.py`).
"""

from __future__ import annotations

import html
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from docsearch.app.web.files import (
    DocumentGuard,
    Verified,
    file_url,
    marked_html,
    pdf_page_count,
    pdf_page_html,
    resolve_folder,
    text_preview_html,
    unsupported_files,
)
from docsearch.config import Settings
from docsearch.errors import DocsearchError, UsageError
from docsearch.indexer.pipeline import NullProgress
from docsearch.registry import CollectionRegistry
from docsearch.results import SearchResult
from docsearch.retriever import Hit, Retriever, SimilarHit
from docsearch.store.schema import FileRecord

if TYPE_CHECKING:
    from docsearch.indexer.extract import Document

log = logging.getLogger(__name__)
T = TypeVar("T")

FILE_TYPES = {
    "PDF": (".pdf",),
    "Word": (".docx",),
    "Markdown": (".md", ".markdown"),
    "Text": (".txt", ".text", ".rst"),
    "HTML": (".html", ".htm"),
    "Image": (".png", ".jpg", ".jpeg", ".tif", ".tiff"),
}
OCR_BADGE = ' <span class="ds-ocr" title="text read by OCR from a scan">OCR</span>'
MAX_K = 50
ENCODER_CHOICES = ("default", "none (lexical only)")


@dataclass(frozen=True)
class Filters:
    glob: str = ""  # folder or path glob
    types: tuple[str, ...] = ()  # keys of FILE_TYPES
    after: str | None = None  # YYYY-MM-DD, modified on or after
    before: str | None = None  # YYYY-MM-DD, modified on or before


@dataclass
class Searched:
    """One search's outcome, as the results list shows it."""

    hits: list[Hit]
    seconds: float
    search_id: int
    mode: str  # the mode that answered (lexical when the collection has no vectors)
    collection: str
    source: str  # the collection's source folder, for short paths
    like: str | None = None  # more like this: the title of the document the hits are like


# ---------------------------------------------------------------------------------------------
# Pure helpers: filters and HTML


def parse_day(text: str | None, end_of_day: bool = False) -> float | None:
    """'2025-03-01' -> a local timestamp (start or end of that day); '' -> None."""
    if not text or not str(text).strip():
        return None
    try:
        day = datetime.strptime(str(text).strip()[:10], "%Y-%m-%d")
    except ValueError:
        raise UsageError(f"bad date {text!r}: use YYYY-MM-DD") from None
    return day.timestamp() + (86399.999 if end_of_day else 0.0)


def filtered_paths(
    records: dict[str, FileRecord], types: Sequence[str], after: float | None, before: float | None
) -> list[str]:
    """Indexed paths of the chosen file types modified within [after, before]."""
    suffixes = tuple(s for t in types for s in FILE_TYPES.get(t, ()))
    return sorted(
        path
        for path, rec in records.items()
        if rec.status == "indexed"
        and (not suffixes or path.lower().endswith(suffixes))
        and (after is None or rec.mtime >= after)
        and (before is None or rec.mtime <= before)
    )


def friendly_glob(pattern: str) -> str | None:
    """A folder/path glob for Retriever.search(path=...): matches anywhere unless it starts with '/'."""
    pattern = pattern.strip()
    if not pattern:
        return None
    return pattern if pattern.startswith(("/", "*")) else "*" + pattern


def answered_mode(result: SearchResult[Any]) -> str:
    """The mode that answered, as the results line shows it: "lexical (no vectors)" where a
    hybrid search fell back (`docsearch.results`)."""
    return f"{result.mode} ({result.fallback})" if result.fallback else result.mode


def display_path(path: str, source: str) -> str:
    root = Path(source) if source else None
    if root is not None and root.suffix:
        root = root.parent
    try:
        return Path(path).relative_to(root).as_posix() if root else path
    except ValueError:
        return path


def score_line(hit: Hit) -> str:
    legs = " · ".join(
        f"{leg} #{s['rank']} ({s['score']:.3f})" for leg, s in sorted(hit.scores.items())
    )
    return f"score {hit.score:.4f}" + (f" · {legs}" if legs else "")


def hit_html(rank: int, hit: Hit, collection: str, source: str) -> str:
    esc = html.escape
    heading = f'<div class="ds-heading">§ {esc(hit.heading_path)}</div>' if hit.heading_path else ""
    page = hit.page or hit.page_start
    link = esc(file_url(collection, hit.path, page))
    provenance = f'<div class="ds-provenance">{esc(hit.provenance)}</div>' if hit.provenance else ""
    return (
        f'<li class="ds-hit" data-rank="{rank}" data-path="{esc(hit.path)}" '
        f'data-page="{page}">'
        f'<div class="ds-title"><span class="ds-rank">{rank}.</span> '
        f'<button class="ds-open" data-rank="{rank}">{esc(hit.title or Path(hit.path).name)}'
        f'</button> <span class="ds-pages">p. {esc(hit.cite)}</span>{OCR_BADGE * hit.ocr}</div>'
        f"{provenance}"
        f'<div class="ds-path">{esc(display_path(hit.path, source))} · '
        f'<a href="{link}" target="_blank" rel="noopener">open original</a> · '
        f'<button class="ds-similar" data-rank="{rank}" title="documents like this one">'
        f"more like this</button></div>{heading}"
        f"{why_similar(hit) if isinstance(hit, SimilarHit) else snippet_and_passages(hit)}"
        f'<div class="ds-score">{esc(score_line(hit))}</div></li>'
    )


def snippet_and_passages(hit: Hit) -> str:
    return f'<div class="ds-snippet">{marked_html(hit.snippet.text, hit.snippet.marks)}</div>' + (
        more_passages(hit)
    )


def why_similar(hit: SimilarHit) -> str:
    """A similar document's explanation: the key terms both documents hold, then each passage
    pair (the query document's passage and this one's, with their pages), shared terms marked."""
    esc = html.escape
    terms = (
        f'<div class="ds-terms">shared terms: {esc(", ".join(hit.terms))}</div>'
        if hit.terms
        else ""
    )
    pairs = []
    for pair in hit.pairs:
        how = f"cosine {pair.score:.3f}" if pair.by == "vectors" else "shared terms"
        query, match = pair.query.snippet, pair.match.snippet
        pairs.append(
            f'<div class="ds-pair" data-by="{esc(pair.by)}" data-query-pages="'
            f'{esc(pair.query.pages)}" data-match-pages="{esc(pair.match.pages)}">'
            f'<div class="ds-at">this document p. {esc(pair.query.pages)} ↔ p. '
            f"{esc(pair.match.pages)} ({how})</div>"
            f'<div class="ds-snippet ds-query-side">{marked_html(query.text, query.marks)}</div>'
            f'<div class="ds-snippet">{marked_html(match.text, match.marks)}</div></div>'
        )
    return terms + "".join(pairs)


def more_passages(hit: Hit) -> str:
    """The document's other best passages (the first is the hit's snippet), each with its pages."""
    return "".join(
        f'<div class="ds-snippet ds-more"><span class="ds-at">p. {html.escape(p.cite)}</span> '
        f"{marked_html(p.snippet.text, p.snippet.marks)}</div>"
        for p in hit.passages[1:]
    )


def results_html(found: Searched) -> str:
    """The ranked list; data attributes let tests and the latency benchmark see a new render."""
    head = (
        f'<div class="ds-results" data-search-id="{found.search_id}" data-count="{len(found.hits)}"'
        f' data-mode="{found.mode}" data-server-ms="{1000 * found.seconds:.1f}">'
    )
    if not found.hits:
        return head + '<p class="ds-empty">No results. Try other words or fewer filters.</p></div>'
    items = "".join(
        hit_html(i, h, found.collection, found.source) for i, h in enumerate(found.hits, start=1)
    )
    like = f" like {html.escape(found.like)}" if found.like is not None else ""
    summary = (
        f'<p class="ds-summary">{len(found.hits)} results{like} in '
        f"{1000 * found.seconds:.0f} ms · {html.escape(found.mode)}</p>"
    )
    return f"{head}{summary}<ol class='ds-hits'>{items}</ol></div>"


def message_html(text: str, kind: str = "error") -> str:
    return f'<div class="ds-msg ds-{kind}" role="alert">{html.escape(text)}</div>' if text else ""


def attempt(action: Callable[[], T], failed: Callable[[str], T]) -> T:
    """Run a UI action; a domain error becomes `failed(message)`, anything else is logged."""
    try:
        return action()
    except DocsearchError as exc:
        return failed(str(exc))
    except Exception as exc:  # noqa: BLE001 - the page shows one line, the log has the rest
        log.exception("UI action failed")
        return failed(f"unexpected error ({type(exc).__name__}); details are in the server log")


# ---------------------------------------------------------------------------------------------
# What the handlers do, without gradio


@dataclass(frozen=True)
class Picked:
    """A result as the server keeps it, so that a click sends a rank, never a path: the hit,
    whose chunk and passage offsets place it in its document, its collection and the query."""

    hit: Hit
    collection: str
    query: str


@dataclass
class Preview:
    head: str  # title, page x of n, link to the original
    body: str
    page: int
    pages: int
    paged: bool  # True for PDFs: prev/next page buttons apply


class UIProgress(NullProgress):
    """The indexer's ProgressSink, files done reported to a callback (gradio's progress bar)."""

    def __init__(self, report: Callable[[int, int, str], None]) -> None:
        self.report = report
        self.total = self.done = 0

    def start(self, files: int) -> None:
        self.total = files
        self.report(0, files, "starting")

    def file_done(self, path: str) -> None:
        self.done += 1
        self.report(self.done, self.total, Path(path).name)


@dataclass
class UIContext:
    """The database, the allowed indexing root and cached per-collection objects."""

    db: str
    settings: Settings
    collection: str | None = None
    root: Path | None = None
    # The process's open collections (`serve` shares its API's); default: one of its own.
    shared: InitVar[CollectionRegistry | None] = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _searches: int = 0

    def __post_init__(self, shared: CollectionRegistry | None) -> None:
        self.registry = shared or CollectionRegistry(self.settings, db=self.db)

    def collections(self) -> list[str]:
        from docsearch.store.database import Database

        return Database(self.db).list_collections()

    def default_collection(self) -> str | None:
        from docsearch.store.database import resolve_collection

        names = self.collections()
        if self.collection in names or not names:
            return self.collection if names else None
        return resolve_collection(self.db, None)

    def retriever(self, name: str | None) -> Retriever:
        if not name:
            raise UsageError("no collection yet: index a folder first (Index tab)")
        # Reads see other writers' commits; a dropped or rebuilt collection is reopened.
        return self.registry.retriever(name)

    def guard(self, name: str) -> DocumentGuard:
        from docsearch.store.schema import validate_name

        validate_name(name)
        return DocumentGuard(self.retriever(name).store, [self.root] if self.root else [])

    def search(
        self, query: str, collection: str | None, mode: str, k: int, filters: Filters
    ) -> Searched:
        retriever = self.retriever(collection)
        started = time.perf_counter()
        store = retriever.store
        lo, hi = parse_day(filters.after), parse_day(filters.before, end_of_day=True)
        paths = None
        if filters.types or lo is not None or hi is not None:
            paths = filtered_paths(store.file_records(), filters.types, lo, hi)
        k, glob = max(1, min(int(k), MAX_K)), friendly_glob(filters.glob)
        # Where no file passes the filters (paths == []) the search finds none, and says its mode.
        result = retriever.search_result(query, k=k, mode=mode or None, path=glob, paths=paths)
        seconds = time.perf_counter() - started
        used = answered_mode(result)
        return Searched(result.hits, seconds, self._next_id(), used, store.name, store.meta.source)

    def similar(self, picked: Picked, mode: str, k: int) -> Searched:
        """The documents most like a result's document (more like this), in `mode`; each
        kept with its shared terms as the query its preview marks."""
        from docsearch.similar import InCollection

        retriever = self.retriever(picked.collection)
        started = time.perf_counter()
        k = max(1, min(int(k), MAX_K))
        result = retriever.similar_result(InCollection(picked.hit.doc_id), k=k, mode=mode or None)
        store, hits, used = retriever.store, result.hits, answered_mode(result)
        like = picked.hit.title or Path(picked.hit.path).name
        seconds = time.perf_counter() - started
        source = store.meta.source
        return Searched(list(hits), seconds, self._next_id(), used, store.name, source, like)

    def _next_id(self) -> int:
        with self._lock:
            self._searches += 1
            return self._searches

    def preview(self, picked: Picked, page: int | None = None) -> Preview:
        """The hit's document at `page` (default: the page where its passage is)."""
        verified = self.guard(picked.collection).open(picked.hit.path)
        if verified.suffix == ".pdf":
            return self._pdf_preview(verified, picked, page)
        return self._text_preview(verified, picked)

    def _pdf_preview(self, verified: Verified, picked: Picked, page: int | None) -> Preview:
        hit, passage = picked.hit, picked.hit.snippet
        first = hit.page_start
        # A chunk on one page needs no text; across pages, the extracted pages' offsets say
        # which of them the passage (and its first marked term) is on.
        doc = _extracted(verified) if first != hit.page_end else None
        if page is None:
            page = doc.page_at(passage.anchor) if doc else first
        pages = pdf_page_count(verified.data)
        page = min(max(1, page), pages)
        span = (passage.char_start, passage.char_end)
        in_chunk = hit.text[span[0] - hit.char_start : span[1] - hit.char_start]
        shown = _on_page(doc, page, span) if doc else in_chunk if page == first else ""
        body = pdf_page_html(verified.data, page, picked.query, shown)
        return Preview(self._head(picked, page, pages), body, page, pages, paged=True)

    def _text_preview(self, verified: Verified, picked: Picked) -> Preview:
        hit = picked.hit
        doc = _extracted(verified, hit.part)
        text = doc.text
        span = _clip(hit.char_start, hit.char_end, len(text))
        passage = _clip(hit.snippet.char_start, hit.snippet.char_end, len(text))
        starts = [(p.number, p.char_offset) for p in doc.pages]
        body = text_preview_html(text, span, passage, picked.query, starts)
        page, pages = doc.page_at(hit.snippet.anchor), len(doc.pages)
        return Preview(self._head(picked, page, pages), body, page, pages, paged=False)

    @staticmethod
    def _head(picked: Picked, page: int, pages: int) -> str:
        link = html.escape(file_url(picked.collection, picked.hit.path, page))
        title = html.escape(picked.hit.title or Path(picked.hit.path).name)
        return (
            f'<div class="ds-preview-head" data-page="{page}" data-pages="{pages}">'
            f"<b>{title}</b> · <span class='ds-page-label'>page {page} of {pages}</span> · "
            f'<a href="{link}" target="_blank" rel="noopener">open original</a></div>'
        )

    def index(
        self, folder: str, name: str, encoder: str, progress: UIProgress
    ) -> tuple[str, list[list[str]]]:
        """Index a folder under the allowed root; a summary line and the per-file rows.

        Through the same service as `docsearch index`: while another run holds the collection,
        this one is refused with a message."""
        from docsearch.indexer.collection import LEXICAL_ONLY
        from docsearch.indexer.service import index
        from docsearch.store.reads import Store
        from docsearch.store.schema import collection_name_for, validate_name

        if self.root is None:
            raise UsageError("indexing from the UI is off; start the UI with --root FOLDER")
        path = resolve_folder(self.root, folder)
        name = validate_name(name.strip() or collection_name_for(path.name))
        chosen = None if encoder == "default" else LEXICAL_ONLY
        report = index(
            path,
            settings=self.settings,
            collection=name,
            db=self.db,
            encoder=chosen,
            progress=progress,
        )
        self.registry.forget(name)
        written = f"{report.chunks_written} chunks written in {report.seconds:.1f} s"
        summary = f"{name}: {report.files_line()}; {written}"
        return summary, _report_rows(Store.open(self.db, name), path, report)


def _extracted(verified: Verified, part: str = "") -> Document:
    """The document's text as indexing extracted it (the same checked bytes, so the offsets
    stored with its chunks point into it); `part`: the attachment it is, in an e-mail."""
    from docsearch.indexer.extract import extract

    doc = extract(Path(verified.path), verified.data, display_path=verified.path)
    return next((one for one in doc.documents() if one.part == part), doc)


def _clip(start: int, end: int, length: int) -> tuple[int, int]:
    start = min(max(0, start), length)
    return start, min(max(start, end), length)


def _on_page(doc: Document, number: int, span: tuple[int, int]) -> str:
    """The part of the document's text at `span` that lies on page `number`."""
    if not 1 <= number <= len(doc.pages):
        return ""
    page = doc.pages[number - 1]
    lo, hi = _clip(span[0] - page.char_offset, span[1] - page.char_offset, len(page.text))
    return page.text[lo:hi]


def _report_rows(store: Any, folder: Path, report: Any) -> list[list[str]]:
    """One row per file under `folder`: failed first, then warnings, skipped, indexed."""
    prefix = str(folder) + os.sep
    records = {p: r for p, r in store.file_records().items() if p.startswith(prefix)}
    warned = dict(report.warnings)
    order = {"failed": 0, "warning": 1, "skipped": 2, "indexed": 3}
    rows = []
    for path, rec in records.items():
        status = "warning" if rec.status == "indexed" and path in warned else rec.status
        rows.append([status, display_path(path, str(folder)), rec.reason])
    for path in unsupported_files(folder):
        rows.append(["skipped", display_path(path, str(folder)), "unsupported file type"])
    return sorted(rows, key=lambda r: (order.get(r[0], 9), r[1]))


def status_html(ctx: UIContext, name: str | None) -> str:
    """One line about the selected collection; `data-ready` tells tests the page is wired."""

    def describe() -> str:
        if not name:
            return "No collection yet: index a folder (Index tab or `docsearch index PATH`)."
        store = ctx.retriever(name).store
        files = store.file_stats()
        kind = "hybrid search" if store.has_vectors else "lexical search only (no encoder)"
        note = f", {len(files.failed)} failed (see the Index tab)" if files.failed else ""
        return f"{name}: {files.indexed} documents{note}, {store.count_chunks()} chunks, {kind}"

    text = attempt(describe, lambda msg: f"cannot open {name}: {msg}")
    return f'<div class="ds-status" data-ready="1">{html.escape(text)}</div>'
