"""Defaults that more than one layer needs, defined once: the CLI's settings, the indexer, the
encoders and the retriever import them from here.

Imports nothing, so any module may import it at the top. Not here: settings a user can change
(`docsearch.config.Settings`, whose defaults come from these), one module's own tuning constants.
"""

from __future__ import annotations

MODES = ("hybrid", "vector", "lexical")  # search modes, the default first
DEFAULT_ENCODER = "sentence-transformers"  # for a new collection when none is named
DEFAULT_TOKEN_BUDGET = 16384  # padded tokens per encoder batch (rows x longest row)
GROUP_CHUNKS = 512  # chunks per commit group: big enough to batch well, small enough to resume
# Per-file limits (a file over one is refused with a reason naming the setting to raise):
# They bound the time one file takes, not memory: files stream (benchmarks/results/memory.md).
DEFAULT_MAX_FILE_MB = 256.0  # bytes read from disk, and a DOCX's unpacked parts
DEFAULT_MAX_TEXT_MB = 16.0  # millions of characters of extracted text
DEFAULT_EXTRACT_SECONDS = 300.0  # time to extract one file (0: in this process, no limit)
# Address space of the extraction child: its parsers, an OCR engine (RapidOCR maps 1.2 GB) and a
# page image; past it the file fails with "ran out of memory" instead of the machine swapping.
DEFAULT_EXTRACT_MEMORY_MB = 4096.0
