"""`docsearch index --engine ray` and `--device` through the command line.

These switch themselves on when `docsearch index` has the options (the lead wires them from the
diff in the scale report); until then they are skipped with that reason.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
from pathlib import Path

import pytest

from docsearch.app import index_cmd
from tests.helpers import SAMPLES, closed_port, run_cli

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
    first = run_cli(*args, env=env, timeout=420)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "5 new" in first.stderr
    again = run_cli(*args, env=env, timeout=120)  # nothing to do: no Ray
    assert again.returncode == 0 and "5 unchanged" in again.stderr


@pytest.mark.slow
@pytest.mark.ray
def test_a_stale_cluster_file_does_not_capture_a_local_run(tmp_path: Path) -> None:
    """Ray records the last `ray start` cluster in its temp dir; a file left by a killed cluster
    once made `--engine ray` without --address wait on a dead GCS forever."""
    pytest.importorskip("lance_ray")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{closed_port()}")
        args = ["index", str(SAMPLES), "--encoder", "hashing", "--engine", "ray", "--workers", "1"]
        env = {
            "RAY_ADDRESS": "",
            "RAY_TMPDIR": str(ray_tmp),
            "RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION": "0.02",
        }
        out = run_cli(*args, "--db", str(tmp_path / "db"), env=env, timeout=420)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "5 new" in out.stderr
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.ray
def test_an_unreachable_address_is_one_line_and_quick(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{closed_port()}"
    args = ["index", str(SAMPLES), "--encoder", "hashing", "--engine", "ray", "--address", address]
    out = run_cli(*args, "--db", str(tmp_path / "db"), timeout=120)
    assert out.returncode == 2  # a usage error: the address the user gave
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [out.stderr.splitlines()[-1]], out.stderr  # one line, no Ray traceback
    assert errors[0].startswith(f"error: cannot reach Ray at {address} ("), out.stderr
