"""ONNX Runtime inference for a sentence-transformers BERT folder (MiniLM): export, cache, run.

Why: a second inference engine for the CPU, whose kernels (MLAS) may beat torch's on some CPUs;
`precision.py` times it beside torch fp32/bf16/int8 and keeps it only where it is faster and
within the same quality gate. Torch stays the fallback and the only engine for training.

The folder's plain-torch model (`bert_folder.py`) is exported once per model identity (a digest
of the files its forward reads) and exporter version (EXPORTER_VERSION, torch's and
onnxruntime's versions, the int8 weight type) into `<cache>/onnx/<key>/`: `model-fp32.onnx`,
and `model-int8.onnx`, its dynamic int8 quantisation (weights int8 per output channel,
activations uint8 per tensor, only products with a weight operand: the U8S8 kernels that use
VNNI where the CPU has it; U8U8 elsewhere, where an 8-bit U8S8 product can saturate). The export
is written to a temporary folder beside the final one and renamed onto it, so a process never
sees half an export, and of two processes exporting at once one rename wins and the other's
copy is dropped; within a process exports take turns (torch's exporter keeps its state in
globals), and one that waited finds the other's export. A stale export (another model, exporter or release) has another key: it is
built again, never reused.

Measured on MiniLM (benchmarks/results/onnx.md): onnx-fp32 matches torch fp32 to ~2e-7 per
component; onnx-int8's mean cosine to fp32 is 0.995 (min 0.992; 96 scifact windows), below
the gate (MIN_COSINE 0.999), because its activations share one scale per tensor (int8.py's
per-token scales and kept channels reach 0.9995), so "auto" does not choose it for MiniLM. Tried
and no better: unsigned weights (0.991 on a short sample, as signed), 7-bit ranges (0.990),
leaving the attention or feed-forward products in fp32 (0.991-0.992).

Not here: which precision runs (precision.py), the torch model (bert_folder.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

EXPORTER_VERSION = 1  # raise when the exported graph or the quantisation changes
PRECISIONS = ("onnx-fp32", "onnx-int8")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17
_EXPORTING = threading.Lock()  # one export at a time in a process (`ensure_export`)
log = logging.getLogger(__name__)
# The files whose bytes decide the forward (the tokenizer runs outside the graph).
_IDENTITY_FILES = ("config.json", "modules.json", "sentence_bert_config.json", "model.safetensors")


def available() -> bool:
    """onnx (to export and quantise) and onnxruntime (to run) are installed (the `onnx` extra)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))


def model_identity(folder: Path) -> str:
    """A digest of the files the exported graph is made from, the pooling config included."""
    digest = hashlib.sha256()
    pooling = sorted(folder.glob("1_Pooling/config.json"))
    for path in [folder / name for name in _IDENTITY_FILES] + pooling:
        digest.update(path.name.encode() + b"\0")
        if path.is_file():
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:20]


def export_key(folder: Path) -> str:
    """The export's folder name: the model identity and everything that makes the files."""
    import onnxruntime

    exporter = f"v{EXPORTER_VERSION}|torch {torch.__version__}|ort {onnxruntime.__version__}"
    exporter += f"|int8 weights {_int8_weight_kind()}"
    tag = hashlib.sha256(exporter.encode()).hexdigest()[:8]
    return f"{model_identity(folder)}-{tag}"


def _int8_weight_kind() -> str:
    """ "s8" (U8S8 products, VNNI's) where the CPU has int8 dot products, else "u8"."""
    from docsearch.encoders.device import cpu_flags

    return "s8" if cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"} else "u8"


def export_root() -> Path:
    from docsearch.config import cache_home

    return cache_home() / "onnx"


