"""The fine-tuning run: loop mechanics, checkpoints and --resume, outputs the encoders load."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from docsearch.encoders.base import get_encoder
from docsearch.errors import UsageError
from docsearch.training.data import Pair
from docsearch.training.finetune import CHECKPOINTS, FinetuneJob, finetune
from docsearch.training.loop import LoopState, StepReport, aimed_horizon, run_loop, schedule
from docsearch.training.losses import mnrl
from docsearch.training.trainer import (
    Trainable,
    TrainSettings,
    in_batch_labels,
    mnrl_loss,
    opl_loss,
    pairs_recipe,
)
from tests.training.tiny_st import write_pairs

TEXTS = ["contract party shall terminate", "blood pressure dose", "pump valve alarm"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pairs(tmp_path_factory.mktemp("data") / "pairs.jsonl")


class Recorder:
    """A reporter that can stop the run at a given step, like Ctrl-C or a crash would."""

    def __init__(self, stop_at: int | None = None, error: type[BaseException] = KeyboardInterrupt):
        self.stop_at, self.error = stop_at, error
        self.steps: list[StepReport] = []
        self.messages: list[str] = []

    def status(self, message: str) -> None:
        self.messages.append(message)

    def step(self, report: StepReport) -> None:
        self.steps.append(report)
        if report.step == self.stop_at:
            raise self.error()


def job(model: Path, train: Path, out: Path, resume: bool = False, **settings: Any) -> FinetuneJob:
    base = {"batch_size": 4, "grad_accum": 2, "lr": 1e-3, "bf16": False, "checkpoint_every": 3}
    return FinetuneJob(
        "sentence-transformers",
        {"model": str(model)},
        train,
        out,
        TrainSettings(**(base | settings)),
        evaluate=False,
        resume=resume,
    )


def vectors(options: dict[str, Any]) -> np.ndarray:
    return get_encoder("sentence-transformers", **options).encode_documents(TEXTS)


# ---------------------------------------------------------------------------------------------
# A fake encoder: word vectors summed, no dropout, exact arithmetic


class BagOfWords:
    def __init__(self, dim: int = 8) -> None:
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(64, dim)

    def _ids(self, text: str) -> list[int]:
        return [hashlib.md5(w.encode()).digest()[0] % 64 for w in text.split()]

    def embed(self, texts: Sequence[str], side: str) -> torch.Tensor:
        rows = [self.table(torch.tensor(self._ids(t))).sum(0) for t in texts]
        return torch.stack(rows)  # (n, dim)

    def trainable(self) -> Trainable:
        return Trainable(self, "full fine-tuning", self.table, lambda folder: {})


PAIRS = [
    Pair(f"query {i} word{i}", f"positive {i} word{i} text", f"d{i}", (f"neg {i}", f"other {i}"))
    for i in range(8)
]


def one_step(settings: TrainSettings) -> torch.Tensor:
    model = BagOfWords()
    recipe = pairs_recipe(model.trainable(), PAIRS, settings)
    run_loop(recipe, settings.loop_settings(1, settings.lr or 0.0, bf16=False))
    return model.table.weight.detach().clone()


def test_opl_loss_is_the_mean_squared_cosine_error_over_every_pair() -> None:
    model = BagOfWords()
    loss = opl_loss(model.embed, PAIRS[:2])
    expected = []
    for pair in PAIRS[:2]:
        q = model.embed([pair.query], "query")[0]
        for label, doc in [(1.0, pair.positive), *[(0.0, n) for n in pair.negatives]]:
            d = model.embed([doc], "document")[0]
            expected.append((torch.nn.functional.cosine_similarity(q, d, dim=0) - label) ** 2)
    assert torch.allclose(loss, torch.stack(expected).mean(), atol=1e-6)


def test_gradient_accumulation_equals_one_large_batch() -> None:
    common = {"lr": 0.1, "warmup": 0.0, "bf16": False, "loss": "opl"}
    accumulated = one_step(TrainSettings(batch_size=2, grad_accum=4, **common))
    whole = one_step(TrainSettings(batch_size=8, grad_accum=1, **common))
    assert torch.allclose(accumulated, whole, atol=1e-6)
    assert not torch.allclose(whole, BagOfWords().table.weight)


def test_mnrl_spans_the_whole_effective_batch() -> None:
    model = BagOfWords()
    mnrl_loss(model.embed, PAIRS, 3, 20.0).backward()  # GradCache, in mini-batches of 3
    cached = model.table.weight.grad.clone()  # type: ignore[union-attr]
    model.table.weight.grad = None
    q = model.embed([p.query for p in PAIRS], "query")
    d = model.embed([p.positive for p in PAIRS], "document")
    n = model.embed([x for p in PAIRS for x in p.negatives], "document")
    mnrl(q, d, n, scale=20.0).backward()
    assert torch.allclose(cached, model.table.weight.grad, atol=1e-5)  # type: ignore[arg-type]


def test_a_time_limit_aims_the_decay_at_the_deadline() -> None:
    # 5 s a step: 10 more steps fit in the minute
    assert aimed_horizon(100, LoopState(step=2, seconds=10.0), max_minutes=1.0) == 12
    # 2 s left of a 29 s step: stop here
    assert aimed_horizon(100, LoopState(step=2, seconds=58.0), max_minutes=1.0) == 2
    assert aimed_horizon(100, LoopState(step=2, seconds=70.0), max_minutes=1.0) == 2  # past it
    assert aimed_horizon(100, LoopState(step=2, seconds=10.0), max_minutes=None) == 100


NAN = float("nan")


def test_in_batch_labels_mark_other_pairs_documents_negative_unless_possibly_relevant() -> None:
    pairs = [
        Pair("q0", "p0", "A", ("n0",), negative_docs=("B",)),
        Pair("q1", "p1", "B", ("n1",), negative_docs=("C",)),
        Pair("q2", "p2", "A", ("n2",)),  # saved before negative_docs existed: origin unknown
    ]
    relevant = {"q0": {"A"}, "q1": {"B"}, "q2": {"A"}}
    got = in_batch_labels(pairs, relevant)
    # columns: p0 (A), n0 (B), p1 (B), n1 (C), p2 (A), n2 (?)
    expected = torch.tensor([
        [1.0, 0.0, 0.0, 0.0, NAN, NAN],  # q0: p2 is a window of its own document A
        [0.0, NAN, 1.0, 0.0, 0.0, NAN],  # q1: n0 comes from its document B
        [NAN, 0.0, 0.0, 0.0, 1.0, 0.0],  # q2: its own negative is known to be one
    ])  # fmt: skip
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    assert torch.equal(got.nan_to_num(-1.0), expected.nan_to_num(-1.0))


def test_in_batch_opl_scores_each_query_against_the_whole_micro_batch() -> None:
    model = BagOfWords()
    pairs = [replace(p, negative_docs=(f"n{i}a", f"n{i}b")) for i, p in enumerate(PAIRS[:3])]
    loss = opl_loss(model.embed, pairs, {p.query: {p.doc_id} for p in pairs})
    q = torch.nn.functional.normalize(model.embed([p.query for p in pairs], "query"), dim=-1)
    docs = [d for p in pairs for d in (p.positive, *p.negatives)]
    d = torch.nn.functional.normalize(model.embed(docs, "document"), dim=-1)
    labels = torch.zeros(3, 9)
    labels[0, 0] = labels[1, 3] = labels[2, 6] = 1.0
    assert torch.allclose(loss, ((q @ d.T - labels) ** 2).mean(), atol=1e-6)
    assert not torch.allclose(loss, opl_loss(model.embed, pairs))


def test_in_batch_is_only_for_opl() -> None:
    with pytest.raises(UsageError, match="in-batch"):
        TrainSettings(loss="mnrl", in_batch=True).check()


def test_opl_trains_on_random_negatives_and_contrastive_losses_on_mined_ones() -> None:
    assert TrainSettings(loss="opl", negatives=4).mined_negatives() == 0
    assert TrainSettings(loss="mnrl", negatives=4).mined_negatives() == 2
    assert TrainSettings(loss="opl", negatives=4, mined=3).mined_negatives() == 3


def test_warmup_then_linear_decay_or_constant() -> None:
    factor = schedule(10, 0.2)
    assert [round(factor(s), 3) for s in range(10)] == [
        0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125,
    ]  # fmt: skip
    assert [schedule(10, 0.2, decay=False)(s) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------------------------
# The trainable families: `embed` carries gradients, and the encode methods are it under no_grad


def test_sentence_transformers_encode_is_embed_without_gradients(tiny_st: Path) -> None:
    encoder = get_encoder("sentence-transformers", model=str(tiny_st), query_prompt="query: ")
    vectors = encoder.embed(TEXTS, "query")  # type: ignore[attr-defined]
    assert vectors.requires_grad
    expected = torch.nn.functional.normalize(vectors.detach(), dim=-1).numpy()
    assert np.allclose(encoder.encode_queries(TEXTS), expected, atol=1e-6)
    assert not np.allclose(encoder.encode_documents(TEXTS), expected, atol=1e-3)  # no prompt


def test_llm2vec_encode_is_embed_without_gradients(tmp_path: Path) -> None:
    from tests.encoders.tiny_decoder import folder

    encoder = get_encoder("llm2vec", model=str(folder("llama", tmp_path)), max_length=32)
    vectors = encoder.embed(TEXTS, "query")  # type: ignore[attr-defined]
    assert vectors.requires_grad
    expected = torch.nn.functional.normalize(vectors.detach(), dim=-1).numpy()
    assert np.allclose(encoder.encode_queries(TEXTS), expected, atol=1e-5)
    assert not np.allclose(encoder.encode_documents(TEXTS), expected, atol=1e-3)  # no instruction


# ---------------------------------------------------------------------------------------------
# Runs on the tiny sentence-transformers model


@pytest.fixture(scope="module")
def reference(tiny_st: Path, pairs_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An uninterrupted 6-step run."""
    out = tmp_path_factory.mktemp("runs") / "reference"
    return finetune(job(tiny_st, pairs_file, out, steps=6))


