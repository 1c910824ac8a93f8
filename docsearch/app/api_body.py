"""Reading a request body of unknown length (chunked) up front, within a byte limit.

A body sent without Content-Length is read whole before the app sees it, so one over the limit
is answered 413 rather than failing inside FastAPI's body parsing (a 400 that says nothing);
the app then gets the same messages replayed. Not here: the limits (`api.body_limit`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import Message, Receive


async def buffered_body(receive: Receive, limit: int) -> Receive | None:
    """A `receive` that replays the whole body, read now; None once it passes `limit` bytes."""
    messages: list[Message] = []
    seen = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":  # the client went: the app will see that too
            break
        seen += len(message.get("body", b""))
        if seen > limit:
            return None
        if not message.get("more_body", False):
            break

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay
