"""One encode call's batches spread over a few threads on the CPU, each with its share of torch's
threads.

Why: on few cores most of a small encoder's ops are short (int8's scaling passes, LayerNorm,
GELU, attention's softmax), and a forward that splits every op over all threads waits at each
op for the slowest of them. Two batches at once on one thread each ran MiniLM 15-20% faster than
one batch at a time on both threads (2 cores, fp32 and int8; benchmarks/results/speed.md). On
more cores the threads are split evenly among at most MAX_WORKERS workers (not measured there).
The workers live as long as the process, so torch's per-thread setup is paid once.

Not here: which rows form a batch (batching.py), one text at a time (a search query runs one
forward on the calling thread).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Batch = TypeVar("Batch")
MAX_WORKERS = 4


def encode_batches(batches: Sequence[Batch], encode: Callable[[Batch], None], device: str) -> None:
    """`encode(batch)` for every batch, under no_grad, on up to MAX_WORKERS threads when
    `device` is the CPU and torch has a thread for each; in order on this thread otherwise.
    `encode` must only write its own batch's results. The first error is raised once the
    batches not yet started are cancelled."""
    import torch

    threads = torch.get_num_threads()
    workers = min(MAX_WORKERS, threads, len(batches)) if device == "cpu" else 1
    if workers < 2:
        for batch in batches:
            _without_grad(encode, batch)
        return
    pool = _pool(workers, threads // workers, os.getpid())
    futures: list[Future[None]] = [pool.submit(_without_grad, encode, b) for b in batches]
    try:
        for future in futures:
            future.result()
    finally:  # an error or an interrupt: no batch starts after it
        for future in futures:
            future.cancel()


def _without_grad(encode: Callable[[Batch], None], batch: Batch) -> None:
    import torch

    with torch.no_grad():  # grad mode belongs to each thread
        encode(batch)


@functools.cache
def _pool(workers: int, threads: int, pid: int) -> ThreadPoolExecutor:
    """The workers of this process (`pid`): a forked child has none of its parent's threads,
    so a pool it inherited would never run a batch."""
    import torch

    return ThreadPoolExecutor(
        workers,
        thread_name_prefix="docsearch-encode",
        initializer=torch.set_num_threads,  # with OpenMP, each thread's own count
        initargs=(threads,),
    )
