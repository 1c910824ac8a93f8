"""Handing back the resident pages of dead weights that lie in a memory-mapped weights file.

A BERT folder's weights are views of its safetensors file, mapped into memory (`bert_folder`),
so each page a forward reads stays resident, counted in the process's RSS, for as long as the
file is mapped. Converting the model to int8 in place (`int8.quantise`) replaces every Linear's
fp32 weight, but the embeddings keep the file mapped: the calibration forward had read every
weight, and ~40 MB of pages that nothing reads again stayed resident through the whole index
run (MiniLM, benchmarks/results/peers_class_avx512-vnni.md). `drop_pages` tells the kernel it
may drop them (madvise DONTNEED): a page of a file mapping that is read again is read back from
the file, so nothing is lost even if a dropped weight were used later.
Only memory inside a file mapping is ever advised (memory of the heap would be zeroed), only
whole pages inside a tensor's own bytes, and only on Linux (elsewhere nothing happens).
Not here: which weights are dead (the caller's), the heap (`indexer/heap.py`).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import sys
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

MADV_DONTNEED = 4  # Linux's value (asm-generic/mman-common.h)


def file_mappings(maps: str) -> list[tuple[int, int]]:
    """The address ranges of `maps` (the text of /proc/self/maps) that map a file."""
    spans = []
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/"):  # anonymous, [heap], [stack]...
            continue
        low, _, high = parts[0].partition("-")
        spans.append((int(low, 16), int(high, 16)))
    return spans


def page_spans(
    tensors: Iterable[Any], mapped: list[tuple[int, int]], page: int
) -> list[tuple[int, int]]:
    """(start, length) of the whole pages inside each tensor's own bytes, for the tensors that
    lie entirely inside one of the `mapped` ranges."""
    spans = []
    for tensor in tensors:
        if not tensor.is_contiguous():
            continue
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        if not any(low <= start and end <= high for low, high in mapped):
            continue
        first, last = -(-start // page) * page, end // page * page  # inward: whole pages only
        if last > first:
            spans.append((first, last - first))
    return spans


@lru_cache(maxsize=1)
def _madvise() -> Any | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        advise = libc.madvise
    except (OSError, AttributeError):
        return None
    advise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advise.restype = ctypes.c_int
    return advise


def drop_pages(tensors: Iterable[Any]) -> int:
    """Let the kernel drop the resident pages of `tensors` (dead weights) that lie in a file
    mapping; the bytes advised."""
    if not sys.platform.startswith("linux"):
        return 0
    advise = _madvise()
    if advise is None:
        return 0
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            mapped = file_mappings(maps.read())
    except OSError:
        return 0
    dropped = 0
    for start, length in page_spans(tensors, mapped, mmap.PAGESIZE):
        if advise(start, length, MADV_DONTNEED) == 0:
            dropped += length
    log.debug("dropped %d MB of dead weights' file pages", dropped >> 20)
    return dropped
