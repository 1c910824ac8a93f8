"""The safe document server: what the UI may read from disk, and how it shows it.

`DocumentGuard.open(path)` hands out a document's bytes only for a path recorded as indexed in the
collection's `files` table, spelled exactly as recorded (absolute, no `..`), whose real location
(symlinks followed) stays inside a trusted root, and whose bytes still hash to the recorded sha256.
The bytes are read once and checked before use, so a file swapped for a symlink after indexing is
refused rather than served. `resolve_folder` is the same idea for indexing from the UI: only
folders under the allowed root. `add_file_route` serves originals over HTTP through the guard;
`pdf_page_html` and `text_preview_html` render a preview (a PDF page as an inline image with the
query terms boxed, a text document with the passage marked) from checked bytes.
Not here: layout and events (`ui.py`); search (`docsearch.retriever`).
"""

from __future__ import annotations

import base64
import html
import io
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docsearch import paths
from docsearch.errors import UsageError
from docsearch.indexer.plan import DEFAULT_EXCLUDES, sha256_bytes
from docsearch.snippets import mark_spans
from docsearch.store.reads import Store
from docsearch.store.schema import FileRecord
from docsearch.text import content_stems, identifiers

MAX_DOCUMENT_BYTES = 512 * 1024 * 1024  # larger files are not previewed or served
PREVIEW_WIDTH_PX = 900  # rendered PDF page width
TEXT_CONTEXT_CHARS = 20_000  # text shown on each side of a passage in a text preview
MEDIA_TYPES = {".pdf": "application/pdf"}  # everything else is served as plain text or a download
DOWNLOAD = "application/octet-stream"
TEXT_SUFFIXES = {".txt", ".text", ".md", ".markdown", ".rst", ".html", ".htm"}


class FileRefusedError(UsageError):
    """A request for a file the UI must not serve; the message says why, never the contents."""


@dataclass(frozen=True)
class Verified:
    """A document's bytes, checked against its record in the index."""

    path: str
    data: bytes

    @property
    def suffix(self) -> str:
        return Path(self.path).suffix.lower()


def is_within(path: Path, root: Path) -> bool:
    """True if `path` is `root` or below it (both already resolved)."""
    return path == root or root in path.parents


def check_spelling(requested: object) -> str:
    """The request as a clean absolute path string, or FileRefusedError."""
    if not isinstance(requested, str) or not requested:
        raise FileRefusedError("no file requested")
    if "\x00" in requested or len(requested) > 4096:
        raise FileRefusedError("malformed path")
    if not os.path.isabs(requested):
        raise FileRefusedError("only absolute paths recorded in the index are served")
    if ".." in Path(requested).parts:
        raise FileRefusedError("'..' is not allowed in a path")
    return requested


class DocumentGuard:
    """Hands out the bytes of files recorded in one collection, and nothing else."""

    def __init__(self, store: Store, roots: Sequence[Path] = ()) -> None:
        self.store = store
        # The folders documents may live in: `roots` and the collection's source folder.
        self.roots = [Path(p).resolve() for p in roots]
        if store.meta.source:
            source = Path(store.meta.source)
            self.roots.append((source if not source.suffix else source.parent).resolve())

    def record(self, requested: object) -> FileRecord:
        path = check_spelling(requested)
        record = self.store.file_record(path)
        if record is None:
            raise FileRefusedError(f"not a document of collection {self.store.name!r}")
        if record.status != "indexed":
            raise FileRefusedError(f"not indexed ({record.reason or record.status})")
        return record

    def open(self, requested: object) -> Verified:
        """The bytes of an indexed document, checked; FileRefusedError otherwise."""
        record = self.record(requested)
        real = self._real_location(Path(paths.real(record.path)))  # stored names are escaped
        try:
            with open(real, "rb") as handle:
                data = handle.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise FileRefusedError(f"cannot read the file ({exc.strerror or exc})") from None
        if len(data) > MAX_DOCUMENT_BYTES:
            raise FileRefusedError("file too large to preview")
        if sha256_bytes(data) != record.sha256:
            raise FileRefusedError("the file changed since it was indexed; re-index to preview it")
        return Verified(record.path, data)

    def _real_location(self, path: Path) -> Path:
        """Where `path` really is; refused if a symlink leads outside its trusted root."""
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise FileRefusedError("the file is gone; re-index the collection") from None
        roots = [r for r in self.roots if is_within(path.absolute(), r)]
        if not roots:  # indexed from elsewhere: it may not leave its own folder
            roots = [path.parent.resolve()]
        if not any(is_within(real, r) for r in roots):
            raise FileRefusedError("the file is a link to a place outside the indexed folder")
        if not real.is_file():
            raise FileRefusedError("not a regular file")
        return real


