"""Running `docsearch ui` as a real server and driving Debian's Chromium at it (Playwright).

Shared by the browser test and `benchmarks/ui_latency.py`. No browser is downloaded: Playwright
drives /usr/bin/chromium (`apt-get install -y chromium`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("DOCSEARCH_CHROMIUM", "/usr/bin/chromium")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ui_argv() -> list[str]:
    """`docsearch ui` once cli.py registers it; the command module directly until then."""
    from docsearch.app.cli import app

    if any(c.name == "ui" for c in app.registered_commands):
        return [sys.executable, "-m", "docsearch.app.cli", "ui"]
    return [sys.executable, "-m", "docsearch.app.ui_cmd"]


def _wait_until_up(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the server did not answer at {url} within {timeout:.0f} s")


@contextmanager
def running(
    argv: list[str], *, env: dict[str, str], cwd: Path, ready: str, timeout: float, log: Path | None
) -> Iterator[None]:
    """Run `argv` until the block ends, once `ready` (a URL) answers 200; output to `log`."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(ready, process, timeout)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            out.close()  # type: ignore[union-attr]


@contextmanager
def ui_server(
    db: str,
    *args: str,
    timeout: float = 120.0,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> Iterator[str]:
    """Start `docsearch ui --db DB ARGS` on a free localhost port (working directory `cwd`);
    yields its URL."""
    port = free_port()
    env = dict(os.environ) | {"PYTHONPATH": str(REPO), "DOCSEARCH_DB": db} | (env or {})
    url = f"http://127.0.0.1:{port}/"
    argv = [*ui_argv(), "--db", db, "--port", str(port), *args]
    with running(argv, env=env, cwd=cwd, ready=url, timeout=timeout, log=log):
        yield url


def chromium_missing() -> str | None:
    """Why the browser cannot run here, or None."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; no browser download needed)"
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    return None


def launch(playwright: Any) -> Any:
    """Headless Debian Chromium (no sandbox: CI containers run as root)."""
    return playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
    )


def open_ui(browser: Any, url: str) -> Any:
    """A page on the UI, once its load event has run (the status line says it is wired)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector("#ds-status [data-ready]", timeout=60_000)
    return page


def search(page: Any, query: str, timeout: float = 60_000) -> Any:
    """Type `query`, press Enter, wait for a new results render; returns the results element."""
    previous = page.evaluate(
        "() => document.querySelector('#ds-results .ds-results')?.dataset.searchId ?? ''"
    )
    box = page.locator("#ds-query textarea, #ds-query input").first
    box.fill(query)
    box.press("Enter")
    page.wait_for_function(
        "(prev) => { const r = document.querySelector('#ds-results .ds-results');"
        " return r && r.dataset.searchId !== prev; }",
        arg=previous,
        timeout=timeout,
    )
    return page.locator("#ds-results .ds-results")
