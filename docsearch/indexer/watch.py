"""Keeping a collection in line with a folder: `watch(folder, ...)` re-indexes after each change.

Each batch of changes (watchfiles; a batch ends once the folder has been quiet for `quiet`
seconds) triggers an incremental run of the indexing service, which compares the whole folder
with the index. So creates, edits, deletes, renames and editors' write-temp-then-rename saves all
come down to one reconciliation, whatever order their events arrive in, and none can leave a
duplicate. The first run starts once the watcher is up, so nothing changed meanwhile is missed,
and brings the collection up to date: a watcher killed mid-run converges when it is started again
(runs are incremental and resume). A run refused (another writer holds the collection) or failed
is retried every `POLL_SECONDS`. A folder that disappears is waited for, its chunks kept (it may
be an unmounted drive), and reconciled when it comes back. Progress and errors go to the log.
Not here: indexing itself (`service.index`), the command (`docsearch.app.watch_cmd`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from docsearch.errors import DocsearchError
from docsearch.indexer import service

if TYPE_CHECKING:
    from docsearch.config import Settings

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often a missing folder or a refused run is looked at again
DEFAULT_QUIET = 0.5  # seconds without changes that end a batch


def watch(
    folder: Path | str,
    *,
    settings: Settings,
    collection: str | None = None,
    encoder: str | None = None,
    quiet: float = DEFAULT_QUIET,
    stop: threading.Event | None = None,
) -> None:
    """Re-index `folder` into `collection` after every batch of changes, until `stop` is set."""
    root = Path(folder).absolute()
    name = collection or service.collection_for(root)
    stop = stop or threading.Event()
    log.info("watching %s -> collection %s", root, name)
    while not stop.is_set():
        if not root.is_dir():
            log.warning("%s is gone; waiting for it to come back (its index is kept)", root)
            while not root.is_dir() and not stop.wait(POLL_SECONDS):
                pass
            continue
        _watch_while_present(root, name, settings, encoder, quiet, stop)


def _watch_while_present(
    root: Path,
    name: str,
    settings: Settings,
    encoder: str | None,
    quiet: float,
    stop: threading.Event,
) -> None:
    from watchfiles import watch as changes

    pending = True  # the first (timeout) batch arrives once the watcher runs: reconcile then
    watched = _identity(root)  # a folder removed and made again is a new one, not watched yet
    batches = changes(
        root,
        step=int(quiet * 1000),
        debounce=int(max(10 * quiet, 5.0) * 1000),  # a burst of changes is cut off after this
        rust_timeout=int(POLL_SECONDS * 1000),
        yield_on_timeout=True,
        stop_event=stop,
    )
    try:
        for batch in batches:
            if _identity(root) != watched:
                return
            if batch or pending:
                pending = not reindex(root, name, settings, encoder)
    except (FileNotFoundError, RuntimeError) as exc:  # the folder went while being watched
        log.info("watch on %s ended (%s)", root, exc)


def _identity(folder: Path) -> tuple[int, int] | None:
    try:
        info = folder.stat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def reindex(root: Path, name: str, settings: Settings, encoder: str | None = None) -> bool:
    """One incremental run; False (and logged) if it was refused or failed."""
    try:
        report = service.index(root, settings=settings, collection=name, encoder=encoder)
    except DocsearchError as exc:
        log.warning("%s: not indexed now (%s); retrying", name, exc)
        return False
    log.info("%s: %s; %d chunks written", name, report.files_line(), report.chunks_written)
    for path, reason in report.failed:
        log.warning("%s: failed: %s: %s", name, path, reason)
    return True
