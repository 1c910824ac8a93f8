"""Which folder an API index job may index into a collection: jobs never widen what a key reads.

A collection is bound to the folder it was created with (`CollectionMeta.source`, stored in
the collection's own table metadata, so the binding outlives restarts; the CLI and API jobs
record it alike). With a key for some collections, a job may index only that folder or one
below it into an existing collection, and may create a collection only from a folder that holds
no folder bound to a collection the key cannot read (nor lies inside one). An admin (a key for
every collection made with `--index`, or a server without keys) may index any folder under
`--root` into any collection; the folders a collection holds are then the admin's choice.
Refusals are 403s that say why and name no server path.
Not here: the keys and their rights (`api_auth.py`), the routes (`api.py`).
"""

from __future__ import annotations

from pathlib import Path

from docsearch.app.api_auth import Access, ApiError
from docsearch.app.web.files import is_within


def bound_folders(db: str) -> dict[str, Path | None]:
    """Each complete collection's folder (None: it records none, e.g. an evaluation corpus)."""
    from docsearch.store.database import Database
    from docsearch.store.reads import Store

    database = Database(db)
    complete, _ = database.survey()
    sources = {name: Store.open(database, name).meta.source for name in complete}
    return {name: Path(src).resolve() if src else None for name, src in sources.items()}


def requested_folder(root: Path | None, folder: str) -> Path:
    """`folder` (relative to `root`, or absolute) as a real folder under it; 403/404 otherwise,
    naming neither `root` nor the resolved path."""
    if root is None:
        raise ApiError(403, "indexing a folder needs the server started with --root FOLDER")
    if "\x00" in folder:
        raise ApiError(403, "malformed folder name")
    base = root.resolve()
    candidate = Path(folder.strip() or ".")
    resolved = (candidate if candidate.is_absolute() else base / candidate).resolve()
    if not is_within(resolved, base):
        raise ApiError(403, "only folders under the server's --root can be indexed")
    if not resolved.is_dir():
        raise ApiError(404, f"no such folder under the server's --root: {folder}")
    return resolved


def check_job_folder(db: str, name: str, folder: Path, who: Access) -> None:
    """Refuse (403) a job that would put into `name` files the key may not read elsewhere."""
    if who.is_admin:
        return
    bound = bound_folders(db)
    if name in bound:
        own = bound[name]
        if own is None or not is_within(folder, own):
            raise ApiError(
                403,
                f"collection {name!r} is bound to the folder it was created with: this key may "
                "index only that folder (or one below it) into it; an admin key (every "
                "collection, --index) may add others",
            )
        return
    unreadable = [own for other, own in bound.items() if own and not who.reads(other)]
    if any(is_within(folder, own) or is_within(own, folder) for own in unreadable):
        raise ApiError(
            403,
            "that folder holds files of a collection this key cannot read: "
            "a new collection cannot be made from it with this key",
        )
