"""The command line: exit codes, one-line errors, output channels, lazy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docsearch.app.cli import app
from tests.helpers import REPO, bad_folder, copy_samples, run_cli

runner = CliRunner()


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, str]:
    root = copy_samples(tmp_path / "samples")
    db = str(tmp_path / "db")
    result = invoke("index", str(root), "--encoder", "hashing", "--db", db)
    assert result.exit_code == 0, result.output
    return root, db


def test_help_is_fast_and_imports_no_heavy_library() -> None:
    code = (
        "import sys; from docsearch.app.cli import app; "
        "heavy = [m for m in ('torch', 'transformers', 'lancedb', 'gradio', 'pyarrow') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("index", "search", "collections", "doctor", "models"):
        assert command in result.output


def test_index_then_search_prints_ranked_results(indexed: tuple[Path, str]) -> None:
    _, db = indexed
    result = invoke("search", "motor stall E-MOT-21", "--db", db, "-k", "2")
    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first.startswith("1. ") and "X200" in first
    assert "p. 2" in result.stdout and "**E-MOT-21**" in result.stdout
    assert "lexical #1" in result.stdout
    # Each document is shown by its best passages, one line each: "p. 2: ... **E-MOT-21** ...".
    passage_lines = [line for line in result.stdout.splitlines() if line.startswith("   p. ")]
    assert passage_lines and "**E-MOT-21**" in passage_lines[0]
    # A short hybrid query: every leg of the default rule, with its rank and raw score.
    legs = result.stdout.splitlines()[1]
    assert all(f"{leg} #" in legs for leg in ("doc_dense", "doc_lexical", "dense"))
    assert "agreement" not in legs  # the default rule has no agreement guard


def test_search_json_and_collection_name_from_folder(indexed: tuple[Path, str]) -> None:
    _, db = indexed
    result = invoke("search", "Section 7.2(a)", "--db", db, "--json", "--mode", "lexical")
    hits = json.loads(result.stdout)
    assert hits[0]["path"].endswith("acme-globex-msa.pdf") and hits[0]["pages"] == "3"
    best = hits[0]["passages"][0]
    assert best["pages"] == "3" and "**7.2(a)**" in best["snippet"]
    assert best["snippet"] == hits[0]["snippet"]  # the hit's snippet is its best passage's
    assert hits[0]["scores"]["fused"]["rank"] == 1
    listed = json.loads(invoke("collections", "list", "--json", "--db", db).stdout)
    assert [c["name"] for c in listed] == ["samples"]
    assert listed[0]["files"] == 5 and listed[0]["encoder_spec"]["encoder"] == "hashing"


def test_second_index_run_embeds_nothing(indexed: tuple[Path, str]) -> None:
    root, db = indexed
    result = invoke("index", str(root), "--db", db)
    assert result.exit_code == 0
    assert "0 embedded" in result.stderr and "5 unchanged" in result.stderr


def test_bad_folder_exits_3_and_names_each_bad_file(tmp_path: Path) -> None:
    expected = bad_folder(tmp_path / "bad")
    result = invoke(
        "index", str(tmp_path / "bad"), "--encoder", "hashing", "--db", str(tmp_path / "db")
    )
    assert result.exit_code == 3
    failed = [line for line in result.stderr.splitlines() if line.startswith("failed: ")]
    assert len(failed) == len(expected)
    for name, fragment in expected.items():
        line = next(f for f in failed if f"/{name}: " in f)
        assert fragment.lower() in line.lower()
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["index", "{tmp}/nope"], 2, "no such file or folder"),
        (["index", "{tmp}", "--encoder", "bogus"], 2, "unknown encoder 'bogus'; available:"),
        (["search", "   "], 2, "empty query"),
        (["search", "x", "--collection", "missing"], 2, "no collection named 'missing'"),
        (["index", "{tmp}", "-o", "novalue"], 2, "use KEY=VALUE"),
    ],
)
def test_bad_cli_input_is_one_clear_line(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = run_cli(
        *[a.replace("{tmp}", str(tmp_path)) for a in args], "--db", str(tmp_path / "db")
    )
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1


def test_encoder_mismatch_says_how_to_reindex(indexed: tuple[Path, str]) -> None:
    root, db = indexed
    result = invoke("index", str(root), "--db", db, "--encoder", "none")
    assert result.exit_code == 1
    assert "docsearch collections drop samples" in result.stderr


def test_doctor_and_drop(indexed: tuple[Path, str]) -> None:
    _, db = indexed
    report = json.loads(invoke("doctor", "--json", "--db", db).stdout)
    health = report["collections"]["samples"]
    assert health["fts_index"] and health["fts_unindexed_rows"] == 0 and not health["failed_files"]
    assert health["documents"] == health["files"] == 5
    assert invoke("collections", "drop", "samples", "--yes", "--db", db).exit_code == 0
    assert not list(Path(db).glob("samples__*"))  # chunks, docs and files tables all gone
    assert json.loads(invoke("collections", "list", "--json", "--db", db).stdout) == []


def test_a_second_writer_is_refused_while_one_indexes(tmp_path: Path) -> None:
    from docsearch.store.database import Database

    root = copy_samples(tmp_path / "samples")
    db = str(tmp_path / "db")
    with Database(db).writer_lock("samples"):
        result = run_cli("index", str(root), "--encoder", "hashing", "--db", db)
    assert result.returncode == 2
    assert "being indexed by another process" in result.stderr


def test_search_defaults_to_the_most_recently_indexed_collection(tmp_path: Path) -> None:
    db = str(tmp_path / "db")
    for name, text in (("older", "alpha clause"), ("newer", "beta clause")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "doc.md").write_text(f"# {name}\n\n{text} about indemnity.\n")
        assert invoke("index", str(folder), "--encoder", "none", "--db", db).exit_code == 0
    hits = json.loads(invoke("search", "indemnity", "--json", "--db", db).stdout)
    assert "/newer/" in hits[0]["path"]


@pytest.mark.parametrize("args", [[], ["--json"]])
def test_models_list_imports_neither_torch_nor_transformers(args: list[str]) -> None:
    code = (
        "import sys; from docsearch.app.cli import app; "
        f"app(['models', 'list', *{args!r}], standalone_mode=False); "
        "print([m for m in ('torch', 'transformers') if m in sys.modules])"
    )
    env = {k: v for k, v in os.environ.items() if k != "DOCSEARCH_PLUGINS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "NV-Embed-v2" in out.stdout  # the catalogue was printed, not skipped
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_models_list_shows_packaged_models_and_the_nv_embed_licence() -> None:
    listed = json.loads(invoke("models", "list", "--json").stdout)
    assert {"sentence-transformers", "kv-embedding", "m2-bert", "llm2vec", "nv-embed"} <= set(
        listed["encoders"]
    )
    by_name = {m["name"]: m for m in listed["models"]}
    assert by_name["all-MiniLM-L6-v2"]["installed"]
    assert {"smollm2-135m", "gemma3-270m"} <= set(by_name)
    assert by_name["NV-Embed-v2"]["licence"] == "CC-BY-NC-4.0"


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        (["--help"], 0),
        (["collections", "list"], 0),  # a command that works (an empty database)
        (["search", "termination", "--collection", "nope"], 2),  # a domain error, one line
        (["search", "--bogus"], 2),  # a usage error from the parser, naming the program
    ],
)
def test_python_dash_m_docsearch_is_the_docsearch_command(
    tmp_path: Path, args: list[str], exit_code: int
) -> None:
    script = Path(sys.executable).parent / "docsearch"
    assert script.is_file(), f"{script} is missing: install the package (pip install -e .)"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOCSEARCH_DB": str(tmp_path / "db")}
    runs = [
        subprocess.run(argv + args, capture_output=True, text=True, env=env, cwd=tmp_path)
        for argv in ([str(script)], [sys.executable, "-m", "docsearch"])
    ]
    command, module = ((r.returncode, r.stdout, r.stderr) for r in runs)
    assert module == command
    assert command[0] == exit_code
