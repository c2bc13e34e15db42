"""The house rules the code can check about itself (issue 24): no module imports one that
imports it back, directly or through others (a function-level import counts: it only hides
the cycle), and no module runs past 400 lines.  Read with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tik_agent"
TEMPLATE = PACKAGE / "export" / "template"  # the exported wheel's files, not tik_agent's modules
MAX_LINES = 400

# Cycles being taken apart elsewhere, to be removed when that work lands.  Each is one
# import edge (importer, imported) left out of the graph.
KNOWN_CYCLES: set[tuple[str, str]] = set()
KNOWN_LONG: set[str] = set()


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if TEMPLATE in path.parents:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST):
    """Every import statement under ``node`` at any depth, but for ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _import_nodes(child)


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports: for ``from m import x``, ``m.x`` when that is a
    module, else ``m``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    for importer, imported in KNOWN_CYCLES:
        graph[importer].discard(imported)
    return graph


def _path_back(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A chain of imports from ``start`` to ``goal``, or None."""
    seen, frontier = {start: [start]}, [start]
    while frontier:
        nxt = []
        for name in frontier:
            for other in sorted(graph[name]):
                if other not in seen:
                    seen[other] = seen[name] + [other]
                    if other == goal:
                        return seen[other]
                    nxt.append(other)
        frontier = nxt
    return None


def test_no_module_imports_one_that_imports_it_back():
    graph = _graph()
    assert len(graph) > 100 and "tik_agent.spec.schema" in graph["tik_agent.spec.cases"]  # the walk sees the code
    cycles = []
    for name in sorted(graph):
        for imported in sorted(graph[name]):
            back = _path_back(graph, imported, name)
            if back is not None:
                cycles.append(" -> ".join([name, *back]))
    assert not cycles, "import cycles (move what both need to a third module):\n" + "\n".join(cycles)


def test_the_cycle_check_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    package = tmp_path / "tik_agent"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from tik_agent.sub.a import x\n")
    (package / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n")
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "PACKAGE", package)
    monkeypatch.setattr(here, "TEMPLATE", package / "export" / "template")
    monkeypatch.setattr(here, "KNOWN_CYCLES", set())
    graph = _graph()
    assert graph["tik_agent.sub.a"] == {"tik_agent.sub.b"} and graph["tik_agent.sub.b"] == {"tik_agent.sub.a"}
    assert graph["tik_agent.sub.c"] == set()  # an import for type checkers only is no cycle


def test_no_module_is_over_400_lines():
    long = []
    for path in _modules().values():
        where = path.relative_to(PACKAGE.parent).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES and where not in KNOWN_LONG:
            long.append(f"{where}: {lines} lines")
    assert not long, f"modules over {MAX_LINES} lines (split along a responsibility):\n" + "\n".join(long)
