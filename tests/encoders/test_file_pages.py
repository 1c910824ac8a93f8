"""Dead weights' pages in a mapped weights file are handed back; nothing else is touched.

The file-backed case uses a real safetensors file loaded the way `bert_folder` loads one
(memory-mapped views); the heap case a tensor torch allocated itself."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest
import torch

from docsearch.encoders.file_pages import drop_pages, file_mappings, page_spans

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and madvise")
PAGE = mmap.PAGESIZE


def test_only_file_mappings_count() -> None:
    maps = "\n".join(
        [
            "55d0a000-55d0b000 r--p 00000000 08:01 1234 /usr/bin/python3",
            "55d0c000-55d2c000 rw-p 00000000 00:00 0 [heap]",
            "7f000000-7f100000 r--s 00000000 08:01 99 /models/my model/model.safetensors",
            "7f200000-7f300000 rw-p 00000000 00:00 0",
            "7ffc0000-7ffc2000 rw-p 00000000 00:00 0 [stack]",
        ]
    )
    assert file_mappings(maps) == [(0x55D0A000, 0x55D0B000), (0x7F000000, 0x7F100000)]


class _Span:
    """What page_spans reads of a tensor: where its bytes are."""

    def __init__(self, start: int, size: int, contiguous: bool = True) -> None:
        self.start, self.size, self.contiguous = start, size, contiguous

    def is_contiguous(self) -> bool:
        return self.contiguous

    def data_ptr(self) -> int:
        return self.start

    def numel(self) -> int:
        return self.size

    def element_size(self) -> int:
        return 1


def test_whole_pages_inside_the_tensor_and_the_mapping_only() -> None:
    mapped = [(10 * PAGE, 20 * PAGE)]
    spans = page_spans(
        [
            _Span(10 * PAGE + 1, 3 * PAGE),  # pages 11 and 12 whole; 10 and 13 shared
            _Span(12 * PAGE, PAGE - 1),  # no whole page
            _Span(19 * PAGE, 2 * PAGE),  # runs past the mapping
            _Span(2 * PAGE, 4 * PAGE),  # outside any mapping (the heap)
            _Span(14 * PAGE, 2 * PAGE, contiguous=False),
        ],
        mapped,
        PAGE,
    )
    assert spans == [(11 * PAGE, 2 * PAGE)]


def _resident_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            inside = line.rstrip().endswith(str(path))
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total


@linux_only
def test_a_mapped_weight_gives_back_its_pages_and_still_reads_the_same(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    path = tmp_path / "model.safetensors"
    weights = {"dead": torch.randn(512, 1024), "live": torch.randn(256, 1024)}
    save_file(weights, str(path))
    loaded = load_file(str(path))
    assert torch.equal(loaded["dead"], weights["dead"])  # read: its pages are resident
    assert torch.equal(loaded["live"], weights["live"])
    before = _resident_kb(path)
    if before == 0:
        pytest.skip("safetensors did not map the file here")
    dropped = drop_pages([loaded["dead"]])
    after = _resident_kb(path)
    assert dropped >= 2 * 2**20 - 2 * PAGE  # the 2 MB tensor, less its partial pages
    assert before - after >= (dropped >> 10) - 4  # those pages left the process
    assert torch.equal(loaded["dead"], weights["dead"])  # read back from the file
    assert torch.equal(loaded["live"], weights["live"])


def test_heap_memory_is_never_advised() -> None:
    tensor = torch.arange(1 << 20, dtype=torch.float32)
    assert drop_pages([tensor]) == 0
    assert torch.equal(tensor, torch.arange(1 << 20, dtype=torch.float32))
