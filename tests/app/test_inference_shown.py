"""Which engine and precision run is told to the user: the index report, `models list`,
`doctor` (the cached choice of precision=auto on this machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docsearch.app.cli import app
from docsearch.encoders import get_encoder, precision

runner = CliRunner()


@pytest.mark.usefixtures("one_torch_thread")
def test_the_index_report_names_the_engine_that_embedded(tiny_st: Path, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Pump\n\nThe pump valve alarm sounds when flow stops.\n")
    args = ["index", str(folder), "--encoder", "sentence-transformers", "--model", str(tiny_st)]
    result = runner.invoke(app, [*args, "-o", "precision=bf16", "--db", str(tmp_path / "db")])
    assert result.exit_code == 0, result.output
    assert "inference: torch bf16" in result.stderr


@pytest.mark.usefixtures("one_torch_thread")
def test_models_list_and_doctor_show_what_auto_chose_here(
    tiny_st: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(precision, "_CHOSEN", {})
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)  # a candidate on any CPU
    listed = json.loads(runner.invoke(app, ["models", "list", "--json"]).stdout)
    assert listed["inference"] == []  # nothing measured yet on this (fresh) cache
    for command in (["models", "list"], ["doctor"]):
        said = runner.invoke(app, command).stdout
        assert f"inference on this machine: {precision.NOT_CHOSEN}" in said
    encoder = get_encoder("sentence-transformers", model=str(tiny_st))
    shown = f"{tiny_st}, 1 threads: {encoder.engine} (precision=auto"  # type: ignore[attr-defined]
    listed = json.loads(runner.invoke(app, ["models", "list", "--json"]).stdout)
    [line] = listed["inference"]
    assert line.startswith(shown)
    # The short-query engine is named where it runs (a BERT folder with the onnx extra).
    assert line.endswith("; short queries: onnxruntime fp32") == (encoder._short is not None)  # type: ignore[attr-defined]
    doctor = runner.invoke(app, ["doctor"])
    assert f"inference on this machine: {shown}" in doctor.stdout


@pytest.mark.usefixtures("one_torch_thread")
def test_the_cli_says_while_auto_times_the_precisions_and_then_what_it_chose(
    tiny_st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first index run of a model on a machine times every precision (a minute or two for
    MiniLM on 2 cores): the user is told before it starts and what came of it, once."""
    monkeypatch.setattr(precision, "_CHOSEN", {})
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)  # a candidate on any CPU
    # one round of timings, a verdict for good (a busy machine would make it provisional)
    monkeypatch.setattr(precision, "confident", lambda _measured: True)
    monkeypatch.setattr(precision, "crowded", lambda _measured: False)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Pump\n\nThe pump valve alarm sounds when flow stops.\n")
    args = ["index", str(folder), "--encoder", "sentence-transformers", "--model", str(tiny_st)]
    first = runner.invoke(app, [*args, "--db", str(tmp_path / "db")])
    assert first.exit_code == 0, first.output
    lines = first.stderr.splitlines()
    timing = [
        i for i, line in enumerate(lines) if "timing" in line and "against torch fp32" in line
    ]
    chose = [i for i, line in enumerate(lines) if "precision=auto runs " in line]
    assert len(timing) == 1 and len(chose) == 1 and timing[0] < chose[0], first.stderr
    assert "bf16" in lines[timing[0]] and not lines[timing[0]].startswith("INFO")
    monkeypatch.setattr(precision, "_CHOSEN", {})  # as a new process would start
    (folder / "b.md").write_text("# Valve\n\nClose the valve before the pump is serviced.\n")
    again = runner.invoke(app, [*args, "--db", str(tmp_path / "db")])
    assert again.exit_code == 0 and "timing" not in again.stderr, again.stderr
