"""benchmarks/gpu.py: skips cleanly without CUDA; its smoke mode runs every case on the CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "benchmarks" / "gpu.py"


def test_without_cuda_it_says_so_and_writes_nothing(tmp_path: Path) -> None:
    code = (
        "import torch; torch.cuda.is_available = lambda: False; import runpy, sys; "
        f"sys.argv = ['gpu.py', '--out', {str(tmp_path)!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "skipped" in out.stdout and "no CUDA device" in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_markdown_table_has_a_column_per_length() -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    assert spec and spec.loader
    gpu = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bench"] = gpu  # dataclasses look their module up there
    spec.loader.exec_module(gpu)
    report = {
        "date": "d", "command": "c", "hardware": {}, "lengths": [512, 2048],
        "throughput": [
            {"encoder": "m2-bert", "shape": "80M", "tokens": 512, "tokens_per_s": 1000.0},
            {"encoder": "m2-bert", "shape": "80M", "tokens": 2048, "skipped": "out of GPU memory"},
            {"encoder": "nv-embed", "shape": "s", "skipped": "missing"},
        ],
        "agreement": [{"kernel": "sdpa-flash", "heads": 9, "head_dim": 64, "tokens": 512,
                       "causal": True, "max_abs_diff": 0.0039}],
    }  # fmt: skip
    text = gpu.markdown(report)
    assert "| m2-bert | 80M | 1,000 | skipped |" in text
    assert "| nv-embed | s | skipped | skipped |" in text
    assert "3.90e-03" in text and "out of GPU memory" in text


@pytest.mark.slow
def test_smoke_mode_runs_every_encoder_family_on_the_cpu(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    measured = {(r["encoder"], r["tokens"]) for r in report["throughput"] if "tokens_per_s" in r}
    for name in ("m2-bert", "kv-embedding", "llm2vec", "nv-embed"):
        assert {(name, 32), (name, 64)} <= measured, report["throughput"]
    forward = {(r["shape"], r["tokens"]) for r in report["plain_forward"] if r["tflops"] >= 0}
    assert forward == {(s, n) for s in ("tiny-llama", "tiny-llama-2") for n in (32, 64)}
    assert all(r["share_of_peak"] > 0 for r in report["plain_forward"])
    assert (tmp_path / "gpu.md").read_text().startswith("# GPU throughput")
