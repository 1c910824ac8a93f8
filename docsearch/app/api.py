"""The REST API of `docsearch serve` (FastAPI): search, documents, collections, index jobs, health.

Routes live under `/api/v1`; the schema is `/openapi.json`, its page `/docs`, both built from
`api_models.py` (answer models, path patterns, each route's errors). Everything but health needs
`Authorization: Bearer KEY` once keys are in force (`api_auth.py`: checked in front of the app,
before the body is read); a key reads only its collections, and starts index jobs only if made
with `--index`, for its collection's own folder (`api_folders.py`). Search answers with `Retriever.search_result` (the mode that answered, the rule,
`Hit.as_dict()` for each hit); similar (more like this) with `Retriever.similar_result`, for a document of the collection by doc id or an uploaded file (extracted
in the extraction child, up to MAX_UPLOAD_BYTES); documents are read through the UI's
`DocumentGuard`; index jobs run the indexing service in a thread, one per
collection. Every error is JSON `{"error": "..."}` with a 4xx status (a 500 only for a bug,
without its traceback) and names no server path; request bodies, k and the query are bounded.
`build_app` puts the API in front of the UI app (`web/ui.make_app`), which gets every other path,
behind bounded admission for searches and uploads (`admission.py`: 503 + Retry-After beyond it).
Collections are opened through the process's `docsearch.registry.CollectionRegistry`.
Not here: keys (`keys.py`), the command (`serve_cmd.py`), indexing (`docsearch.indexer.service`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import InitVar, asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from docsearch import __version__
from docsearch.app import api_models as models
from docsearch.app.admission import Admission, api_kind, default_gates
from docsearch.app.api_auth import Access, ApiError, KeyPolicy, Who, gate
from docsearch.app.api_models import (
    KEYED,
    DocId,
    IndexRequest,
    JobId,
    Name,
    PageNumber,
    SearchRequest,
    SimilarRequest,
    errors,
)
from docsearch.app.keys import KeyStore
from docsearch.config import Settings
from docsearch.errors import (
    CollectionNotFoundError,
    DocsearchError,
    EncoderUnavailableError,
    ExtractionError,
    UsageError,
)
from docsearch.registry import CollectionRegistry
from docsearch.results import SearchResult
from docsearch.retriever import MAX_K, Retriever

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from docsearch.app.web.files import DocumentGuard
    from docsearch.indexer.extract import Document
    from docsearch.similar import InCollection
    from docsearch.store.reads import Store

log = logging.getLogger(__name__)

API = "/api/v1"
MAX_BODY_BYTES = 256 * 1024  # a longest query, escaped in JSON (\uXXXX: 6 bytes a character), fits
# A query document uploaded to .../similar/file: long judgments and contracts as PDFs are a few
# MB; the multipart envelope around it is allowed on top.
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
UPLOAD_ENVELOPE_BYTES = 64 * 1024
UPLOAD_SECONDS = 60.0  # one upload's extraction, all its pages (at most the settings' limit)
KEPT_JOBS = 100  # finished jobs remembered for their results
_DOC_ID = re.compile(r"^[0-9a-f]{16}$")
PASSAGE_COLUMNS = ["id", "ordinal", "page_start", "page_end", "char_start", "char_end"]


def _error(
    status: int, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    headers = {**(headers or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


# ---------------------------------------------------------------------------------------------
# Index jobs


@dataclass
class IndexJob:
    """One index run in a thread; also its progress sink (the counters the API reports)."""

    collection: str
    folder: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "running"  # then done or failed
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    files_total: int = 0
    files_done: int = 0
    chunks_embedded: int = 0
    tokens_embedded: int = 0
    result: dict[str, Any] | None = None  # the IndexReport
    error: str | None = None

    def start(self, files: int) -> None:
        self.files_total = files

    def file_done(self, path: str) -> None:
        self.files_done += 1

    def embedded(self, chunks: int, tokens: int) -> None:
        self.chunks_embedded += chunks
        self.tokens_embedded += tokens

    def planned_chunks(self, chunks: int) -> None: ...

    def run(self, settings: Settings) -> None:
        from docsearch.indexer import service

        try:
            report = service.index(
                self.folder, settings=settings, collection=self.collection, progress=self
            )
            self.result = asdict(report) | {"files": report.files_line()}
            self.state = "done"
        except DocsearchError as exc:
            self.error, self.state = str(exc), "failed"
        except Exception:  # a bug: logged here, one line in the job
            log.exception("index job %s failed", self.id)
            self.error, self.state = "internal error; see the server log", "failed"
        finally:
            self.finished_at = time.time()


class Jobs:
    """The server's index jobs: at most one running per collection."""

    def __init__(self) -> None:
        self._jobs: dict[str, IndexJob] = {}
        self._lock = threading.Lock()

    def start(self, collection: str, folder: Path, settings: Settings) -> IndexJob:
        from docsearch.store.database import Database

        with self._lock:
            if any(j.collection == collection and j.state == "running" for j in self.all()):
                raise ApiError(409, f"collection {collection!r} is already being indexed here")
            try:
                with Database(settings.db).writer_lock(collection):  # refused now, not later
                    pass
            except UsageError as exc:
                raise ApiError(409, str(exc)) from None
            job = IndexJob(collection, str(folder))
            finished = [j.id for j in self.all() if j.state != "running"]
            for old in finished[: max(0, len(self._jobs) - KEPT_JOBS)]:
                del self._jobs[old]
            self._jobs[job.id] = job
        # A daemon: stopping the server stops the run, which resumes on the next one.
        threading.Thread(target=job.run, args=(settings,), daemon=True).start()
        return job

    def all(self) -> list[IndexJob]:
        return list(self._jobs.values())

    def get(self, job_id: str) -> IndexJob | None:
        return self._jobs.get(job_id)


