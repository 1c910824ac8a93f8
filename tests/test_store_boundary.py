"""The store package is the only door to Lance: no other product module imports lance or lancedb."""

from __future__ import annotations

import ast
from pathlib import Path

import docsearch

PACKAGE = Path(docsearch.__file__).parent
STORE = "store/"  # the package: every module under docsearch/store/
LANCE = {"lance", "lancedb"}


def lance_imports(source: str) -> list[str]:
    """The lance/lancedb modules `source` imports, at any depth (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name.split(".")[0] in LANCE]
    return found


def test_the_scan_sees_every_spelling_of_an_import() -> None:
    source = (
        "import lance\nimport lancedb.index as ix\nfrom lance.query import PhraseQuery\n"
        "def f():\n    from lancedb import connect\n"
        "import lance_ray, pyarrow\nfrom . import lance\n"
    )
    assert lance_imports(source) == ["lance", "lancedb.index", "lance.query", "lancedb"]


def test_only_the_store_package_imports_lance() -> None:
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if lance_imports(path.read_text(encoding="utf-8"))
    }
    assert {"store/reads.py", "store/writes.py"} <= importers  # the scan finds what exists
    assert {path for path in importers if not path.startswith(STORE)} == set()


def test_the_store_package_has_small_rooms() -> None:
    """No store module over 700 lines, no class in it over 30 methods (the old Store had 72)."""
    modules = sorted((PACKAGE / "store").glob("*.py"))
    assert {"database.py", "reads.py", "writes.py", "versions.py"} <= {p.name for p in modules}
    for path in modules:
        source = path.read_text(encoding="utf-8")
        assert source.count("\n") <= 700, path.name
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
                assert len(methods) <= 30, f"{path.name}: {node.name} has {len(methods)}"
