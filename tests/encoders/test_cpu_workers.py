"""One encode call's batches on a few CPU threads: each batch once, no gradients, errors raised."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import numpy as np
import pytest
import torch

from docsearch.encoders import cpu_workers, get_encoder
from docsearch.encoders.cpu_workers import encode_batches


def test_every_batch_runs_once_on_workers_with_one_thread_each(two_torch_threads: None) -> None:
    seen: dict[int, tuple[str, int, bool]] = {}
    lock = threading.Lock()

    def encode(batch: int) -> None:
        with lock:
            assert batch not in seen
            here = threading.current_thread().name, torch.get_num_threads()
            seen[batch] = (*here, torch.is_grad_enabled())

    encode_batches(list(range(12)), encode, "cpu")
    assert sorted(seen) == list(range(12))
    assert all(name.startswith("docsearch-encode") for name, _, _ in seen.values())
    assert {threads for _, threads, _ in seen.values()} == {1}  # 2 threads, 2 workers
    assert not any(grad for _, _, grad in seen.values())
    assert torch.get_num_threads() == 2  # the caller's own count is untouched


def test_one_batch_or_another_device_runs_on_the_calling_thread(two_torch_threads: None) -> None:
    names: list[str] = []

    def encode(_: int) -> None:
        names.append(threading.current_thread().name)
        assert not torch.is_grad_enabled()

    encode_batches([0], encode, "cpu")
    encode_batches([0, 1, 2], encode, "cuda")
    assert names == [threading.current_thread().name] * 4


def test_an_error_is_raised_and_the_workers_stay_usable(two_torch_threads: None) -> None:
    def encode(batch: int) -> None:
        if batch == 3:
            raise ValueError("bad batch 3")

    with pytest.raises(ValueError, match="bad batch 3"):
        encode_batches(list(range(40)), encode, "cpu")
    done: list[int] = []
    encode_batches([0, 1, 2], done.append, "cpu")
    assert sorted(done) == [0, 1, 2]


def test_minilm_vectors_match_one_batch_at_a_time(
    two_torch_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers change which thread runs a batch, not the vectors: the same texts encoded
    on one thread agree within fp32 summation-order error (cosine, per text)."""
    encoder = get_encoder("sentence-transformers", precision="fp32", batch_size=2)
    texts = [f"clause {i}: the supplier shall deliver goods " * (1 + i % 5) for i in range(9)]
    parallel = encoder.encode_documents(texts)
    monkeypatch.setattr(cpu_workers, "MAX_WORKERS", 1)
    serial = encoder.encode_documents(texts)
    assert parallel.shape == serial.shape == (9, 384)
    cosine = np.sum(parallel * serial, axis=1)
    assert np.all(cosine > 1 - 1e-5)


def _encode_in_child(result: Any) -> None:
    done: list[int] = []
    encode_batches([0, 1, 2, 3], done.append, "cpu")
    result.put(sorted(done))


def test_a_forked_process_gets_workers_of_its_own(two_torch_threads: None) -> None:
    """The parent's workers exist before the fork; the child's batches still run."""
    encode_batches([0, 1, 2], lambda _: None, "cpu")
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_encode_in_child, args=(result,))
    child.start()
    try:
        assert result.get(timeout=60) == [0, 1, 2, 3]
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