# ---------------------------------------------------------------------------------------------
# The server's state


@dataclass
class ServerState:
    settings: Settings
    keys: KeyStore
    require_keys: bool = False  # bound beyond loopback: keys even if none exist
    root: Path | None = None  # folders under it may be indexed through the API
    no_keys: bool = False  # `serve --no-keys`: open, whatever keys exist (loopback only)
    jobs: Jobs = field(default_factory=Jobs)
    # The process's open collections; `serve` gives the UI it mounts the same one.
    shared: InitVar[CollectionRegistry | None] = None

    def __post_init__(self, shared: CollectionRegistry | None) -> None:
        self.policy = KeyPolicy(self.keys, self.require_keys, self.no_keys)
        self.registry = shared or CollectionRegistry(self.settings)

    def retriever(self, name: str) -> Retriever:
        """The collection's retriever (`CollectionRegistry.retriever`: reopened once the
        collection was rebuilt or dropped, its encoder loaded once in the process)."""
        return self.registry.retriever(name)

    def guard(self, name: str) -> DocumentGuard:
        from docsearch.app.web.files import DocumentGuard

        return DocumentGuard(self.retriever(name).store, [self.root] if self.root else [])

    def index_folder(self, name: str, folder: str | None, who: Access) -> Path:
        """The folder a job indexes: the collection's own, or one under `root` that the
        collection's binding and the key allow (`api_folders`)."""
        from docsearch.app.api_folders import check_job_folder, requested_folder

        if folder is None:
            try:
                source = self.retriever(name).store.meta.source
            except CollectionNotFoundError:
                raise ApiError(404, f"no collection {name!r} yet: say which folder") from None
            if not source:
                raise ApiError(409, f"collection {name!r} records no folder: say which")
            chosen = Path(source)
        else:
            chosen = requested_folder(self.root, folder)
        check_job_folder(self.settings.db, name, chosen, who)
        return chosen


def state_of(request: Request) -> ServerState:
    return request.app.state.docsearch


# ---------------------------------------------------------------------------------------------
# Requests


def _job_view(job: IndexJob, state: ServerState) -> dict[str, Any]:
    error = without_server_paths(job.error, state) if job.error else job.error
    return asdict(job) | {"url": f"{API}/index-jobs/{job.id}", "error": error}


def _document_rows(state: ServerState, name: str, doc_id: str) -> list[dict[str, Any]]:
    if not _DOC_ID.match(doc_id):
        raise ApiError(404, "no such document: ids are 16 hex digits, as in search hits")
    store = state.retriever(name).store
    columns = [*PASSAGE_COLUMNS, "path", "part", "title", "text"]
    rows = store.rows(f"doc_id = '{doc_id}'", columns=columns)
    if not rows:
        raise ApiError(404, f"no document {doc_id} in collection {name!r}")
    return sorted(rows, key=lambda r: r["ordinal"])


