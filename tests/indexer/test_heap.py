"""The indexing process's C heap (docsearch.indexer.heap): freed memory goes back to the system."""

from __future__ import annotations

import subprocess
import sys

import pytest

from docsearch.indexer import heap

# In a fresh process: 2,000 blocks of 100 KB (under glibc's mmap threshold, so from the heap),
# all freed but the last (which keeps the heap's top from shrinking on its own), then trimmed.
PROBE = """
from docsearch.indexer import heap
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
blocks = [bytearray(100_000) for _ in range(2000)]
last = blocks[-1]
del blocks
freed = rss()
heap.release_free_memory()
print(freed, rss())
"""


@pytest.mark.skipif(heap._glibc() is None, reason="the C library is not glibc")
def test_free_heap_memory_goes_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    freed, trimmed = map(int, out.stdout.split())
    assert freed - trimmed > 100  # MB: most of the 200 MB freed was still resident before


@pytest.mark.skipif(heap._glibc() is None, reason="the C library is not glibc")
def test_the_arena_limit_is_taken() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from docsearch.indexer import heap; print(heap.limit_arenas())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"
