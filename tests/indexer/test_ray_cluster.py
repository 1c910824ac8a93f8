"""Which Ray cluster a run uses and how its actors are placed (no Ray needed for these)."""

from __future__ import annotations

import socket
import threading

import pytest

from docsearch.errors import UsageError
from docsearch.indexer import ray_cluster
from tests.helpers import closed_port


def test_placement_one_actor_per_gpu_or_cpu_workers_that_leave_room() -> None:
    gpu = ray_cluster.placement({"CPU": 32, "GPU": 4}, None)
    assert (gpu.workers, gpu.num_gpus, gpu.num_cpus) == (4, 1.0, 1.0)
    shared = ray_cluster.placement({"CPU": 32, "GPU": 2}, 4)
    assert shared.num_gpus == 0.5
    cpu = ray_cluster.placement({"CPU": 2}, 2)
    assert cpu.workers == 2 and cpu.num_cpus + ray_cluster.EXTRACT_CPUS <= 1.0  # fits a 1-CPU node
    assert ray_cluster.placement({"CPU": 16}, None).workers == 8
    with pytest.raises(UsageError):
        ray_cluster.placement({"CPU": 4}, 0)


def test_one_cpu_leaves_room_for_an_extract_task_beside_the_actor() -> None:
    # An actor holding every CPU starves the extract tasks that feed it: the run never ends.
    alone = ray_cluster.placement({"CPU": 1}, None)
    assert alone.workers == 1 and alone.num_cpus + ray_cluster.EXTRACT_CPUS <= 1.0


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("head:6379", ("head", 6379)),
        ("10.0.0.5:6380", ("10.0.0.5", 6380)),
        ("ray://head:10001", ("head", 10001)),
        ("[::1]:6379", ("::1", 6379)),
    ],
)
def test_addresses_split_into_host_and_port(address: str, expected: tuple[str, int]) -> None:
    assert ray_cluster.split_address(address) == expected


@pytest.mark.parametrize("address", ["head", "head:", ":6379", "head:port", "head:70000"])
def test_an_address_without_a_usable_port_is_one_line(address: str) -> None:
    with pytest.raises(UsageError, match="--address must be HOST:PORT") as caught:
        ray_cluster.split_address(address)
    assert "\n" not in str(caught.value)


def test_a_dead_address_fails_in_seconds_not_forever() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(UsageError, match=f"cannot reach Ray at {address}") as caught:
        ray_cluster.check_reachable(address, timeout=5)
    assert "ray start --head" in str(caught.value) and "\n" not in str(caught.value)


def test_a_listening_address_passes_and_keywords_are_left_to_ray() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        accepted = threading.Thread(target=lambda: server.accept()[0].close(), daemon=True)
        accepted.start()
        ray_cluster.check_reachable(f"127.0.0.1:{port}")
        accepted.join(timeout=5)
    for keyword in ("local", "auto"):
        ray_cluster.check_reachable(keyword)  # no host:port to check; no error
