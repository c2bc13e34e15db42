"""The house's walls that imports can show: run/ only stores, the bottom imports nothing above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tik_agent"


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any level (a function-level import counts too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def project_imports(path: Path) -> set[str]:
    return {name for name in imports(path) if name == "tik_agent" or name.startswith("tik_agent.")}


@pytest.mark.parametrize("path", sorted((PACKAGE / "run").glob("*.py")), ids=lambda p: p.name)
def test_the_run_store_never_evaluates(path):
    """run/ stores; the judge (and the loop that drives it) are above it."""
    above = [name for name in project_imports(path)
             if name.startswith(("tik_agent.judge", "tik_agent.search", "tik_agent.agents", "tik_agent.sandbox"))]
    assert not above, f"{path.name} imports {sorted(above)}"


@pytest.mark.parametrize("name", ["outcomes.py", "atomicfile.py"])
def test_the_bottom_imports_nothing_of_the_project(name):
    assert not project_imports(PACKAGE / name)


def test_no_sibling_cycle_between_the_executors():
    """executor (local slots) and ray_executor (Ray actors) share slots.py; neither imports the other."""
    search = PACKAGE / "search"
    assert not any(n.startswith("tik_agent.search.ray_executor") for n in project_imports(search / "executor.py"))
    assert not any(n.startswith("tik_agent.search.executor") for n in project_imports(search / "ray_executor.py"))
