"""`docsearch serve`: the REST API (`api.py`) and the search UI on one server, optionally
keeping folders indexed (`--watch`).

Binding beyond loopback needs at least one key (`docsearch keys create`). Once a key has been
made, every request needs one, even after all keys are revoked or the key file is deleted; only
`--no-keys` (loopback only) serves without keys again. The UI has no key login: it is mounted only
while keys are not in force (loopback, no key ever made, or `--no-keys`); otherwise use
`docsearch ui` on loopback.
The API and the UI share one `docsearch.registry.CollectionRegistry` (one encoder load per
collection spec in the process), closed when the server stops.
Not here: the routes (`api.py`), keys (`keys.py`), watching (`docsearch.indexer.watch`).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from docsearch.app.common import DbOption, handle_errors
from docsearch.app.ui_cmd import UI_PACKAGES
from docsearch.errors import UsageError

if TYPE_CHECKING:
    from docsearch.app.api import Front, ServerState
    from docsearch.config import Settings

log = logging.getLogger(__name__)
# For the requests in flight at SIGTERM. uvicorn then raises the signal again, which ends the
# process at once; its extraction children see their parent gone and exit within a second.
GRACE_SECONDS = 3


@handle_errors
def serve_command(
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but loopback requires keys.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 7860,
    watch: Annotated[
        list[Path] | None,
        typer.Option(help="Keep this folder indexed (its collection is named after it)."),
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option(help="Allow index jobs for folders under this one (default: off)."),
    ] = None,
    ui: Annotated[bool, typer.Option(help="Serve the search UI on the same port.")] = True,
    no_keys: Annotated[
        bool,
        typer.Option(
            "--no-keys", help="Serve without keys, even if some were made (loopback only)."
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """Serve the REST API (/api/v1, schema at /openapi.json, docs at /docs) and the UI.

    Send keys as `Authorization: Bearer KEY`; keys are needed once any was made (even after
    all are revoked: `--no-keys` serves open on loopback), and always off loopback. Index jobs re-index a collection's own folder, or one under --root.
    """
    needed = [*UI_PACKAGES, *(["watchfiles"] if watch else [])]
    missing = [p for p in needed if importlib.util.find_spec(p) is None]
    if missing:
        raise UsageError(f"serve needs {', '.join(missing)}: pip install 'docsearch[ui]'")
    for folder in [*(watch or []), *([root] if root else [])]:
        if not folder.is_dir():
            raise UsageError(f"not a folder: {folder}")
    from docsearch.app.api import API, ServerState
    from docsearch.app.keys import KeyStore
    from docsearch.app.web.ui import LOOPBACK, check_port
    from docsearch.config import Settings
    from docsearch.indexer.extract_process import stop_child

    keys, public = KeyStore(), host not in LOOPBACK
    if no_keys and public:
        raise UsageError(f"--no-keys serves only on loopback, not {host}")
    if public and not keys.records():
        raise UsageError(
            f"binding {host} serves beyond this machine: create a key first "
            "(docsearch keys create --collections NAME)"
        )
    check_port(host, port)
    settings = Settings.resolve(db=db)
    state = ServerState(settings, keys, public, root.resolve() if root else None, no_keys)
    app = server_app(state, ui)
    stop = _start_watchers(watch or [], settings)
    where = f"http://{host}:{port}"
    typer.echo(f"docsearch API on {where}{API} (docs {where}/docs)", err=True)
    typer.echo(f"UI on {where}/" if app.ui else "UI off (keys are in force)", err=True)
    import uvicorn

    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=GRACE_SECONDS,
        )
    finally:
        stop.set()
        stop_child("uploads")  # Ctrl-C: an upload waiting on it fails now, not after its file
        state.registry.close()


def server_app(state: ServerState, ui: bool) -> Front:
    """The API and, if `ui` and keys are not in force, the UI in front of it: both open their
    collections through `state.registry`, so the process loads a collection's encoder once."""
    from docsearch.app.api import build_app
    from docsearch.app.web.ui import build_ui, make_app

    if not ui or state.policy.in_force():
        return build_app(state)
    demo = build_ui(settings=state.settings, collections=state.registry)
    return build_app(state, make_app(demo))


def _start_watchers(folders: list[Path], settings: Settings) -> threading.Event:
    from docsearch.indexer.watch import watch

    logging.getLogger("docsearch.indexer.watch").setLevel(logging.INFO)
    stop = threading.Event()
    for folder in folders:
        kwargs: dict[str, Any] = {"settings": settings, "stop": stop}
        threading.Thread(target=watch, args=(folder,), kwargs=kwargs, daemon=True).start()
    return stop
