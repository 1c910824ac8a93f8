"""Planning, the first stage of an index run: which files to read, from the folder and its records.

`walk` lists the supported regular files under a folder, filtered by include/exclude globs, and
reports whatever would have been indexed but cannot be (with the reason; nothing is opened).
`plan` compares them with the collection's file records: a file seen for the first time, one that
failed before and one whose size or mtime moved is read again (a `WorkItem`); the rest are
unchanged; a record whose file is gone is deleted. Both engines plan here, in this process.
Not here: reading, hashing and extracting the files (`pipeline.extract_file`).
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from docsearch.indexer.extract import supported
from docsearch.paths import stored
from docsearch.store.schema import FileRecord

DEFAULT_EXCLUDES = (".*", "*/.*", "__pycache__", "*/__pycache__", "node_modules", "*/node_modules")


@dataclass(frozen=True)
class WorkItem:
    """A file to read: its absolute path as the index stores it (`paths.stored`; `paths.real`
    gives the name to open), the size and mtime the plan saw, its last record."""

    path: str
    size: int
    mtime: float
    old: FileRecord | None  # None: never seen before


@dataclass
class Plan:
    """What a run must do, from comparing the folder with the files table."""

    items: list[WorkItem]  # new or failed before first, then those whose size or mtime moved
    unchanged: int
    deleted: list[str]
    deleted_shas: frozenset[str]  # the deleted files' bytes: a new file with them is a rename
    skipped: list[tuple[str, str]]  # (path, why it cannot be indexed)


def plan(
    root: Path,
    records: Mapping[str, FileRecord],
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> Plan:
    skipped: list[tuple[str, str]] = []
    todo, touched, unchanged, seen = [], [], 0, set()
    for path in walk(root, include, exclude, skipped):
        try:
            st = path.stat()
        except OSError:  # vanished since the walk: treated as deleted
            continue
        key = stored(str(path.absolute()))
        seen.add(key)
        old = records.get(key)
        item = WorkItem(key, st.st_size, st.st_mtime, old)
        if old is None or old.status != "indexed":
            todo.append(item)
        elif old.size == st.st_size and old.mtime == st.st_mtime:
            unchanged += 1
        else:
            touched.append(item)
    prefix = stored(str(root.absolute()))  # escaping keeps a folder a prefix of its files
    under_root = [p for p in records if p == prefix or p.startswith(prefix.rstrip(os.sep) + os.sep)]
    deleted = [p for p in under_root if p not in seen]
    gone_bytes = frozenset(records[p].sha256 for p in deleted)
    return Plan([*todo, *touched], unchanged, deleted, gone_bytes, skipped)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Walking


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def walk(
    root: Path,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    skipped: list[tuple[str, str]] | None = None,
) -> list[Path]:
    """Supported regular files under `root` (or `root` itself), filtered by include/exclude globs.

    Whatever would have been indexed but cannot be is added to `skipped` with the reason: a
    symlink leading out of `root` (indexing a folder must not pull in text from elsewhere on the
    machine), a broken symlink or a symlink loop, a FIFO, socket or device (never opened: a FIFO
    would block the run), a symlinked folder (not followed), a folder that cannot be listed.
    """
    skips: list[tuple[str, str]] = skipped if skipped is not None else []
    if not root.is_dir():
        why = _not_indexable(root, root.resolve().parent)
        if why:
            skips.append((stored(str(root.absolute())), why))
        return [root] if supported(root) and not why else []
    excludes = [*DEFAULT_EXCLUDES, *exclude]
    real_root = root.resolve()

    def unlistable(exc: OSError) -> None:
        why = "permission denied" if isinstance(exc, PermissionError) else exc.strerror or exc
        where = stored(str(Path(exc.filename or root).absolute()))
        skips.append((where, f"folder not readable ({why})"))

    found = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not _matches(rel_dir + d, excludes))
        for name in [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            where = stored(str((Path(dirpath) / name).absolute()))
            skips.append((where, "symlink to a folder (not followed)"))
        for name in sorted(filenames):
            rel = rel_dir + name
            if _matches(rel, excludes) or (include and not _matches(rel, include)):
                continue
            path = Path(dirpath) / name
            if not supported(path):
                continue
            why = _not_indexable(path, real_root)
            if why:
                skips.append((stored(str(path.absolute())), why))
            else:
                found.append(path)
    return found


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def _not_indexable(path: Path, real_root: Path) -> str:
    """Why `path` cannot be indexed, or '' when it is a regular file (or a symlink to one inside
    `real_root`). Only stat calls: nothing is opened."""
    try:
        link = path.lstat()
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISLNK(link.st_mode):
        try:
            target = path.stat()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "symlink loop"
            if exc.errno == errno.ENOENT:
                return f"broken symlink (its target {stored(os.readlink(path))} does not exist)"
            return f"symlink that cannot be followed ({exc.strerror or exc})"
        if not path.resolve().is_relative_to(real_root):
            return "symlink to a file outside the folder"
        if not stat.S_ISREG(target.st_mode):
            return f"symlink to {_kind(target.st_mode)}, not a regular file (not read)"
        return ""
    if not stat.S_ISREG(link.st_mode):
        return f"{_kind(link.st_mode)}, not a regular file (not read)"
    return ""
