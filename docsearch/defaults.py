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
