"""`docsearch watch FOLDER`: keep a collection indexed as files change (`docsearch.indexer.watch`).

Not here: the watching and re-indexing (`docsearch.indexer.watch`).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Annotated

import typer

from docsearch.app.common import CollectionOption, DbOption, NewEncoderOption, handle_errors
from docsearch.errors import UsageError


@handle_errors
def watch_command(
    folder: Annotated[Path, typer.Argument(help="Folder to keep indexed.", show_default=False)],
    collection: CollectionOption = None,
    encoder: NewEncoderOption = None,
    quiet: Annotated[
        float, typer.Option(help="Seconds without changes before re-indexing.", min=0.05)
    ] = 0.5,
    db: DbOption = None,
) -> None:
    """Index FOLDER, then re-index it after every change (create, edit, rename, delete).

    Each run is incremental: only new or changed files are embedded. Runs until Ctrl+C; a
    watcher stopped mid-run catches up when started again. Progress and errors go to stderr.
    """
    if importlib.util.find_spec("watchfiles") is None:
        raise UsageError("watch needs watchfiles: pip install 'docsearch[ui]'")
    if not folder.is_dir():
        raise UsageError(f"not a folder: {folder}")
    from docsearch.config import Settings
    from docsearch.indexer.watch import watch

    logging.getLogger("docsearch.indexer.watch").setLevel(logging.INFO)
    settings = Settings.resolve(db=db)
    watch(folder, settings=settings, collection=collection, encoder=encoder, quiet=quiet)
