"""Integer literals a candidate compares sizes with, read from its source.

A launcher that writes ``if M > 64:`` (or ``x.shape[0] >= 4096``, ``n_rows in
(3, 5)``, ``M > LIMIT`` with ``LIMIT = 2 * 32`` at module level) behaves
differently on the two sides of that number.  Whatever the grid holds, the
evaluation then also runs batch sizes ``lit - 1``, ``lit`` and ``lit + 1``, so
the switch is crossed in front of the judge.  Kernel bodies count too: under the
CPU interpreter they are host code, and ``M`` reaches them as a plain int.

Every int in a comparison is taken (operands and their sub-expressions, names
resolved through every binding in the file: assignments, defaults, call
arguments; simple arithmetic folded), whatever the other side is:
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


def _targets(target: ast.expr, value: ast.expr | None) -> list[tuple[str, ast.expr]]:
    """(name, expression) pairs a binding of ``value`` to ``target`` makes; tuples pair up."""
    if value is None:
        return []
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            return [pair for t, v in zip(target.elts, value.elts) for pair in _targets(t, v)]
        # ``for a, b in ((1, 300),)``, ``A, B = PAIR``: each name may be any of the ints
        return [pair for t in target.elts for pair in _targets(t, value)]
    return []


def _functions(tree: ast.Module) -> dict[str, list[ast.arguments]]:
    out: dict[str, list[ast.arguments]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, []).append(node.args)
    return out


def _bindings(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Every expression any name is bound to, anywhere in the file, by any route a
    number can travel to a comparison: assignments (each one, at any level; a name
    assigned twice may be either value), tuple unpacking, ``for`` and comprehension
    targets, walrus, parameter defaults (a kernel's ``LIMIT: tl.constexpr = 300``),
    call arguments bound to the callee's parameters: keywords by name (``_k[grid](..,
    LIMIT=300)``) and positional arguments of the file's own functions and kernels;
    and what the file's own functions return (``M >= _limit()``).
    Scopes are ignored on purpose: a name that is two things may be either, and a
    number that reaches no comparison costs only three cases."""
    seen: dict[str, list[ast.expr]] = {}

    def bind(pairs) -> None:
        for name, value in pairs:
            if not (isinstance(value, ast.Name) and value.id == name):  # ``N=N`` says nothing new
                seen.setdefault(name, []).append(value)

    functions = _functions(tree)
    augmented = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(_targets(target, node.value))
        elif isinstance(node, ast.AnnAssign):
            bind(_targets(node.target, node.value))
        elif isinstance(node, ast.AugAssign):
            augmented.append(node)
        elif isinstance(node, ast.NamedExpr):
            bind(_targets(node.target, node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            bind(_targets(node.target, node.iter))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            bind((a.arg, d) for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults))
            bind((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
        elif isinstance(node, ast.Call):
            bind((kw.arg, kw.value) for kw in node.keywords if kw.arg)
            func = node.func.value if isinstance(node.func, ast.Subscript) else node.func  # ``kernel[grid](...)``
            if isinstance(func, ast.Name):
                for args in functions.get(func.id, []):
                    positional = args.posonlyargs + args.args
                    bind((a.arg, v) for a, v in zip(positional, node.args) if not isinstance(v, ast.Starred))
    for node in ast.walk(tree):  # ``M >= _limit()``: a call of the file's own function is what it returns
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bind((_RETURNS + node.name, r.value) for r in ast.walk(node)
                 if isinstance(r, ast.Return) and r.value is not None)
    for node in augmented:  # ``L += 200``: any earlier value of L combined with it
        if isinstance(node.target, ast.Name) and node.target.id in seen:
            previous = ast.Tuple(elts=list(seen[node.target.id]), ctx=ast.Load())
            bind([(node.target.id, ast.BinOp(left=previous, op=node.op, right=node.value))])
    return seen


# Key of a function's return values among the bindings (not a valid identifier).
_RETURNS = "return:"
# A name or an operation stands for at most this many ints: folding stays cheap.
_FOLD_VALUES = 32


def _fold(node: ast.expr, names: dict[str, list[ast.expr]], depth: int = 0) -> list[int]:
    """The ints an operand may stand for (several for a tuple, list or set, or a name bound more than once)."""
    if depth > 20:
        return []
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.Name) and node.id in names:
        return _unique(v for value in names[node.id] for v in _fold(value, names, depth + 1))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and _RETURNS + node.func.id in names:
        return _unique(v for value in names[_RETURNS + node.func.id] for v in _fold(value, names, depth + 1))
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return _unique(v for elt in node.elts for v in _fold(elt, names, depth + 1))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [-v for v in _fold(node.operand, names, depth + 1)]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _fold(node.left, names, depth + 1), _fold(node.right, names, depth + 1)
        out = []
        for a in left:
            for b in right:
                if isinstance(node.op, (ast.Pow, ast.LShift)) and (b < 0 or b > 62):
                    out.append(_FOLD_LIMIT)
                    continue
                try:
                    value = _BINOPS[type(node.op)](a, b)
                except (ZeroDivisionError, ValueError, OverflowError):
                    continue
                out.append(max(-_FOLD_LIMIT, min(_FOLD_LIMIT, value)))
        return _unique(out)
    return []


def _unique(values) -> list[int]:
    out: list[int] = []
    for v in values:
        if v not in out:
            out.append(v)
            if len(out) >= _FOLD_VALUES:
                break
    return out


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
    names = _bindings(tree)
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
