"""The baselines (last-token, mean, PromptEOL, Echo) against pooling written out by hand on the
same tiny random decoder, plus registry, spec and batching behaviour."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel

from docsearch.encoders.base import get_encoder
from docsearch.encoders.baselines import PROMPTEOL
from tests.encoders import tiny_decoder

TEXTS = ["The lessee shall pay the rent.", "Tighten the bolts before use, then check again.", "A"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_decoder.folder("llama", tmp_path_factory.mktemp("baselines"))


def states(folder: Path, text: str) -> tuple[torch.Tensor, list[int]]:
    """Final hidden states (seq, dim) of `text` run alone, and its token ids."""
    tok = tiny_decoder.tokenizer()
    net = AutoModel.from_pretrained(str(folder), attn_implementation="eager").float().eval()
    ids = tok(text)["input_ids"]
    with torch.no_grad():
        return net(input_ids=torch.tensor([ids])).last_hidden_state[0], ids


def unit(x: torch.Tensor) -> np.ndarray:
    return (x / x.norm()).numpy()


def test_last_token_and_mean_pool_the_raw_text(folder: Path) -> None:
    last = get_encoder("last-token", model=str(folder), dtype="float32")
    mean = get_encoder("mean", model=str(folder), dtype="float32")
    for text, a, b in zip(
        TEXTS, last.encode_documents(TEXTS), mean.encode_queries(TEXTS), strict=True
    ):
        hidden, _ = states(folder, text)
        np.testing.assert_allclose(a, unit(hidden[-1]), atol=1e-5)
        np.testing.assert_allclose(b, unit(hidden.mean(0)), atol=1e-5)


def test_prompteol_is_the_last_token_of_the_one_word_prompt(folder: Path) -> None:
    enc = get_encoder("prompteol", model=str(folder), dtype="float32")
    assert enc.query_template == enc.document_template == PROMPTEOL
    assert PROMPTEOL == 'This sentence : "{text}" means in one word:"'
    got = enc.encode_documents(TEXTS[:1])[0]
    hidden, _ = states(folder, PROMPTEOL.replace("{text}", TEXTS[0]))
    np.testing.assert_allclose(got, unit(hidden[-1]), atol=1e-5)


def test_echo_pools_only_the_second_copy(folder: Path) -> None:
    enc = get_encoder("echo", model=str(folder), dtype="float32")
    text = TEXTS[1]
    full = enc.document_template.replace("{text}", text)
    hidden, ids = states(folder, full)
    tok = tiny_decoder.tokenizer()
    n_text = len(tok(text, add_special_tokens=False)["input_ids"])
    want = unit(hidden[len(ids) - n_text :].mean(0))
    np.testing.assert_allclose(enc.encode_documents([text])[0], want, atol=1e-5)
    wrong = unit(hidden[1 : 1 + n_text].mean(0))  # the first copy: not what echo pools
    assert not np.allclose(want, wrong, atol=1e-3)
    assert "Query again:{text}" in enc.query_template
    mean = get_encoder("mean", model=str(folder), dtype="float32")
    assert enc.max_tokens is not None and mean.max_tokens is not None
    assert enc.max_tokens < mean.max_tokens // 2 + 1  # the text appears twice


@pytest.mark.parametrize("name", ["last-token", "mean", "prompteol", "echo"])
def test_registered_batched_and_rebuildable(folder: Path, name: str) -> None:
    enc = get_encoder(name, model=str(folder), dtype="float32")
    together = enc.encode_documents(TEXTS)
    assert together.shape == (3, 64) and together.dtype == np.float32
    alone = np.vstack([enc.encode_documents([t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    spec = enc.spec()
    assert spec["encoder"] == name and spec["options"]["model"] == str(folder)
    again = get_encoder(name, **spec["options"], dtype="float32")
    np.testing.assert_allclose(again.encode_documents(TEXTS), together, atol=1e-6)
    assert enc.encode_queries([]).shape == (0, 64)
    assert enc.count_tokens(["the rent"]) == [len(enc.token_spans("the rent"))]
