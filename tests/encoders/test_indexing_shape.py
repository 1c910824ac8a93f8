"""What precision=auto times: each candidate run as indexing runs it (indexing_shape.py).

Fake models record the rows of every forward and the torch threads it ran on; no real model
and no timing here (the timing's logic is tested in test_timing.py).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from docsearch.encoders import cpu_workers
from docsearch.encoders.indexing_shape import sample_windows, timed_run, window_count


class Recorder:
    """A model that returns each row's index as its vector and records every forward."""

    def __init__(self, own_threads: bool = False) -> None:
        self.own_threads = own_threads
        self.forwards: list[tuple[int, str, int]] = []
        self.lock = threading.Lock()

    def __call__(self, features: dict[str, Any]) -> dict[str, Any]:
        rows = features["row"]
        with self.lock:
            here = threading.current_thread().name
            self.forwards.append((len(rows), here, torch.get_num_threads()))
        return {"sentence_embedding": rows.float().unsqueeze(1).repeat(1, 3)}


def batched(count: int):  # type: ignore[no-untyped-def]
    def features(size: int) -> list[dict[str, Any]]:
        return [{"row": torch.arange(i, min(i + size, count))} for i in range(0, count, size)]

    return features


def test_the_sample_gives_every_worker_a_full_batch_of_distinct_full_windows() -> None:
    assert window_count(2, 16) == 32 and window_count(1, 16) == 16
    assert window_count(64, 16) == 16 * cpu_workers.MAX_WORKERS
    texts = sample_windows(32)
    assert len(set(texts)) == 32 and all(len(t.split()) >= 250 for t in texts)


def test_torch_candidates_run_on_the_encoders_workers_at_their_own_batch_size(
    two_torch_threads: None,
) -> None:
    """As indexing runs them on 2 threads: fp32 in 2 batches of 16 on the encoder's workers,
    int8 in 8 batches of 4; the vectors come back in sample order."""
    models = {"fp32": Recorder(), "int8": Recorder()}
    sizes = {"fp32": 16, "int8": 4}
    run = timed_run(models, batched(32), sizes.__getitem__)
    for name, model in models.items():
        vectors = run(name)
        assert vectors[:, 0].tolist() == list(range(32))
        rows = sorted(r for r, _, _ in model.forwards)
        assert rows == [sizes[name]] * (32 // sizes[name])
        # the workers' own thread counts are cpu_workers' (test_cpu_workers.py)
        assert all(where.startswith("docsearch-encode") for _, where, _ in model.forwards)
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_torch_threads")
def test_an_engine_with_threads_of_its_own_runs_one_batch_at_a_time_here() -> None:
    """ONNX Runtime's session splits each batch over its own threads, as when indexing."""
    model = Recorder(own_threads=True)
    run = timed_run({"onnx-fp32": model}, batched(32), lambda _: 16)
    assert run("onnx-fp32")[:, 0].tolist() == list(range(32))
    assert [(r, w) for r, w, _ in model.forwards] == [(16, threading.current_thread().name)] * 2
