"""`docsearch keys create | list | revoke`: the API keys `docsearch serve` accepts.

Not here: the key file and the check (`keys.py`), HTTP (`api.py`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from docsearch.app.common import handle_errors

keys_app = typer.Typer(help="Create, list and revoke API keys for `docsearch serve`.")


@keys_app.command("create")
@handle_errors
def keys_create(
    collections: Annotated[
        str, typer.Option(help="Collections the key may search, comma-separated ('*': all).")
    ],
    index: Annotated[
        bool, typer.Option("--index", help="The key may also start index jobs.")
    ] = False,
) -> None:
    """Make a key and print it once (only its hash is kept): send it as `Authorization: Bearer KEY`."""
    from docsearch.app.keys import KeyStore, parse_collections

    store = KeyStore()
    key, record = store.create(parse_collections(collections), index=index)
    typer.echo(key)
    rights = "search and index" if index else "search"
    typer.echo(f"key {record.id}: {rights} {','.join(record.collections)} ({store.path})", err=True)


@keys_app.command("list")
@handle_errors
def keys_list() -> None:
    """List the keys (ids and scopes; the keys themselves are not stored)."""
    from docsearch.app.keys import KeyStore

    for record in KeyStore().records():
        rights = "index" if record.index else "read"
        typer.echo(f"{record.id}\t{rights}\t{','.join(record.collections)}")


@keys_app.command("revoke")
@handle_errors
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The id `keys list` shows.")]) -> None:
    """Revoke a key; a running server refuses it from the next request on."""
    from docsearch.app.keys import KeyStore

    KeyStore().revoke(key_id)
    typer.echo(f"revoked {key_id}", err=True)