def _document_path(store: Store, name: str, doc_id: str) -> tuple[str, str]:
    """The path of a document of the collection and its part (an attachment's chain of names,
    "" for the file's own document), read from its first chunk; 404 without."""
    if not _DOC_ID.match(doc_id):
        raise ApiError(404, "no such document: ids are 16 hex digits, as in search hits")
    rows = store.rows(f"doc_id = '{doc_id}' AND ordinal = 0")  # every column: "part" is newer
    if not rows:
        raise ApiError(404, f"no document {doc_id} in collection {name!r}")
    return str(rows[0]["path"]), str(rows[0].get("part") or "")


def _uploaded(state: ServerState, upload: UploadFile, request: Request) -> Document:
    """An uploaded query document, extracted as indexing extracts a file (in the uploads' own
    extraction child, under the memory limit and one time budget for all its pages, stopped if
    the client goes); a 400 saying why it cannot be read."""
    from docsearch.app.admission import gone
    from docsearch.indexer.extract_process import Budget, extract_guarded
    from docsearch.indexer.service import limits_of

    name = Path(upload.filename or "").name  # only its name: it is never a path on this server
    if not name or name in (".", ".."):
        raise ApiError(400, "the uploaded file needs a name, with its type's extension (.pdf...)")
    data = upload.file.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise ApiError(413, f"uploaded file over {MAX_UPLOAD_BYTES:,} bytes")
    if not data.strip():
        raise ApiError(400, f"the uploaded file {name} is empty")
    limits = limits_of(state.settings)
    seconds = min(limits.seconds, UPLOAD_SECONDS) if limits.seconds > 0 else UPLOAD_SECONDS
    limits, budget = replace(limits, seconds=seconds), Budget(seconds, gone(request.scope))
    try:
        return extract_guarded(Path(name), data, name, limits, budget=budget, child="uploads")
    except ExtractionError as exc:
        raise ApiError(400, f"cannot read the uploaded file {name}: {exc}") from None


def _similar_answer(
    state: ServerState,
    name: str,
    source: Document | InCollection,
    query: dict[str, Any],
    k: int,
    mode: str | None,
) -> dict[str, Any]:
    started = time.perf_counter()
    result = state.retriever(name).similar_result(source, k=k, mode=mode)
    return _answer(name, result, time.perf_counter() - started) | {"query": query}


def _answer(name: str, result: SearchResult[Any], seconds: float) -> dict[str, Any]:
    """A search's or a similar search's answer: how it was answered (`docsearch.results`)
    and its hits."""
    return {
        "collection": name,
        "mode": result.mode,
        "asked_mode": result.asked,
        "rule": result.rule,
        "fallback": result.fallback,
        "seconds": seconds,
        "hits": [hit.as_dict() for hit in result.hits],
    }


