"""Bounded admission for `docsearch serve`: uploads and searches each get a few running slots
and a short queue; what cannot be served in time is answered 503 with Retry-After at once.

Why: the API's routes are sync and run on one shared thread pool. Without a bound, requests
that wait (uploads on the extraction child, searches on two busy cores) take every thread,
and then nothing answers, not even health. Here a request waits for its slot on the event loop,
holding no thread; a queue that is full, or a wait past its deadline, sheds the request with
503 + Retry-After, so what is admitted is served in time and the rest is told when to retry.
Uploads and searches have separate gates: a queue of uploads never delays a search.

An admitted upload is also watched for its client going away: `gone(scope)` is an event the
route hands to the extraction, which then stops (see `extract_process`).
Not here: the routes (`api.py`), the extraction itself (`indexer/extract_process.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

_GONE_KEY = "docsearch.client_gone"


class Busy(Exception):
    """No slot within the gate's bounds: answer 503."""


@dataclass
class Gate:
    """At most `running` requests of one kind inside at once; up to `waiting` more wait, each
    at most `wait_s` seconds; `retry_after`: the seconds a shed request is told to wait."""

    name: str
    running: int
    waiting: int
    wait_s: float
    retry_after: int
    queued: int = 0
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        if self._slots is None:  # made on the event loop that uses it
            self._slots = asyncio.Semaphore(self.running)
        slots = self._slots
        if slots.locked() and self.queued >= self.waiting:
            raise Busy
        self.queued += 1
        try:
            async with asyncio.timeout(self.wait_s):
                await slots.acquire()
        except TimeoutError:
            raise Busy from None
        finally:
            self.queued -= 1
        try:
            yield
        finally:
            slots.release()

    def busy_message(self) -> str:
        return (
            f"the server is busy with {self.name} ({self.running} running, {self.waiting} "
            f"waiting); retry in {self.retry_after} s"
        )


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_gates() -> dict[str, Gate]:
    """Uploads: one extraction at a time (they share one extraction child), four waiting up to
    10 s. Searches: as many running as there are cores (each search runs two threads), each
    waiting at most 1 s, so that a search answered takes about 2 s at most under load; the
    deadline sheds, the queue's length (16 a core) only bounds what waits (a queue of 4 a core
    shed 16% of searches that the deadline would have let through: benchmarks/results/serve.md)."""
    cores = _cores()
    return {
        "upload": Gate("uploads", running=1, waiting=4, wait_s=10.0, retry_after=10),
        "search": Gate("searches", running=cores, waiting=16 * cores, wait_s=1.0, retry_after=1),
    }


def gone(scope: Scope) -> threading.Event:
    """Set once the client of this request closed its connection (admitted requests only;
    a fresh, never-set event otherwise)."""
    event = scope.get(_GONE_KEY)
    return event if isinstance(event, threading.Event) else threading.Event()


class Admission:
    """ASGI middleware: each request `classify` names a gate for (by method and path) waits for
    a slot in it or is answered 503 with Retry-After; other requests pass straight through."""

    def __init__(
        self, app: ASGIApp, gates: dict[str, Gate], classify: Callable[[str, str], str | None]
    ) -> None:
        self.app, self.gates, self.classify = app, gates, classify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = self.classify(scope["method"], scope["path"]) if scope["type"] == "http" else None
        gate = self.gates.get(kind) if kind else None
        if gate is None:
            await self.app(scope, receive, send)
            return
        try:
            async with gate.admitted():
                await _watched(self.app, scope, receive, send)
        except Busy:
            await _busy(gate, send)


async def _watched(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run the request; once its body is read, wait for the client to go, and say so."""
    event = threading.Event()
    scope[_GONE_KEY] = event
    body_read = asyncio.Event()

    async def reading() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            body_read.set()
        if message["type"] == "http.disconnect":
            event.set()
        return message

    async def watch() -> None:
        await body_read.wait()
        while not event.is_set():
            message = await receive()  # after the body: only the disconnect comes
            if message["type"] == "http.disconnect":
                event.set()

    watcher = asyncio.create_task(watch())
    try:
        await app(scope, reading, send)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _busy(gate: Gate, send: Send) -> None:
    body = json.dumps({"error": gate.busy_message()}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(gate.retry_after).encode()),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_UPLOAD = re.compile(r"^/api/v1/collections/[^/]+/similar/file$")
_SEARCH = re.compile(r"^/api/v1/collections/[^/]+/(search|similar)$")


def api_kind(method: str, path: str) -> str | None:
    """The gate of an API request: uploads of query documents, searches (and similar by id)."""
    if method != "POST":
        return None
    if _UPLOAD.match(path):
        return "upload"
    return "search" if _SEARCH.match(path) else None
