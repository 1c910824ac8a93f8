"""benchmarks/rule_latency.py's comparison of two checkouts: its worker must time the checkout it
was given, or the comparison times one code twice and reports no change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import rule_latency


def test_a_worker_refuses_a_docsearch_imported_from_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the worker puts the checkout first
    other = tmp_path / "other-checkout"
    other.mkdir()
    # This process imported docsearch from this checkout already, as an installed copy would
    # be found before the other checkout's.
    with pytest.raises(SystemExit, match="not .*other-checkout"):
        rule_latency.mode_latency(str(other), str(tmp_path / "db"), 1)


def test_the_versions_table_reports_the_median_round_per_checkout() -> None:
    versions = {
        "against": "12bf41f",
        "loads": [1.0, 1.2, 0.9],
        "round_p50_ms": {
            "this checkout": {m: [30.0, 10.0, 20.0] for m in rule_latency.MODES},
            "12bf41f": {m: [40.0, 50.0, 45.0] for m in rule_latency.MODES},
        },
    }
    rows = [line for line in rule_latency.versions_lines(versions) if line.startswith("| hybrid")]
    assert rows == ["| hybrid | 20.0 | 45.0 | 0.44 | 30.0 10.0 20.0 | 40.0 50.0 45.0 |"]