def test_a_run_writes_an_encoder_folder_with_a_card(reference: dict, tiny_st: Path) -> None:
    out = Path(reference["load_options"]["adapter"])
    assert reference["steps"] == 6 and len(reference["losses"]) == 6
    assert reference["method"] == "full fine-tuning"
    assert not (out / CHECKPOINTS).exists()
    record = json.loads((out / "training.json").read_text())
    assert record["data"]["pairs"] == 36 and "negatives: 4 per pair" in " ".join(
        record["data"]["notes"]
    )
    card = (out / "README.md").read_text()
    assert f"--adapter {out}" in card and "opl" in card
    trained, base = vectors(reference["load_options"]), vectors({"model": str(tiny_st)})
    assert not np.allclose(trained, base, atol=1e-3)


def test_resume_after_ctrl_c_ends_where_an_uninterrupted_run_does(
    reference: dict, tiny_st: Path, pairs_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        finetune(job(tiny_st, pairs_file, out, steps=6), Recorder(stop_at=4))
    saved = sorted(p.name for p in (out / CHECKPOINTS).glob("step-*"))
    assert saved == ["step-000003", "step-000004"]  # periodic, then the one Ctrl-C wrote
    with pytest.raises(UsageError, match="--resume"):
        finetune(job(tiny_st, pairs_file, out, steps=6))
    recorder = Recorder()
    record = finetune(job(tiny_st, pairs_file, out, steps=6, resume=True), recorder)
    assert [s.step for s in recorder.steps] == [5, 6]
    assert "resuming from step-000004" in recorder.messages
    assert np.allclose(record["losses"], reference["losses"], atol=1e-5)
    assert np.allclose(
        vectors(record["load_options"]), vectors(reference["load_options"]), atol=1e-5
    )


def test_a_crash_resumes_from_the_last_periodic_checkpoint(
    reference: dict, tiny_st: Path, pairs_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        finetune(
            job(tiny_st, pairs_file, out, steps=6, checkpoint_every=2),
            Recorder(stop_at=5, error=RuntimeError),
        )
    assert sorted(p.name for p in (out / CHECKPOINTS).glob("step-*")) == [
        "step-000002",
        "step-000004",
    ]
    recorder = Recorder()
    record = finetune(
        job(tiny_st, pairs_file, out, steps=6, checkpoint_every=2, resume=True), recorder
    )
    assert [s.step for s in recorder.steps] == [5, 6]
    assert np.allclose(
        vectors(record["load_options"]), vectors(reference["load_options"]), atol=1e-5
    )


def test_resume_refuses_other_settings_and_empty_folders(
    tiny_st: Path, pairs_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        finetune(job(tiny_st, pairs_file, out, steps=4), Recorder(stop_at=1))
    with pytest.raises(UsageError, match="these differ: settings"):
        finetune(job(tiny_st, pairs_file, out, steps=4, lr=5e-4, resume=True))
    with pytest.raises(UsageError, match="nothing to resume"):
        finetune(job(tiny_st, pairs_file, tmp_path / "never", steps=4, resume=True))
    shutil.rmtree(out)


def test_the_time_limit_stops_the_run_and_still_saves(
    tiny_st: Path, pairs_file: Path, tmp_path: Path
) -> None:
    record = finetune(job(tiny_st, pairs_file, tmp_path / "out", steps=50, max_minutes=0))
    assert record["steps"] == 0 and "minute limit" in record["stopped"]
    assert np.allclose(vectors(record["load_options"]), vectors({"model": str(tiny_st)}))


def test_held_out_pairs_are_scored_before_and_after(
    tiny_st: Path, pairs_file: Path, tmp_path: Path
) -> None:
    run = job(tiny_st, pairs_file, tmp_path / "out", steps=3)
    run.evaluate = True
    record = finetune(run)
    evaluation = record["evaluation"]
    assert record["data"]["pairs"] < 36  # some pairs were held out
    assert "held-out" in evaluation["set"]
    for moment in ("before", "after"):
        assert set(evaluation[moment]) == {"vector", "hybrid"}
        assert 0.0 <= evaluation[moment]["vector"]["ndcg@10"] <= 1.0
    assert "| vector | ndcg@10 |" in (tmp_path / "out" / "README.md").read_text()


def test_only_trainable_families_are_accepted(pairs_file: Path, tmp_path: Path) -> None:
    run = FinetuneJob("hashing", {}, pairs_file, tmp_path / "out", evaluate=False)
    with pytest.raises(UsageError, match="sentence-transformers and llm2vec"):
        finetune(run)
    with pytest.raises(UsageError, match="unknown loss"):
        finetune(FinetuneJob("hashing", {}, pairs_file, tmp_path / "o", TrainSettings(loss="x")))


# ---------------------------------------------------------------------------------------------
# LoRA on a decoder (llm2vec)


def test_llm2vec_trains_a_lora_adapter_the_encoder_loads(pairs_file: Path, tmp_path: Path) -> None:
    from tests.encoders.tiny_decoder import folder

    base = folder("llama", tmp_path)
    options = {"model": str(base), "max_length": 32, "doc_max_length": 24}
    run = FinetuneJob(
        "llm2vec", options, pairs_file, tmp_path / "lora",
        TrainSettings(steps=2, batch_size=2, grad_accum=1, lr=5e-3, bf16=False), evaluate=False,
    )  # fmt: skip
    record = finetune(run)
    out = tmp_path / "lora"
    assert record["method"] == "LoRA" and (out / "adapter_config.json").exists()
    assert record["load_options"] == {**options, "adapter": str(out.resolve())}
    trained = get_encoder("llm2vec", **record["load_options"]).encode_documents(TEXTS)
    plain = get_encoder("llm2vec", **options).encode_documents(TEXTS)
    assert trained.shape == plain.shape and not np.allclose(trained, plain, atol=1e-4)


def test_llm2vec_mntp_runs_the_recipe_step(pairs_file: Path, tmp_path: Path) -> None:
    from tests.encoders.tiny_decoder import folder

    base = folder("llama", tmp_path)
    settings = TrainSettings(loss="mntp", steps=2, batch_size=2, lr=1e-3)
    run = FinetuneJob("llm2vec", {"model": str(base)}, pairs_file, tmp_path / "m", settings)
    run.evaluate = False
    record = finetune(run)
    out = tmp_path / "m"
    assert record["steps"] == 2 and record["method"].startswith("LoRA (LLM2Vec")
    assert (out / "adapter_config.json").exists() and "mntp" in (out / "README.md").read_text()
    assert get_encoder("llm2vec", **record["load_options"]).dim == 64
    resume = FinetuneJob("llm2vec", {"model": str(base)}, pairs_file, out, settings, resume=True)
    with pytest.raises(UsageError):
        finetune(resume)


def test_simcse_on_sentence_transformers_uses_the_loop(
    tiny_st: Path, pairs_file: Path, tmp_path: Path
) -> None:
    record = finetune(job(tiny_st, pairs_file, tmp_path / "s", steps=2, loss="simcse"))
    assert record["steps"] == 2 and record["losses"][0] > 0
    assert "negatives" not in " ".join(record["data"]["notes"])  # simcse needs none
