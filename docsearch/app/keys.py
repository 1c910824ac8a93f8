"""API keys scoped to collections: creating them, storing their hashes, checking a presented one.

A key is 32 random bytes (URL-safe text) shown once when it is made; the key file keeps only its
SHA-256 (a random key needs no slow hash: there is nothing to guess from), the collections it may
read (`*`: all) and whether it may start index jobs. A presented key is hashed and compared with
every stored hash in constant time, so neither the answer nor its timing says how close it came.
The file is `$DOCSEARCH_KEYS`, else `keys.json` in the data folder, written atomically, mode 0600.
Revoking the last key leaves the file with no records, and making a key also leaves a marker
beside it (`.keys.json.issued`): once a key has existed, a server keeps asking for keys even
with none left or the file deleted (`KeyStore.issued`); only `serve --no-keys` runs open again.
Not here: HTTP (the server's `auth` dependency), the `keys` commands (`keys_cmd.py`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from docsearch.config import data_home
from docsearch.errors import UsageError
from docsearch.store.schema import validate_name

ALL = "*"
PREFIX = "ds_"


@dataclass(frozen=True)
class KeyRecord:
    id: str  # a short random label to list and revoke it by; not derived from the key
    sha256: str
    collections: tuple[str, ...]  # names, or ("*",) for every collection
    index: bool = False  # may start index jobs in its collections
    created_at: float = 0.0

    def reads(self, collection: str) -> bool:
        return ALL in self.collections or collection in self.collections


def keys_file() -> Path:
    return Path(os.environ.get("DOCSEARCH_KEYS") or data_home() / "keys.json").expanduser()


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def parse_collections(text: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'); '*' -> all; each name checked as collection names are."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError("--collections needs at least one name, or '*' for all")
    return names if names == (ALL,) else tuple(validate_name(n) for n in names)


class KeyStore:
    """The key file: read on every check, so keys made or revoked apply at once."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or keys_file()

    @property
    def marker(self) -> Path:
        return self.path.with_name(f".{self.path.name}.issued")

    def issued(self) -> bool:
        """Whether a key was ever made here: the key file (even with no records left) or the
        marker that making one leaves beside it."""
        return self.path.exists() or self.marker.exists()

    def records(self) -> list[KeyRecord]:
        try:
            raw = json.loads(self.path.read_text())
            return [KeyRecord(**{**r, "collections": tuple(r["collections"])}) for r in raw]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise UsageError(f"cannot read the key file {self.path}: {exc!r}") from None

    def create(self, collections: tuple[str, ...], index: bool = False) -> tuple[str, KeyRecord]:
        """A new key (returned once, never stored) and its record."""
        key = PREFIX + secrets.token_urlsafe(32)
        record = KeyRecord(secrets.token_hex(4), _digest(key), collections, index, time.time())
        self._write([*self.records(), record])
        self.marker.touch(mode=0o600)
        return key, record

    def revoke(self, key_id: str) -> None:
        kept = [r for r in self.records() if r.id != key_id]
        if len(kept) == len(self.records()):
            raise UsageError(f"no key with id {key_id!r} (see `docsearch keys list`)")
        self._write(kept)

    def check(self, presented: str) -> KeyRecord | None:
        """The record of `presented`, or None; every stored hash is compared, in constant time."""
        digest, found = _digest(presented), None
        for record in self.records():
            if hmac.compare_digest(digest, record.sha256):
                found = record
        return found

    def _write(self, records: list[KeyRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".keys-")
        with os.fdopen(fd, "w") as handle:  # mkstemp makes it 0600
            json.dump([asdict(r) for r in records], handle, indent=1)
        os.replace(temp, self.path)
