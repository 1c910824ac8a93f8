"""The C heap of an indexing process: fewer malloc arenas, and freed memory handed back.

An index run allocates from many threads (torch's, Lance's, the extraction thread) in blocks of
every size (each batch pads to its own length), and glibc's allocator keeps what was freed in
per-thread arenas: a 40-contract run grew to 1.35 GB resident, most of it free heap the process
never used again (benchmarks/results/peers.md). Two arenas and a trim after each encoder batch
and commit keep it to what is live. Where the C library is not glibc (musl, macOS) both are no-ops.
Not here: Python-level caches (each module bounds its own).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h
ARENAS = 2


@lru_cache(maxsize=1)
def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc's, or AttributeError
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Let malloc make at most `arenas` arenas from now on (call it before the threads start);
    whether the C library took it."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas))


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim: a few ms)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
