"""`docsearch collections list | info | drop`: what the database holds, and removing it.

Not here: what `info` shows (`docsearch.registry.collection_info`), the store
(`docsearch.store`), index health (`doctor_cmd.py`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from docsearch.app.common import DbOption, JsonOption, handle_errors
from docsearch.registry import collection_info, version_info

__all__ = ["collection_info", "collections_app", "version_info"]

collections_app = typer.Typer(help="List, inspect and drop collections.", no_args_is_help=True)


@collections_app.command("list")
@handle_errors
def collections_list(as_json: JsonOption = False, db: DbOption = None) -> None:
    """List the collections in the database."""
    from docsearch.config import Settings
    from docsearch.store.database import Database

    db = Settings.resolve(db=db).db
    infos = [collection_info(db, n) for n in Database(db).list_collections()]
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    if not infos:
        typer.echo(f"no collections in {db}", err=True)
    for info in infos:
        switch = f"\tswitching to {info['switch']['encoder']}" if info["switch"] else ""
        typer.echo(
            f"{info['name']}\t{info['files']} files\t{info['chunks']} chunks\t{info['encoder']}"
            f"{switch}"
        )


@collections_app.command("info")
@handle_errors
def collections_info(
    name: Annotated[str | None, typer.Argument(help="Collection (default: as for search).")] = None,
    db: DbOption = None,
) -> None:
    """Show what a collection was built with and what it holds (JSON); while a switch
    (`index --switch`) builds its next version, `switch` shows that one too."""
    from docsearch.config import Settings
    from docsearch.store.database import resolve_collection

    db = Settings.resolve(db=db).db
    typer.echo(json.dumps(collection_info(db, resolve_collection(db, name)), indent=2))


@collections_app.command("drop")
@handle_errors
def collections_drop(
    name: Annotated[str, typer.Argument(help="Collection to delete.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    db: DbOption = None,
) -> None:
    """Delete a collection (the indexed files themselves are not touched)."""
    from docsearch.config import Settings
    from docsearch.store.database import Database

    db = Settings.resolve(db=db).db
    if not yes and not typer.confirm(f"Drop collection {name!r} from {db}?", err=True):
        raise typer.Exit(1)
    Database(db).drop_collection(name)
    typer.echo(f"dropped {name}", err=True)
