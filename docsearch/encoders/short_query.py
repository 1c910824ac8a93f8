"""The short-query engine: one query of at most SHORT_QUERY_TOKENS tokens, encoded by ONNX Runtime
fp32 on one thread, for a BERT folder (MiniLM) on the CPU under precision "auto".

Why: a search query is one row of a few tokens, where torch's per-operator dispatch costs more
than the arithmetic. MiniLM, one thread, contract words (benchmarks/results/short_queries.md):
8 words took 5.8 ms in torch bf16 (AMX), 7.9 ms in torch fp32 and 3.4 ms in ONNX Runtime fp32;
at 24 words 7.2 / 10.9 / 6.5 ms; from 32 words bf16 was ahead (8.2 vs 9.6 ms), while ONNX
Runtime stayed ahead of torch fp32 at every length (the CPUs without bf16 run fp32 or int8).
ONNX Runtime also runs without the GIL, so the chunk BM25 on the caller's thread runs beside the
encoding: a torch forward's Python steps took turns with it (11 ms beside it, 5 ms alone).

The export is onnx_backend's fp32 one, which matches torch fp32 to ~2e-7 a component: the query
vector is the fp32 one whatever precision the documents were encoded in (each precision keeps
the gate against fp32). Only "auto" uses it: a precision asked for by name is what runs.
Longer queries, batches, documents and training go through the encoder's own model; so does
every query once the module was handed to training (the export holds the folder's weights, not
the tuned ones), and where the export or its session failed (logged once).
Not here: the export itself (onnx_backend.py), the encoder (sentence_transformers.py).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# The longest query (in tokens, [CLS] and [SEP] included) this engine encodes: ~24 contract
# words, where torch bf16 on an AMX CPU starts to be faster (the module docstring).
SHORT_QUERY_TOKENS = 32
THREADS = 1  # one row: a second thread waits at every operator (sentence_transformers.py)


class ShortQueryEngine:
    """ONNX Runtime fp32 for the short single queries of one BERT folder (see the module)."""

    def __init__(self, folder: Path, like: Any, tokenizing: threading.Lock) -> None:
        self.folder, self.like = folder, like  # `like`: the tokenizer, layout and settings
        self._tokenizing = tokenizing  # the encoder's: its tokenizer is shared with batches
        self._model: Any = None
        self._failed = False
        self._loading = threading.Lock()

    def follow(self, like: Any) -> None:
        """Take the tokenizer, layout and settings from `like` from now on: the encoder's
        converted model, so that the fp32 one it was made from is not kept alive here."""
        self.like = like

    def vector(self, text: str) -> np.ndarray | None:
        """`text`'s unit vector, or None when it is longer than SHORT_QUERY_TOKENS tokens or the
        engine cannot run (the caller's model then encodes it)."""
        model = self._session()
        if model is None:
            return None
        with self._tokenizing:
            features = model.preprocess([text])
        if features["input_ids"].shape[1] > SHORT_QUERY_TOKENS:
            return None
        return np.asarray(model(features)["sentence_embedding"][0], dtype=np.float32)

    def _session(self) -> Any:
        if self._model is not None or self._failed:
            return self._model
        with self._loading:
            if self._model is None and not self._failed:
                try:
                    self._model = self._load()
                except Exception as exc:  # torch answers: slower, never wrong
                    self._failed = True
                    log.warning("short queries stay on torch: ONNX Runtime failed (%s)", exc)
        return self._model

    def _load(self) -> Any:
        from docsearch.encoders import onnx_backend

        # Exported from the folder's fp32 weights (the encoder's own model may have been
        # converted in place to another precision); once per model, then cached.
        exported = onnx_backend.ensure_export(None, self.folder)
        return onnx_backend.OnnxSentenceModel(exported / "model-fp32.onnx", self.like, THREADS)
