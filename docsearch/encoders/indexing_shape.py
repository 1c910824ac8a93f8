"""A candidate precision run the way indexing runs it: what precision=auto times.

Why: "auto" used to time each candidate on one 4-text batch with all of torch's threads, while
indexing hands the encoder many full windows, which it splits into batches (16 rows; int8 4)
spread over `cpu_workers` threads with one torch thread each on 2 cores (ONNX Runtime: one
batch at a time on its session's own threads). Kernels rank differently in those two shapes: on
a Xeon with VNNI and no bf16, torch int8 ran 1.53x fp32 with one thread per worker and 0.47x
with two threads on one batch, so a verdict made on the old shape could pick the engine that
loses the whole run. So the timed sample is full windows, one batch per worker at the largest
batch size (`window_count`), and each candidate runs them through `run_batches`, the dispatch
the encoder's own `_vectors` uses, at the batch size it would index with.

Not here: the timing and the verdict (timing.py, precision.py), the batch sizes themselves
(sentence_transformers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from docsearch.encoders.cpu_workers import MAX_WORKERS, encode_batches

Batch = TypeVar("Batch")
# Varied words, so that no two windows are alike, from the domains docsearch serves.
_WORDS = (
    "the supplier shall deliver goods within thirty days of each purchase order and the buyer "
    "may terminate this agreement for cause if payment is late patients received a daily dose "
    "of the drug and blood pressure fell in the treated group"
).split()
WINDOW_WORDS = 250  # more than MiniLM's 256-token window holds: every row is a full window


def window_count(threads: int, batch: int) -> int:
    """Windows in the timed sample: one batch of `batch` rows for each worker indexing runs
    on `threads` torch threads (`cpu_workers.encode_batches`), so that every worker is busy."""
    return batch * max(1, min(MAX_WORKERS, threads))


def sample_windows(count: int) -> list[str]:
    """`count` texts that fill a window, each the words in another order."""
    n = len(_WORDS)
    return [" ".join(_WORDS[(i * 7 + j) % n] for j in range(WINDOW_WORDS)) for i in range(count)]


def run_batches(
    model: Any, batches: Sequence[Batch], encode: Callable[[Batch], None], device: str
) -> None:
    """`encode(batch)` for every batch as the encoder runs `model`: an engine with threads of
    its own (ONNX Runtime's session: `own_threads`) one batch at a time, a torch model on
    `cpu_workers`' threads."""
    if getattr(model, "own_threads", False):
        for batch in batches:
            encode(batch)
    else:
        encode_batches(batches, encode, device)


def timed_run(
    models: dict[str, Any],
    features: Callable[[int], list[dict[str, Any]]],
    batch_size: Callable[[str], int],
    device: str = "cpu",
) -> Callable[[str], Any]:
    """`run(name)`: the rows' vectors of candidate `models[name]` over the sample, as one
    (rows, dim) tensor in sample order, forwarded in the batches `features(batch_size(name))`
    gives (tokenised before the timing: every candidate tokenises alike)."""
    import torch

    def run(name: str) -> Any:
        model = models[name]
        batches = features(batch_size(name))
        found: list[Any] = [None] * len(batches)

        def encode(index: int) -> None:
            found[index] = model(dict(batches[index]))["sentence_embedding"]

        run_batches(model, range(len(batches)), encode, device)
        return torch.cat([f.float() for f in found])

    return run