def add_routes(app: FastAPI) -> None:
    @app.get(f"{API}/health", response_model=models.Health)
    async def health() -> dict[str, Any]:  # on the event loop: never behind the thread pool
        return {"status": "ok", "version": __version__}

    @app.get(f"{API}/collections", response_model=list[models.Collection], responses=errors(401))
    def collections(request: Request, who: Who) -> list[dict[str, Any]]:
        from docsearch.registry import collection_info
        from docsearch.store.database import Database

        db = state_of(request).settings.db
        names = Database(db).list_collections()
        return [collection_info(db, n) for n in names if who.reads(n)]

    @app.get(
        f"{API}/collections/{{name}}", response_model=models.Collection, responses=errors(*KEYED)
    )
    def collection(name: Name, request: Request, who: Who) -> dict[str, Any]:
        who.require(name)
        return state_of(request).registry.collection_info(name)

    @app.post(
        f"{API}/collections/{{name}}/search",
        response_model=models.SearchAnswer,
        responses=errors(400, *KEYED, 413, 503),
    )
    def search(name: Name, body: SearchRequest, request: Request, who: Who) -> dict[str, Any]:
        who.require(name)
        retriever = state_of(request).retriever(name)
        started = time.perf_counter()
        result = retriever.search_result(**body.model_dump())
        return _answer(name, result, time.perf_counter() - started)

    @app.post(
        f"{API}/collections/{{name}}/similar",
        response_model=models.SimilarAnswer,
        responses=errors(400, *KEYED, 413, 503),
    )
    def similar(name: Name, body: SimilarRequest, request: Request, who: Who) -> dict[str, Any]:
        from docsearch.similar import InCollection

        who.require(name)
        state = state_of(request)
        path = _document_rows(state, name, body.doc_id)[0]["path"]  # 404 unless it is held
        query = {"doc_id": body.doc_id, "path": path}
        return _similar_answer(state, name, InCollection(body.doc_id), query, body.k, body.mode)

    @app.post(
        f"{API}/collections/{{name}}/similar/file",
        response_model=models.SimilarAnswer,
        responses=errors(400, *KEYED, 413, 503),
    )
    def similar_file(
        name: Name,
        request: Request,
        who: Who,
        file: Annotated[UploadFile, File(description="the query document, any supported format")],
        k: Annotated[int, Form(ge=1, le=MAX_K)] = 10,
        mode: Annotated[models.FormMode, Form(description="'': the collection's default")] = "",
    ) -> dict[str, Any]:
        who.require(name)
        state = state_of(request)
        doc = _uploaded(state, file, request)
        query = {"doc_id": None, "path": doc.path}
        return _similar_answer(state, name, doc, query, k, mode or None)

    @app.get(
        f"{API}/collections/{{name}}/documents/{{doc_id}}",
        response_model=models.Document,
        responses=errors(*KEYED),
    )
    def document(name: Name, doc_id: DocId, request: Request, who: Who) -> dict[str, Any]:
        who.require(name)
        state = state_of(request)
        rows = _document_rows(state, name, doc_id)
        record = state.retriever(name).store.file_record(rows[0]["path"])
        passages = [{k: r[k] for k in (*PASSAGE_COLUMNS, "text")} for r in rows]
        return {
            "doc_id": doc_id,
            "path": rows[0]["path"],
            "part": rows[0].get("part", ""),  # the attachment it is, in an e-mail
            "title": rows[0]["title"],
            "pages": max(r["page_end"] for r in rows),
            "record": asdict(record) if record else None,
            "passages": passages,
        }

    @app.get(
        f"{API}/collections/{{name}}/documents/{{doc_id}}/pages/{{number}}",
        response_model=models.Page,
        responses=errors(*KEYED, 503),
    )
    def page(
        name: Name, doc_id: DocId, number: PageNumber, request: Request, who: Who
    ) -> dict[str, Any]:
        from docsearch.indexer.pages import PageNotFound, page_text

        who.require(name)
        store = state_of(request).retriever(name).store
        path, part = _document_path(store, name, doc_id)
        try:  # from the stored chunks: the document is not extracted again
            text = page_text(store, path, doc_id, number, part)
        except PageNotFound as exc:
            raise ApiError(404, str(exc)) from None
        return {"doc_id": doc_id, "number": number, "text": text}

    @app.get(
        f"{API}/collections/{{name}}/documents/{{doc_id}}/file",
        response_class=Response,
        responses={200: {"description": "the original file"}, **errors(*KEYED)},
    )
    def original(name: Name, doc_id: DocId, request: Request, who: Who) -> Response:
        from docsearch.app.web.files import file_headers

        who.require(name)
        state = state_of(request)
        verified = state.guard(name).open(_document_rows(state, name, doc_id)[0]["path"])
        media, headers = file_headers(verified)
        return Response(verified.data, media_type=media, headers=headers)

    @app.post(
        f"{API}/collections/{{name}}/index-jobs",
        status_code=202,
        response_model=models.IndexJob,
        responses=errors(400, *KEYED, 409, 413, 503),
    )
    def start_job(
        name: Name, request: Request, who: Who, body: IndexRequest | None = None
    ) -> dict[str, Any]:
        from docsearch.store.schema import validate_name

        who.require(validate_name(name), index=True)
        state = state_of(request)
        folder = state.index_folder(name, (body or IndexRequest()).folder, who)
        return _job_view(state.jobs.start(name, folder, state.settings), state)

    @app.get(
        f"{API}/index-jobs/{{job_id}}", response_model=models.IndexJob, responses=errors(*KEYED)
    )
    def job(job_id: JobId, request: Request, who: Who) -> dict[str, Any]:
        state = state_of(request)
        found = state.jobs.get(job_id)
        if found is None or not who.reads(found.collection):
            raise ApiError(404, f"no index job {job_id!r}")
        return _job_view(found, state)


