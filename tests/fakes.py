"""Fakes for tests only: a deterministic hashing encoder registered as `hashing`.

Like llm's EmbedDemo: readable and exact. Each word is hashed into one of `dim` buckets with a
sign; the vector is the normalised bucket count. Two processes give identical vectors (the hash is
blake2b, not Python's salted `hash`). Subprocesses get it with DOCSEARCH_PLUGINS=tests.fakes.

Environment hooks used by the crash-safety tests:
- DOCSEARCH_FAKE_SLEEP: seconds to sleep per encode call (so a test can kill mid-run);
- DOCSEARCH_FAKE_KILL_AFTER: SIGKILL this process at the start of the N-th document batch.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from docsearch.encoders.base import l2_normalize, register

WORD = re.compile(r"\w+")
CALLS = {"documents": 0, "queries": 0, "texts": 0, "loads": 0}  # loads: encoders made


def _bucket(word: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, 1.0 if (value >> 32) & 1 else -1.0


@register("hashing")
class HashingEncoder:
    name = "hashing"

    def __init__(self, dim: int = 64, max_tokens: int = 64, **_: Any) -> None:
        CALLS["loads"] += 1
        self.dim = dim
        self.max_tokens = max_tokens

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in WORD.finditer(text)]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(WORD.findall(t)) for t in texts]

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in WORD.findall(text.lower()):
                col, sign = _bucket(word, self.dim)
                out[row, col] += sign
        return l2_normalize(out)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        CALLS["queries"] += 1
        return self._embed(texts)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        CALLS["documents"] += 1
        CALLS["texts"] += len(texts)
        kill_after = os.environ.get("DOCSEARCH_FAKE_KILL_AFTER")
        if kill_after and CALLS["documents"] > int(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)
        if sleep := float(os.environ.get("DOCSEARCH_FAKE_SLEEP", "0")):
            time.sleep(sleep)
        return self._embed(texts)

    def spec(self) -> dict[str, Any]:
        return {
            "encoder": self.name,
            "options": {"dim": self.dim, "max_tokens": self.max_tokens},
            "dim": self.dim,
            "max_tokens": self.max_tokens,
        }
