"""Integer literals a candidate compares sizes with, read from its source.

A launcher that writes ``if M > 64:`` (or ``x.shape[0] >= 4096``, ``n_rows in
(3, 5)``, ``M > LIMIT`` with ``LIMIT = 2 * 32`` at module level) behaves
differently on the two sides of that number.  Whatever the grid holds, the
evaluation then also runs batch sizes ``lit - 1``, ``lit`` and ``lit + 1``, so
the switch is crossed in front of the judge.  Kernel bodies count too: under the
CPU interpreter they are host code, and ``M`` reaches them as a plain int.

Every int in a comparison is taken (operands and their sub-expressions, module
constants resolved, simple arithmetic folded), whatever the other side is:
deciding which expressions are "dimensions" is what an adversary would
exploit, and a literal that is not one costs three cases.  Not covered: a
number the source does not spell as constant arithmetic (``int("64")``, a
value computed from the inputs); the fixed and drawn sizes are the only
defence there.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

from tik_agent.pyparse import parse
from tik_agent.spec.cases import MAX_BATCH

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.LShift: operator.lshift, ast.Pow: operator.pow, ast.Mod: operator.mod}
# Folding stops here: 2 ** 10_000_000 must not hang the trusted side.
_FOLD_LIMIT = 1 << 62


@dataclass(frozen=True)
class Literal:
    value: int
    line: int


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names assigned exactly once, by a plain ``NAME = expr``."""
    seen: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                seen.setdefault(target.id, []).append(value)
    return {name: values[0] for name, values in seen.items() if len(values) == 1}


def _fold(node: ast.expr, names: dict[str, ast.expr], depth: int = 0) -> list[int]:
    """The ints an operand stands for (several for a tuple, list or set), or []."""
    if depth > 20:
        return []
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.Name) and node.id in names:
        return _fold(names[node.id], names, depth + 1)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for elt in node.elts for v in _fold(elt, names, depth + 1)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [-v for v in _fold(node.operand, names, depth + 1)]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _fold(node.left, names, depth + 1), _fold(node.right, names, depth + 1)
        if len(left) == 1 and len(right) == 1:
            a, b = left[0], right[0]
            if isinstance(node.op, (ast.Pow, ast.LShift)) and (b < 0 or b > 62):
                return [_FOLD_LIMIT]
            try:
                value = _BINOPS[type(node.op)](a, b)
            except (ZeroDivisionError, ValueError, OverflowError):
                return []
            return [max(-_FOLD_LIMIT, min(_FOLD_LIMIT, value))]
    return []


def _operands(node: ast.expr) -> list[ast.expr]:
    """The operand and every sub-expression of it, except subscript indices
    (``x.shape[0]``): ``M % 97 == 40`` switches at multiples of 97 too."""
    out = [node]
    for child in ast.iter_child_nodes(node):
        if isinstance(node, ast.Subscript) and child is node.slice:
            continue
        if isinstance(child, ast.expr):
            out.extend(_operands(child))
    return out


def compared_literals(source: str, filename: str = "<candidate>") -> list[Literal]:
    """Every int a comparison in ``source`` tests against, with its line, in order."""
    try:
        tree = parse(source, filename)
    except SyntaxError:
        return []
    names = _module_constants(tree)
    found: dict[int, Literal] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                for part in _operands(operand):
                    for value in _fold(part, names):
                        found.setdefault(value, Literal(value, node.lineno))
    return sorted(found.values(), key=lambda lit: (lit.line, lit.value))


def batch_sizes_around(literals: list[Literal]) -> list[int]:
    """Batch sizes on both sides of each literal: ``lit - 1``, ``lit``, ``lit + 1`` (at least 1)."""
    sizes = {m for lit in literals for m in (lit.value - 1, lit.value, lit.value + 1) if m >= 1}
    return sorted(sizes)


def untestable_literal(literals: list[Literal], device: str) -> tuple[int, str] | None:
    """(line, message) for the first literal whose neighbourhood is too large a batch to test here."""
    limit = MAX_BATCH.get(device, MAX_BATCH["cuda"])
    for lit in literals:
        if lit.value + 1 > limit:
            return lit.line, (f"compares with {lit.value}: batch sizes around it are beyond the largest this "
                              f"device tests ({limit}), so the branch it guards could not be judged")
    return None
