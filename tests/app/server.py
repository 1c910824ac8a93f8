"""A real `docsearch serve` on a free localhost port, and a client that sends bytes as given."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import REPO
from tests.ui.browser import _wait_until_up, free_port, running


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type", "").startswith("application/json"), self.body[:200]
        return json.loads(self.body)


def expect_error(reply: Reply, status: int) -> str:
    """The JSON error message of a reply that must have `status` (a non-empty string)."""
    assert reply.status == status, (reply.status, reply.body[:300])
    body = reply.json()
    assert isinstance(body["error"], str) and body["error"]
    return str(body["error"])


@dataclass
class Client:
    host: str
    port: int
    key: str | None = None

    def call(self, method: str, path: str, body: Any = None, key: str | None = "default") -> Reply:
        """`path` goes out unnormalised; `body` is JSON unless bytes; `key` None sends none."""
        key = self.key if key == "default" else key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, raw)
        finally:
            connection.close()

    def get(self, path: str, **kw: Any) -> Reply:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.call("POST", path, body, **kw)


@contextmanager
def served(env: dict[str, str], *args: str, log: Path | None = None) -> Iterator[Client]:
    """`docsearch serve ARGS` with `env` (DOCSEARCH_DB, DOCSEARCH_KEYS...) until the block ends."""
    port = free_port()
    full = {**os.environ, "PYTHONPATH": str(REPO), "DOCSEARCH_PLUGINS": "tests.fakes", **env}
    argv = [sys.executable, "-m", "docsearch.app.cli", "serve", "--port", str(port), *args]
    health = f"http://127.0.0.1:{port}/api/v1/health"
    with running(argv, env=full, cwd=REPO, ready=health, timeout=120, log=log):
        yield Client("127.0.0.1", port)


@contextmanager
def serving(
    env: dict[str, str], *args: str, log: Path
) -> Iterator[tuple[Client, subprocess.Popen[bytes]]]:
    """As `served`, with the server's process, for tests that signal it (killed at the end if
    still running)."""
    port = free_port()
    full = {**os.environ, "PYTHONPATH": str(REPO), "DOCSEARCH_PLUGINS": "tests.fakes", **env}
    argv = [sys.executable, "-m", "docsearch.app.cli", "serve", "--port", str(port), *args]
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=full, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_until_up(f"http://127.0.0.1:{port}/api/v1/health", process, 120)
            yield Client("127.0.0.1", port), process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()


def finished(client: Client, url: str, timeout: float = 60) -> dict[str, Any]:
    """An index job's answer once it is no longer running (AssertionError after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(url).json()
        if job["state"] != "running":
            return dict(job)
        time.sleep(0.2)
    raise AssertionError(f"job {url} still running after {timeout} s")
