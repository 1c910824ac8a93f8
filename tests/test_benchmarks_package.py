"""benchmarks/ as a package that ranks only through docsearch.fusion: read statically (no data, no
models), plus the scripts that share code imported the way a user runs them.

What each check keeps out: a private numpy copy of the product's normalisation or fusion (the
retired doclevel.py's had drifted from what fusion.py ships), scripts importing each other by bare
module name (which only worked from inside benchmarks/), reads through the store's private
methods, and defaults that name one machine's folders.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
SIBLINGS = {path.stem for path in SCRIPTS} - {"__init__"}
# Ranking arithmetic that belongs to docsearch.fusion alone.
FUSION_WORDS = ("zscore", "z_score", "maxnorm", "minmax", "min_max", "rrf", "normalis", "normaliz")
MACHINE_PATHS = ("/work/", "/tmp/", "/home/")
# The modules that import their siblings (the rest import only docsearch).
SHARED = ("eval_sets", "query_roles", "calibrate", "styles", "common_words", "similar_dense")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (prose may quote a command)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_no_copy_of_the_products_fusion(path: Path) -> None:
    tree = _tree(path)
    own = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(word in node.name.lower() for word in FUSION_WORDS)
    ]
    assert not own, f"{path.name} defines {own}: rank through docsearch.fusion instead"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_siblings_are_imported_through_the_package(path: Path) -> None:
    bare = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            bare += [a.name for a in node.names if a.name.split(".")[0] in SIBLINGS]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            bare += [node.module] if node.module.split(".")[0] in SIBLINGS else []
    assert not bare, f"{path.name} imports {bare} by bare name: use `from benchmarks.X import`"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_no_private_store_reads(path: Path) -> None:
    private = [
        node.lineno
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Attribute) and node.attr == "_read"
    ]
    assert not private, f"{path.name} lines {private} read the store's private `_read`"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_no_machine_paths_baked_in(path: Path) -> None:
    tree = _tree(path)
    prose = _docstrings(tree)
    baked = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in prose
        and node.value.startswith(MACHINE_PATHS)
    ]
    assert not baked, f"{path.name} defaults to {baked}: take an option or DOCSEARCH_BENCH_CACHE"


@pytest.mark.parametrize("name", SHARED)
def test_shared_modules_import_as_a_package(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    assert Path(module.__file__ or "").resolve() == (BENCHMARKS / f"{name}.py").resolve()


def test_a_script_still_runs_as_a_file(tmp_path: Path) -> None:
    """`python benchmarks/styles.py` from anywhere: it finds its siblings through the package."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "styles.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "score" in done.stdout


def test_caches_default_inside_the_checkout_or_where_the_environment_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from benchmarks import eval_sets

    for name in ("DOCSEARCH_BENCH_CACHE", "DOCSEARCH_EVAL_CACHE", "DOCSEARCH_EVAL_DATA"):
        monkeypatch.delenv(name, raising=False)
    try:
        importlib.reload(eval_sets)
        assert eval_sets.DEFAULT_CACHE.is_relative_to(REPO)
        assert eval_sets.cache_dir("styles").is_relative_to(REPO)
        monkeypatch.setenv("DOCSEARCH_BENCH_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("DOCSEARCH_EVAL_DATA", str(tmp_path / "data"))
        importlib.reload(eval_sets)
        assert eval_sets.cache_dir("styles") == tmp_path / "cache" / "styles"
        assert tmp_path / "cache" / "eval" == eval_sets.DEFAULT_CACHE
        assert tmp_path / "data" == eval_sets.DATA
    finally:
        monkeypatch.undo()
        importlib.reload(eval_sets)


def test_calibrates_shipped_rule_is_the_products() -> None:
    """calibrate.py labels `share_rule(0.4)` and LONG_QUERY_WORDS as what ships: if fusion.py's
    hybrid rule or threshold moves, its tables would name the wrong rule "shipped"."""
    from benchmarks import calibrate
    from docsearch.fusion import DOCUMENT_RULES, LONG_QUERY_WORDS

    shipped, product = calibrate.share_rule(0.4), DOCUMENT_RULES["hybrid"]
    assert (shipped.method, shipped.aggregate, shipped.tau) == (
        product.method,
        product.aggregate,
        product.tau,
    )
    assert shipped.weights.keys() == product.weights.keys()
    for leg, weight in product.weights.items():
        assert shipped.weights[leg] == pytest.approx(weight)
    assert calibrate.SHIPPED == "d=0.4"
    assert calibrate.SHIPPED_LENGTH[0] == LONG_QUERY_WORDS
