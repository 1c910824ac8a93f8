"""Which Ray cluster an index run uses, and how its actors are placed on it.

`ray_session` connects to the cluster the user named (`--address`, else RAY_ADDRESS) or starts a
local one, and fails in one line when a named cluster cannot be reached: Ray itself retries an
unreachable GCS forever, which looked like a hung index run. `placement` sizes the embedding
actors from the cluster's resources.
Not here: the dataset pipeline and the commit (`ray_engine.py`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from docsearch.errors import UsageError

EXTRACT_CPUS = 0.25  # per read+extract task: mostly I/O and pure-Python parsing
CONNECT_TIMEOUT_S = 10.0  # a GCS that does not accept a TCP connection in this long is not there
# Addresses Ray resolves itself rather than a host:port we can check first.
RAY_KEYWORDS = {"auto", "local"}
_HINT = "start a cluster with `ray start --head` or leave --address out"


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Connect to `address` (or RAY_ADDRESS, or start a local Ray); shut down only what we started."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            "the Ray engine needs Ray and lance-ray: pip install 'docsearch[ray]'"
        ) from exc
    if ray.is_initialized():
        yield
        return
    target = address or os.environ.get("RAY_ADDRESS") or "local"
    check_reachable(target)
    try:
        # "local", not None: with no address Ray would join the cluster named in its temp dir's
        # address file, and a file left by a killed `ray start` made a run wait forever.
        ray.init(address=target, include_dashboard=False, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UsageError(f"cannot start or reach Ray at {_shown(target)} ({exc}); {_HINT}") from exc
    try:
        yield
    finally:
        ray.shutdown()


def _shown(target: str) -> str:
    return "a new local cluster" if target == "local" else target


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """One TCP connection to a named cluster's host:port, so a wrong or dead address is an error
    in seconds (Ray's own client retries it without end)."""
    if address in RAY_KEYWORDS:
        return
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"cannot reach Ray at {address} ({reason}); {_HINT}") from exc


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of `host:port`, `[v6]:port` or `ray://host:port`; a one-line error otherwise."""
    bare = address.removeprefix("ray://").rstrip("/")
    host, sep, port = bare.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"--address must be HOST:PORT (for example head-node:6379), not {address!r}"
        )
    return host, int(port)


@dataclass
class Placement:
    """How many embedding actors, and the Ray resources of each."""

    workers: int
    num_cpus: float
    num_gpus: float = 0.0


def placement(
    cluster: dict[str, float], workers: int | None, cpus_per_worker: float | None = None
) -> Placement:
    """One actor per GPU when the cluster has GPUs; else CPU workers (default: half the CPUs),
    each leaving room for the read+extract tasks so the two stages run side by side."""
    gpus, cpus = int(cluster.get("GPU", 0)), float(cluster.get("CPU", 1))
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    if gpus:
        n = workers or gpus
        return Placement(n, cpus_per_worker or 1.0, min(1.0, gpus / n))
    n = workers or max(1, int(cpus // 2))
    share = cpus_per_worker or min(1.0, max(0.1, (cpus - EXTRACT_CPUS * n) / n))
    return Placement(n, share)