def without_server_paths(message: str, state: ServerState) -> str:
    """`message` with the server's database, root and data folders put as words: a caller
    learns nothing of the server's layout from an error."""
    from docsearch.config import data_home

    folders = {"the database": state.settings.db, "the data folder": str(data_home())}
    folders |= {"the root": str(state.root)} if state.root else {}
    for word, folder in sorted(folders.items(), key=lambda item: -len(item[1])):
        message = message.replace(folder, f"<{word}>") if folder else message
    return message


def add_error_handlers(app: FastAPI) -> None:
    """Every failure as JSON; domain errors by kind, validation errors without their input."""
    from docsearch.app.web.files import FileRefusedError

    def status_for(exc: DocsearchError) -> int:
        if isinstance(exc, FileRefusedError):
            return 403
        return 503 if isinstance(exc, EncoderUnavailableError) else 400

    async def api_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, ApiError):
            return _error(exc.status, str(exc))
        if isinstance(exc, CollectionNotFoundError):  # its text names the database and more
            return _error(404, f"no collection {request.path_params.get('name', '')!r}")
        if isinstance(exc, DocsearchError):
            return _error(status_for(exc), without_server_paths(str(exc), state_of(request)))
        if isinstance(exc, RequestValidationError):
            details = [{"loc": e["loc"], "msg": e["msg"]} for e in exc.errors()]  # no inputs
            where = ".".join(str(p) for p in details[0]["loc"]) if details else "request"
            return _error(
                422, f"invalid {where}: {details[0]['msg'] if details else ''}", details=details
            )
        if isinstance(exc, HTTPException):  # the router's 404 and 405 (with its Allow header)
            message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
            return _error(exc.status_code, message, headers=exc.headers)
        log.error("unexpected error", exc_info=exc)
        return _error(500, "internal error; see the server log")

    for kind in (ApiError, DocsearchError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, api_error)


# ---------------------------------------------------------------------------------------------
# The ASGI app


class _TooLarge(Exception):
    pass


_UPLOAD_PATH = re.compile(rf"^{re.escape(API)}/collections/[^/]+/similar/file$")


def body_limit(path: str) -> int:
    """The most bytes a request body to `path` may have: an uploaded query document's route
    takes one file, every other route a small JSON body."""
    if _UPLOAD_PATH.match(path):
        return MAX_UPLOAD_BYTES + UPLOAD_ENVELOPE_BYTES
    return MAX_BODY_BYTES


class Front:
    """In front of everything: bodies over MAX_BODY_BYTES are refused (413, whether declared or
    streamed); API paths go to the API, the rest (and the lifespan) to the UI, if mounted. A
    request for a keyed API route is refused 401 here without a valid key (`api_auth.gate`),
    before admission (`admission.py`) queues it, so requests without a key take no place."""

    def __init__(self, api: FastAPI, ui: ASGIApp | None) -> None:
        self.api, self.ui = api, ui
        self.admitted: ASGIApp = Admission(api, default_gates(), api_kind)

    @staticmethod
    def is_api(path: str) -> bool:
        return path.startswith(API + "/") or path in ("/openapi.json", "/docs", "/api")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await (self.ui or self.admitted)(scope, receive, send)
            return
        target = self.admitted if self.is_api(scope["path"]) or self.ui is None else self.ui
        limit = body_limit(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _error(413, f"request body over {limit:,} bytes")(scope, receive, send)
            return
        if target is self.admitted:
            try:  # the key first: a request without one never gets its body read
                gate(self.api, self.api.state.docsearch.policy, scope)
            except ApiError as exc:
                await _error(exc.status, str(exc))(scope, receive, send)
                return
        seen, started, too_large = 0, False, False
        refusal = _error(413, f"request body over {limit:,} bytes")

        async def counted() -> Any:
            nonlocal seen, too_large
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                too_large = True
                raise _TooLarge
            return message

        async def watched(message: Any) -> None:
            nonlocal started
            if too_large:  # the app answers a body it could not finish reading (chunked): a 413
                if not started and message["type"] == "http.response.start":
                    started = True
                    await refusal(scope, receive, send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await target(scope, counted, watched)
        except _TooLarge:
            if not started:
                await refusal(scope, receive, send)


def build_app(state: ServerState, ui: ASGIApp | None = None) -> Front:
    """The API, with `ui` (the gradio app of `web.ui.make_app`) for every other path."""
    api = FastAPI(
        title="docsearch",
        version=__version__,
        description="Search long documents: hybrid search, documents, collections, index jobs.",
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    api.state.docsearch = state
    add_routes(api)
    add_error_handlers(api)
    return Front(api, ui)