# ---------------------------------------------------------------------------------------------
# Folders under the allowed root (indexing from the UI)


def resolve_folder(root: Path, requested: str) -> Path:
    """`requested` (relative to `root`, or absolute) as a real folder inside `root`."""
    if "\x00" in requested:
        raise FileRefusedError("malformed path")
    base = root.resolve()
    candidate = Path(requested.strip() or ".")
    folder = (candidate if candidate.is_absolute() else base / candidate).resolve()
    if not is_within(folder, base):
        raise FileRefusedError(f"only folders under {base} can be indexed from the UI")
    if not folder.is_dir():
        raise FileRefusedError(f"no such folder under {base}: {requested}")
    return folder


def _hidden(name: str) -> bool:
    return name.startswith(".") or name in ("__pycache__", "node_modules")


def list_folders(root: Path, max_depth: int = 3, limit: int = 500) -> list[str]:
    """Folders under `root` (relative, '.' first) for the folder picker; links out are left out."""
    base = root.resolve()
    found = ["."]
    for dirpath, dirnames, _ in os.walk(base):
        rel = Path(dirpath).relative_to(base)
        dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
        if len(rel.parts) >= max_depth:
            dirnames[:] = []
        for name in dirnames:
            if is_within((Path(dirpath) / name).resolve(), base):
                found.append((rel / name).as_posix())
        if len(found) >= limit:
            return found[:limit]
    return found


def unsupported_files(folder: Path, limit: int = 200) -> list[str]:
    """Files the indexer skips for their type (hidden files aside), for the per-file report."""
    from docsearch.indexer.extract import supported

    skipped: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not _hidden(d)]
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not _hidden(name) and not supported(path) and name not in DEFAULT_EXCLUDES:
                skipped.append(paths.stored(str(path)))
                if len(skipped) >= limit:
                    return skipped
    return skipped


# ---------------------------------------------------------------------------------------------
# Serving originals over HTTP


def file_headers(verified: Verified) -> tuple[str, dict[str, str]]:
    """Media type and headers: PDFs inline, text as text/plain, anything else as a download."""
    name = Path(verified.path).name.replace('"', "")
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
    media = MEDIA_TYPES.get(verified.suffix, DOWNLOAD)
    if verified.suffix in TEXT_SUFFIXES:  # never text/html: an indexed page must not run
        media = "text/plain; charset=utf-8"
        headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    disposition = "attachment" if media == DOWNLOAD else "inline"
    headers["Content-Disposition"] = f'{disposition}; filename="{name}"'
    return media, headers


def add_file_route(app: Any, guard_for: Callable[[str], DocumentGuard]) -> None:
    """GET /docsearch/file?collection=NAME&path=PATH: an indexed original, or 403/404."""
    from fastapi import Response

    @app.get("/docsearch/file")
    def serve_file(collection: str = "", path: str = "") -> Response:
        try:
            verified = guard_for(collection).open(path)
        except FileRefusedError as exc:
            return Response(f"refused: {exc}\n", status_code=403, media_type="text/plain")
        except UsageError as exc:  # unknown or invalid collection
            return Response(f"not found: {exc}\n", status_code=404, media_type="text/plain")
        media, headers = file_headers(verified)
        return Response(verified.data, media_type=media, headers=headers)


def file_url(collection: str, path: str, page: int | None = None) -> str:
    """The (relative) link to an original through the guarded route."""
    from urllib.parse import urlencode

    anchor = f"#page={page}" if page and path.lower().endswith(".pdf") else ""
    return "docsearch/file?" + urlencode({"collection": collection, "path": path}) + anchor


# ---------------------------------------------------------------------------------------------
# Previews


def passage_span(text: str, passage: str) -> tuple[int, int] | None:
    """Where `passage` occurs in `text`, matching its words in order and ignoring the spacing
    and punctuation between them: the rendered PDF page's text layer (pdfium) differs from
    the indexed one (pypdf) in quotes, hyphens and line breaks, so offsets do not carry over."""
    words = re.findall(r"\w+", passage)
    for size in (len(words), 12):  # the whole passage, else its opening words
        if not words[:size]:
            return None
        pattern = r"\W*".join(re.escape(w) for w in words[:size])
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return match.span()
    return None