def ensure_export(model: Any | None, folder: Path) -> Path:
    """The folder holding the fp32 and int8 exports of `folder`'s model, exported now unless a
    complete export is already cached. `model` is its fp32 plain-torch model; None: loaded from
    the folder only where an export must be made (a cached one needs no model)."""
    final = export_root() / export_key(folder)
    if (final / "export.json").is_file():
        return final
    # torch.onnx.export keeps its state in globals: two exports of one process at once fail
    # ("GLOBALS.in_onnx_export must be False"); the second waits and finds the first's export.
    with _EXPORTING:
        if (final / "export.json").is_file():
            return final
        if model is None:
            from docsearch.encoders.bert_folder import load_bert_folder

            log.info("exporting %s to ONNX (once per model)", folder.name)
            model = load_bert_folder(folder)
        _export_into(model, folder, final)
    return final


def _export_into(model: Any, folder: Path, final: Path) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        _export_fp32(model, work / "model-fp32.onnx")
        _quantise(work / "model-fp32.onnx", work / "model-int8.onnx")
        record = {"folder": str(folder), "exporter_version": EXPORTER_VERSION}
        (work / "export.json").write_text(json.dumps(record, indent=1) + "\n")
        try:
            work.rename(final)  # atomic; fails when another process's export got there first
        except OSError:
            if not (final / "export.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _export_fp32(model: Any, path: Path) -> None:
    import warnings

    graph = _Graph(model).eval()  # eval: the exporter keeps a training module's dropout
    sample = model.preprocess(["an export sample", "two rows"])
    args = tuple(sample.get(name, torch.zeros_like(sample["input_ids"])) for name in INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            graph, args, str(path), dynamo=False, opset_version=OPSET,
            input_names=list(INPUTS), output_names=["sentence_embedding"],
            dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
        )  # fmt: skip


def _quantise(source: Path, target: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    before, root.disabled = root.disabled, True  # its advice to preprocess goes to the root log
    try:
        quantize_dynamic(
            str(source), str(target), per_channel=True, op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8 if _int8_weight_kind() == "s8" else QuantType.QUInt8,
            # attention's query-key and weights-value products have no weight: kept fp32
            extra_options={"MatMulConstBOnly": True},
        )  # fmt: skip
    finally:
        root.disabled = before


class _Graph(nn.Module):
    """The model with positional inputs and one output: what the exporter traces."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        return self.model({**features, "token_type_ids": token_type_ids})["sentence_embedding"]


class OnnxSentenceModel:
    """An export run by ONNX Runtime, with the parts of `BertSentenceModel` the encoder uses:
    `preprocess`, a call on its features returning {"sentence_embedding": tensor}, `tokenizer`,
    `max_seq_length`, `prompts`, `get_embedding_dimension`, and eval/train (no-ops: nothing in
    the graph depends on the mode)."""

    training = False
    own_threads = True  # the session's intra-op threads: batches go one at a time

    def __init__(self, path: Path, like: Any, threads: int) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # warnings about unused initialisers are not the user's
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = [i.name for i in self.session.get_inputs()]
        self.path = path
        self.layout = like.layout
        self.tokenizer = like.tokenizer
        self.prompts = like.prompts
        self.max_seq_length = like.max_seq_length

    def get_embedding_dimension(self) -> int:
        return int(self.layout.config["hidden_size"])

    def preprocess(self, texts: list[str]) -> dict[str, Any]:
        from docsearch.encoders.bert_folder import tokenize

        return tokenize(self.tokenizer, self.layout, self.max_seq_length, texts)

    def __call__(self, features: dict[str, Any]) -> dict[str, Any]:
        ids = features["input_ids"]
        feed = {
            name: np.asarray(features[name] if name in features else torch.zeros_like(ids))
            for name in self._inputs
        }
        (vectors,) = self.session.run(["sentence_embedding"], feed)
        return {"sentence_embedding": torch.from_numpy(vectors)}

    def eval(self) -> OnnxSentenceModel:
        return self

    def train(self, mode: bool = True) -> OnnxSentenceModel:
        return self


def load(model: Any, folder: Path, precision: str, threads: int) -> OnnxSentenceModel:
    """`precision` ("onnx-fp32" or "onnx-int8") of `model`, the fp32 plain-torch model of
    `folder`, exported first where no export is cached."""
    exported = ensure_export(model, folder)
    name = "model-int8.onnx" if precision == "onnx-int8" else "model-fp32.onnx"
    return OnnxSentenceModel(exported / name, model, threads)
