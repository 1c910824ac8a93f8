"""The plain-torch BERT forward for sentence-transformers folders, against sentence-transformers.

Both run fp32 on the same weights; they differ only in kernel order (SDPA against the eager
softmax), so unit vectors agree to ~1e-7. The bound 1e-5 leaves room for other CPUs' kernels.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from docsearch.encoders import get_encoder
from docsearch.encoders.bert_folder import BertSentenceModel, describe, load_bert_folder

TEXTS = [
    "the supplier shall deliver goods within thirty days",
    "Patients RECEIVED a daily dose of the drug " * 40,  # past the window: truncated alike
    "pump valve alarm",
    "",
]


def _reference(folder: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def _both(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    native = load_bert_folder(folder)
    assert isinstance(native, BertSentenceModel)
    reference = _reference(folder)
    assert native.max_seq_length == reference.max_seq_length
    ours, theirs = native.preprocess(TEXTS), reference.preprocess(TEXTS)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # the same ids, masks, types
    with torch.no_grad():
        mine = native(ours)["sentence_embedding"].numpy()
    return mine, reference.encode(TEXTS, convert_to_numpy=True, batch_size=len(TEXTS))


@pytest.mark.parametrize("which", ["tiny", "minilm"])
def test_the_forward_matches_sentence_transformers(which: str, tiny_st: Path) -> None:
    from docsearch.encoders.weights import resolve_model

    folder = tiny_st if which == "tiny" else resolve_model("all-MiniLM-L6-v2")
    mine, theirs = _both(folder)
    assert np.abs(mine - theirs).max() < 1e-5
    assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)


def _variant(tiny_st: Path, tmp_path: Path, edit: Callable[[Path], None]) -> Path:
    folder = tmp_path / "variant"
    shutil.copytree(tiny_st, folder)
    edit(folder)
    return folder


def _set(relative: str, **values: Any) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / relative
        path.write_text(json.dumps({**json.loads(path.read_text()), **values}))

    return edit


def _add_dense(folder: Path) -> None:
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "x.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))


UNCOVERED = {
    "a Dense module": _add_dense,
    "max pooling": _set("1_Pooling/config.json", pooling_mode="max"),
    "pooling without the prompt": _set("1_Pooling/config.json", include_prompt=False),
    "another architecture": _set("config.json", model_type="roberta"),
    "relative positions": _set("config.json", position_embedding_type="relative_key"),
    "loading arguments": _set("sentence_bert_config.json", model_args={"trust_remote_code": True}),
    "weights as a pickle": lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"),
}


@pytest.mark.parametrize("case", sorted(UNCOVERED))
def test_a_folder_it_does_not_describe_is_left_to_sentence_transformers(
    case: str, tiny_st: Path, tmp_path: Path
) -> None:
    assert describe(tiny_st) is not None
    folder = _variant(tiny_st, tmp_path, UNCOVERED[case])
    assert describe(folder) is None and load_bert_folder(folder) is None


def test_an_uncovered_folder_still_encodes_through_sentence_transformers(
    tiny_st: Path, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    # Without a prompt, leaving the prompt out of the pooling changes nothing.
    folder = _variant(tiny_st, tmp_path, UNCOVERED["pooling without the prompt"])
    encoder = get_encoder("sentence-transformers", model=str(folder), precision="fp32")
    assert isinstance(encoder._inference_model(), SentenceTransformer)  # type: ignore[attr-defined]
    native = get_encoder("sentence-transformers", model=str(tiny_st), precision="fp32")
    assert np.abs(encoder.encode_documents(TEXTS) - native.encode_documents(TEXTS)).max() < 1e-5


def test_training_gets_the_sentence_transformers_model_and_encoding_follows_it(
    tiny_st: Path,
) -> None:
    from sentence_transformers import SentenceTransformer

    encoder = get_encoder("sentence-transformers", model=str(tiny_st), precision="fp32")
    assert isinstance(encoder._inference_model(), BertSentenceModel)  # type: ignore[attr-defined]
    before = encoder.encode_documents(TEXTS[:1])
    module = encoder.module  # type: ignore[attr-defined]
    assert isinstance(module, SentenceTransformer)
    with torch.no_grad():  # what a training step does to the weights
        for p in module.parameters():
            p.add_(0.05 * torch.randn_like(p))
    after = encoder.encode_documents(TEXTS[:1])
    assert encoder._inference_model() is module  # type: ignore[attr-defined]
    assert float((before * after).sum()) < 0.999


def test_encoding_imports_neither_sentence_transformers_nor_transformers_models(
    tiny_st: Path,
) -> None:
    """What keeps ~190 MB out of every indexing process (benchmarks/results/peers.md)."""
    code = (
        "import sys\n"
        "from docsearch.encoders import get_encoder\n"
        f"e = get_encoder('sentence-transformers', model={str(tiny_st)!r}, precision='fp32')\n"
        "e.encode_documents(['pump valve alarm'])\n"
        "heavy = ['sentence_transformers', 'scipy', 'sklearn', 'transformers.modeling_utils']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