def _percent_boxes(textpage: Any, span: tuple[int, int], size: tuple[float, float]) -> list[str]:
    """CSS boxes (percent of the page) covering characters span[0]:span[1] of a pdfium page."""
    width, height = size
    boxes = []
    for i in range(textpage.count_rects(span[0], span[1] - span[0])):
        left, bottom, right, top = textpage.get_rect(i)
        boxes.append(
            f"left:{100 * left / width:.2f}%;top:{100 * (height - top) / height:.2f}%;"
            f"width:{100 * (right - left) / width:.2f}%;height:{100 * (top - bottom) / height:.2f}%"
        )
    return boxes


def _page_image(page: Any) -> str:
    """The page rendered as a PNG data URI (no file is written, so nothing else is exposed)."""
    width, _ = page.get_size()
    image = page.render(scale=PREVIEW_WIDTH_PX / max(width, 1.0)).to_pil()
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _open_pdf(data: bytes) -> Any:
    """The PDF as a pdfium document; use it as a context manager, which closes it."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    return pdfium.PdfDocument(data)


def pdf_page_count(data: bytes) -> int:
    with _open_pdf(data) as pdf:
        return len(pdf)


def pdf_page_html(data: bytes, number: int, query: str, passage: str = "") -> str:
    """Page `number` as an image with the query terms and `passage` (where found) boxed."""
    with _open_pdf(data) as pdf:
        number = min(max(1, number), len(pdf))
        page = pdf[number - 1]
        textpage = page.get_textpage()
        text, size = textpage.get_text_range(), page.get_size()
        terms = mark_spans(text, content_stems(query), identifiers(query))
        found = passage_span(text, passage) if passage else None
        boxes = [
            f'<div class="ds-box ds-passage" style="{b}"></div>'
            for b in (_percent_boxes(textpage, found, size) if found else [])
        ]
        boxes += [
            f'<div class="ds-box ds-hl" style="{b}"></div>'
            for s in terms
            for b in _percent_boxes(textpage, s, size)
        ]
        return (
            f'<div class="ds-page" data-page="{number}" data-pages="{len(pdf)}">'
            f'<img src="{_page_image(page)}" alt="page {number}" class="ds-page-img"/>'
            f"{''.join(boxes)}</div>"
        )


def marked_html(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """`text` HTML-escaped, with `spans` wrapped in <mark>."""
    out, last = [], 0
    for start, end in spans:
        out += [html.escape(text[last:start]), "<mark>", html.escape(text[start:end]), "</mark>"]
        last = end
    out.append(html.escape(text[last:]))
    return "".join(out)


def text_preview_html(
    text: str,
    span: tuple[int, int],
    passage: tuple[int, int],
    query: str,
    page_starts: Sequence[tuple[int, int]] = (),
) -> str:
    """Text around `span` (the hit's chunk) with `passage` and the query terms in it marked.

    `page_starts` lists (page number, character offset) so page breaks show in the text.
    """
    lo, hi = max(0, span[0] - TEXT_CONTEXT_CHARS), min(len(text), span[1] + TEXT_CONTEXT_CHARS)
    terms = mark_spans(text[passage[0] : passage[1]], content_stems(query), identifiers(query))
    # (offset, order, tag): at one offset, closing tags (inner first) come before opening ones.
    events = [
        (span[0], 4, '<span class="ds-chunk">'),
        (span[1], 2, "</span>"),
        (passage[0], 5, '<span id="ds-passage" class="ds-passage">'),
        (passage[1], 1, "</span>"),
    ]
    events += [(passage[0] + a, 6, "<mark>") for a, _ in terms]
    events += [(passage[0] + b, 0, "</mark>") for _, b in terms]
    events += [
        (offset, 3, f'<span class="ds-pagemark" data-page="{n}">page {n}</span>')
        for n, offset in page_starts
        if n > 1 and lo <= offset < hi
    ]
    out = [f'<p class="ds-cut">… {lo:,} characters before</p>' if lo else ""]
    last = lo
    for offset, _, tag in sorted(events):
        out += [html.escape(text[last:offset]), tag]
        last = offset
    out.append(html.escape(text[last:hi]))
    if hi < len(text):
        out.append(f'<p class="ds-cut">… {len(text) - hi:,} characters after</p>')
    return f'<div class="ds-text">{"".join(out)}</div>'
