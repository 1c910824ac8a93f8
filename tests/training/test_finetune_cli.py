"""`docsearch finetune` from the command line, and its output used by `index` and `Retriever`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from docsearch.app import cli
from docsearch.app.finetune_cmd import finetune_command
from tests.training.tiny_st import write_beir, write_documents

runner = CliRunner()
app = typer.Typer()
app.command("finetune")(finetune_command)
app.command("other")(lambda: None)  # two commands, so typer keeps the command name


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_unlabelled_folder_end_to_end_then_index_and_search(tiny_st: Path, tmp_path: Path) -> None:
    docs = write_documents(tmp_path / "docs")
    out = tmp_path / "tuned"
    args = ["finetune", "--train", str(docs), "--output", str(out), "--model", str(tiny_st)]
    args += ["--loss", "opl", "--steps", "2", "--batch-size", "2", "--grad-accum", "2"]
    result = runner.invoke(app, [*args, "--lr", "1e-3", "--no-bf16"])
    assert result.exit_code == 0, result.output
    assert f"--adapter {out.resolve()}" in result.stdout
    assert "step 2/2" in result.stderr and "pseudo" not in result.stdout
    assert (out / "README.md").exists() and (out / "modules.json").exists()

    db = str(tmp_path / "db")
    indexed = runner.invoke(
        cli.app,
        ["index", str(docs), "--collection", "tuned", "--encoder", "sentence-transformers",
         "--model", str(tiny_st), "--adapter", str(out.resolve()), "--db", db],
    )  # fmt: skip
    assert indexed.exit_code == 0, indexed.output
    from docsearch.retriever import Retriever

    retriever = Retriever("tuned", db=db)
    assert retriever.store.meta.encoder["options"]["adapter"] == str(out.resolve())
    hits = retriever.search("pump valve alarm", k=2, mode="vector")
    assert hits and hits[0].path.endswith(".md")


def test_in_batch_opl_from_the_command_line(tiny_st: Path, tmp_path: Path) -> None:
    beir = write_beir(tmp_path / "beir")
    base = ["finetune", "--train", str(beir), "--model", str(tiny_st), "--steps", "1", "--no-eval"]
    base += ["--batch-size", "3", "--grad-accum", "1", "--negatives", "2", "--no-bf16"]
    out = tmp_path / "tuned"
    result = runner.invoke(app, [*base, "--output", str(out), "--in-batch"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "training.json").read_text())["settings"]["in_batch"] is True
    refused = runner.invoke(
        app, [*base, "--output", str(tmp_path / "o"), "--in-batch", "--loss", "mnrl"]
    )
    assert refused.exit_code == 2
    assert (
        refused.stderr.strip()
        == "error: --in-batch is for --loss opl (mnrl always uses in-batch negatives)"
    )


def test_bad_training_data_is_one_line_naming_the_line(tiny_st: Path, tmp_path: Path) -> None:
    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"query": "q", "positive": "p"}\n{"query": "q",\n')
    result = runner.invoke(
        app,
        ["finetune", "--train", str(bad), "--output", str(tmp_path / "o"), "--model", str(tiny_st)],
    )
    assert result.exit_code == 2
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last
        == f"error: {bad}:2: not valid JSON (Expecting property name enclosed in double quotes)"
    )


def test_ctrl_c_points_to_resume(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import docsearch.training.finetune as module

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "finetune", interrupted)
    result = runner.invoke(
        app, ["finetune", "--train", str(tmp_path), "--output", str(tmp_path / "o")]
    )
    assert result.exit_code == 130 and "--resume" in result.stderr


def test_importing_the_command_loads_no_torch() -> None:
    code = "import sys, docsearch.app.finetune_cmd; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
