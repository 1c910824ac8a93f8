"""The package's modules import each other without a cycle.

Read from the source (AST), not by importing: an edge A -> B for every `import` or `from ... import`
in A that names a module B of the package. Two graphs are checked. Module level: the imports that
run when A is imported (those in `if`, `try` and class bodies included, those under
`if TYPE_CHECKING:` and inside functions not); a cycle there can fail at import time. All levels:
the imports inside functions too; they run later, but a cycle through them still means two
modules depend on each other (the commands once imported `parse_options` back from `cli.py`).
Not followed: `importlib.import_module` with a computed name (the encoder registry).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import REPO

Graph = dict[str, set[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(
    tree: ast.Module, *, inside_functions: bool
) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module that run at import time (and later, if asked)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)  # the body runs only under a type checker
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            if inside_functions:
                pending.extend(ast.iter_child_nodes(node))
        else:
            pending.extend(ast.iter_child_nodes(node))


def imported(
    node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]
) -> Iterator[str]:
    """The package's modules that one import statement names."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in modules)
        return
    base = node.module or ""
    if node.level:  # relative: from the importer's package, `level - 1` packages up
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = package[: len(package) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in modules:  # `from pkg import module`
            yield submodule
        elif base in modules:  # `from module import name`
            yield base


def import_graph(package: Path, *, inside_functions: bool) -> Graph:
    root = package.parent
    files = {module_name(path, root): path for path in sorted(package.rglob("*.py"))}
    modules = set(files)
    graph: Graph = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in import_nodes(tree, inside_functions=inside_functions):
            graph[name].update(imported(node, name, is_package, modules))
        graph[name].discard(name)
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(graph[node]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done and (cycle := visit(target)):
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycle_at_module_level() -> None:
    cycle = find_cycle(import_graph(REPO / "docsearch", inside_functions=False))
    assert cycle is None, " -> ".join(cycle or [])


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    cycle = find_cycle(import_graph(REPO / "docsearch", inside_functions=True))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_scan_finds_cycles_and_tells_the_levels_apart(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import a\n"
        "def later():\n    from .. import c\n"
    )
    (package / "c.py").write_text("try:\n    import pkg.a\nexcept ImportError:\n    pass\n")
    module_level = import_graph(package, inside_functions=False)
    assert module_level["pkg.a"] == {"pkg.sub.b"} and module_level["pkg.c"] == {"pkg.a"}
    assert module_level["pkg.sub.b"] == set()  # TYPE_CHECKING and function bodies skipped
    assert find_cycle(module_level) is None
    everywhere = import_graph(package, inside_functions=True)
    assert find_cycle(everywhere) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
