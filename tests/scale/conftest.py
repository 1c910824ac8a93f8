"""A local Ray cluster for the scale tests: a head that runs nothing and two one-CPU workers.

Kept small (80 MiB object stores, no dashboard) because the test machine is shared. Worker
processes inherit PYTHONPATH and DOCSEARCH_PLUGINS from the environment the nodes start in, so
they can build the `hashing` fake encoder from tests/fakes.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import REPO

OBJECT_STORE = 80 * 2**20  # bytes per node; Ray's minimum is 75 MiB


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    pytest.importorskip("lance_ray")
    from ray.cluster_utils import Cluster

    env = {
        "PYTHONPATH": str(REPO),
        "DOCSEARCH_PLUGINS": "tests.fakes",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "RAY_DEDUP_LOGS": "0",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    head = {"num_cpus": 0, "object_store_memory": OBJECT_STORE, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
