"""`docsearch index --engine ray` and `--device` through the command line.

These switch themselves on when `docsearch index` has the options (the lead wires them from the
diff in the scale report); until then they are skipped with that reason.
"""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest

from docsearch.app import index_cmd
from tests.helpers import SAMPLES, run_cli

WIRED = {"engine", "device"} <= set(inspect.signature(index_cmd.index).parameters)
pytestmark = pytest.mark.skipif(not WIRED, reason="`docsearch index` has no --engine/--device yet")


def test_device_cuda_on_a_cpu_machine_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    db = str(tmp_path / "db")
    out = run_cli("index", str(SAMPLES), "--encoder", "hashing", "--device", "cuda", "--db", db)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert out.stderr.startswith("error: --device cuda needs a CUDA GPU")


@pytest.mark.slow
@pytest.mark.ray
def test_engine_ray_indexes_and_reindexes_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("lance_ray")
    root = Path(shutil.copytree(SAMPLES, tmp_path / "docs"))
    args = ["index", str(root), "--encoder", "hashing", "--engine", "ray", "--workers", "1"]
    args += ["--db", str(tmp_path / "db")]
    # A local Ray of this machine's CPUs; its object store kept small on a shared test machine.
    env = {"RAY_ADDRESS": "", "RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION": "0.02"}
    first = run_cli(*args, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "5 new" in first.stderr
    again = run_cli(*args, env=env, timeout=600)  # nothing to do: no Ray
    assert again.returncode == 0 and "5 unchanged" in again.stderr
