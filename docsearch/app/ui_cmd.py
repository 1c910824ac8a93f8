"""`docsearch ui`: the search UI in the browser (`app/web/`), served from this process.

Gradio is imported only when the command runs, so `docsearch --help` stays instant.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from docsearch.app.common import DbOption, handle_errors
from docsearch.errors import UsageError

UI_PACKAGES = ("gradio", "fastapi", "uvicorn", "pypdfium2")


@handle_errors
def ui_command(
    collection: Annotated[
        str | None,
        typer.Option("--collection", "-c", help="Collection selected at start (default: latest)."),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but localhost exposes the documents.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 7860,
    root: Annotated[
        Path | None,
        typer.Option(help="Allow indexing folders under this one from the UI (default: off)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Open the search UI: search, filters, highlighted snippets, previews at the page.

    Serves on http://127.0.0.1:7860 by default and shows only documents recorded in the index.
    With --root FOLDER, folders under FOLDER can be indexed from the UI.
    """
    missing = [p for p in UI_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        raise UsageError(f"the UI needs {', '.join(missing)}: pip install 'docsearch[ui]'")
    if root is not None and not root.is_dir():
        raise UsageError(f"--root must be an existing folder, not {root}")
    from docsearch.app.web.ui import build_ui, serve
    from docsearch.config import Settings

    settings = Settings.resolve(db=db)
    serve(build_ui(collection, settings=settings, root=root), host=host, port=port)


if __name__ == "__main__":
    typer.run(ui_command)
