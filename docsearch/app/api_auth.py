"""Who may call the REST API: when keys are in force, the Bearer key check, and the gate that
answers 401 before a request's body is read.

Keys are in force unless the server was started with `serve --no-keys` (loopback only), or no
key was ever made here and the server is on loopback. Once in force they stay so for the
server's life, whatever happens to the key file: revoking the last key or deleting the file
leaves every keyed route answering 401. The gate runs in front of the API (`api.Front`), for a
request whose path and method name a keyed route: a request without a valid key is refused
there, before FastAPI parses its body, so a malformed body cannot answer 400/422 before 401.
Routes then read the key's rights (`Access`) from the request.
Not here: the key file (`keys.py`), the routes (`api.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.datastructures import Headers
from starlette.routing import Match

from docsearch.app.keys import ALL, KeyRecord

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import Scope

    from docsearch.app.keys import KeyStore

# Routes anyone may call: health, the schema and its page.
PUBLIC_PATHS = frozenset({"/api/v1/health", "/openapi.json", "/docs", "/docs/oauth2-redirect"})


class ApiError(Exception):
    """A refusal the API answers as JSON `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class KeyPolicy:
    """Whether requests need a key. `open`: `serve --no-keys`; `required`: bound beyond
    loopback, or keys were seen in force (latched: it never turns back)."""

    keys: KeyStore
    required: bool = False
    open: bool = False

    def in_force(self) -> bool:
        if self.open:
            return False
        if not self.required and self.keys.issued():
            self.required = True
        return self.required


@dataclass(frozen=True)
class Access:
    """What the request's key may do; `key` None: keys are not in force."""

    key: KeyRecord | None

    def reads(self, collection: str) -> bool:
        return self.key is None or self.key.reads(collection)

    @property
    def is_admin(self) -> bool:
        """Keys not in force, or a key for every collection that may index."""
        return self.key is None or (ALL in self.key.collections and self.key.index)

    def require(self, collection: str, index: bool = False) -> None:
        if not self.reads(collection):
            raise ApiError(403, f"this key does not give access to collection {collection!r}")
        if index and self.key is not None and not self.key.index:
            raise ApiError(403, "this key may search but not index (create one with --index)")


def authenticate(policy: KeyPolicy, headers: Headers) -> Access:
    """The request's rights, or a 401 ApiError when keys are in force and none valid is sent."""
    if not policy.in_force():
        return Access(None)
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "this server needs a key: send 'Authorization: Bearer KEY'")
    record = policy.keys.check(token.strip())
    if record is None:
        raise ApiError(401, "unknown or revoked key")
    return Access(record)


def gate(app: FastAPI, policy: KeyPolicy, scope: Scope) -> None:
    """Check the key of a request for a keyed route (path and method matched) before anything
    reads its body; its Access is left in the request's state. ApiError(401) when refused."""
    if scope["path"] in PUBLIC_PATHS:
        return
    if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
        scope.setdefault("state", {})["access"] = authenticate(policy, Headers(scope=scope))


_bearer = HTTPBearer(auto_error=False, description="a key made by `docsearch keys create`")


def access(request: Request, _: Annotated[object, Depends(_bearer)] = None) -> Access:
    """The FastAPI dependency: the rights the gate found (the bearer scheme is declared for
    the schema); checked here too when the app is called without the gate."""
    found = getattr(request.state, "access", None)
    if isinstance(found, Access):
        return found
    return authenticate(request.app.state.docsearch.policy, request.headers)


Who = Annotated[Access, Depends(access)]  # a route's `who: Who` gives the key's rights
