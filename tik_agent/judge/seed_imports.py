"""What a seed's ``kernel.py`` may import: torch, triton and the standard library.

Rationale: the seed is copied verbatim into the exported wheel, whose only declared
dependencies are torch and triton, and it runs in the sandbox, which provides
nothing else; a seed importing numpy would pass here and break there.  Checked on
the source (no import is executed), so that check-seed and optimize refuse it
before anything runs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tik_agent import pyparse
from tik_agent.errors import SpecError

ALLOWED_ROOTS = frozenset({"torch", "triton"}) | frozenset(sys.stdlib_module_names)


def foreign_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` for every absolute import outside torch, triton and the standard library."""
    found = []
    for node in ast.walk(pyparse.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]  # a relative import: nothing to resolve it in a wheel
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] not in ALLOWED_ROOTS]
    return sorted(found)


def check_seed_imports(kernel: Path) -> None:
    """SpecError naming the file, the line and the first import a seed may not make."""
    try:
        found = foreign_imports(Path(kernel).read_text())
    except SyntaxError as err:
        raise SpecError(f"{kernel}:{err.lineno}: does not parse: {err.msg}") from None
    if found:
        line, module = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SpecError(f"{kernel}:{line}: imports {module}{more}; a seed may import only torch, triton "
                        f"and the standard library")
