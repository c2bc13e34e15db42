"""Find and change literal values in a kernel file without disturbing the rest.

The offline agent edits kernels the way a person would: it locates a literal
with :mod:`ast` (a module-level constant such as ``ROWS_PER_PROGRAM = 1``, or the
``num_stages=`` keyword of a kernel launch) and replaces exactly those
characters, so comments, formatting and every other byte stay as they were.

Recognised constant forms: ``NAME = 1``, ``NAME: tl.constexpr = 1`` and
``NAME = tl.constexpr(1)``, with any Python literal (negative numbers, strings,
tuples) as the value.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tik_agent import pyparse
from tik_agent.agents.replies import is_jit_decorator


@dataclass(frozen=True)
class Slot:
    """A span of the source (character offsets) holding ``value``, or an insertion point.

    An insertion point has ``start == end`` and ``value`` None; ``prefix`` is
    written before the new value (e.g. ``", num_stages="``).
    """

    start: int
    end: int
    value: object
    prefix: str = ""


@dataclass(frozen=True)
class Edit:
    slot: Slot
    new_value: object


def _line_starts(source: str) -> list[int]:
    starts, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


class SourceIndex:
    """Maps ``ast`` positions (1-based lines, UTF-8 byte columns) to character offsets."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tree = pyparse.parse(source)
        self._lines = source.splitlines(keepends=True)
        self._starts = _line_starts(source)

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self._lines[lineno - 1] if lineno - 1 < len(self._lines) else ""
        return self._starts[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)


def _literal_node(value: ast.expr | None) -> ast.expr | None:
    """The node holding the literal of a constant assignment's value, if it is one."""
    if value is None:
        return None
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
        func = value.func
        if (isinstance(func, ast.Attribute) and func.attr == "constexpr") or (
            isinstance(func, ast.Name) and func.id == "constexpr"
        ):
            value = value.args[0]
    try:
        ast.literal_eval(value)
    except ValueError:
        return None
    return value


def constant_slots(index: SourceIndex, names: Iterable[str]) -> dict[str, Slot]:
    """Literal slots of module-level constants among ``names``; names assigned twice are left out."""
    wanted = set(names)
    found: dict[str, list[Slot]] = {}
    for node in index.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id not in wanted:
            continue
        literal = _literal_node(value)
        slots = found.setdefault(target.id, [])
        if literal is None:
            slots.append(Slot(-1, -1, None))  # assigned, but not to a literal: not editable
        else:
            start, end = index.span(literal)
            slots.append(Slot(start, end, ast.literal_eval(literal)))
    return {name: s[0] for name, s in found.items() if len(s) == 1 and s[0].start >= 0}


def looping_kernels(index: SourceIndex) -> set[str]:
    """Names of module-level ``@*.jit`` functions that contain a ``for`` or ``while`` loop."""
    names = set()
    for node in index.tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        jitted = any(is_jit_decorator(d) for d in node.decorator_list)
        if jitted and any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(node)):
            names.add(node.name)
    return names


def dot_kernels(index: SourceIndex) -> set[str]:
    """Names of module-level ``@*.jit`` functions that call ``tl.dot`` (or ``dot``): the only
    loads a software pipeline (``num_stages``) changes anything for."""
    names = set()
    for node in index.tree.body:
        if not isinstance(node, ast.FunctionDef) or not any(is_jit_decorator(d) for d in node.decorator_list):
            continue
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                f = call.func
                if (isinstance(f, ast.Attribute) and f.attr == "dot") or (isinstance(f, ast.Name) and f.id == "dot"):
                    names.add(node.name)
                    break
    return names


# Launch options that tune how the compiled program runs on a GPU, never what it computes.
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})


def launch_option_names(index: SourceIndex, names: Iterable[str]) -> set[str]:
    """Those of ``names`` whose every use is as the value of a launch option (``num_warps=NAME``)."""
    as_option: set[int] = set()
    for node in ast.walk(index.tree):
        if isinstance(node, ast.keyword) and node.arg in LAUNCH_OPTIONS and isinstance(node.value, ast.Name):
            as_option.add(id(node.value))
    uses: dict[str, list[bool]] = {}
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.setdefault(node.id, []).append(id(node) in as_option)
    return {name for name in names if uses.get(name) and all(uses[name])}


def launch_keyword_slots(index: SourceIndex, kernels: set[str], keyword: str) -> list[Slot] | None:
    """Slots for ``keyword=`` in every launch ``kernel[grid](...)`` of ``kernels``.

    A launch without the keyword gets an insertion point after its last
    argument.  None when there is no such launch, or when some launch passes a
    non-literal (a name the author controls, such as a tunable).
    """
    slots: list[Slot] = []
    for node in ast.walk(index.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        launched = node.func.value
        if not (isinstance(launched, ast.Name) and launched.id in kernels):
            continue
        existing = [k for k in node.keywords if k.arg == keyword]
        if existing:
            literal = _literal_node(existing[0].value)
            if literal is None:
                return None
            start, end = index.span(literal)
            slots.append(Slot(start, end, ast.literal_eval(literal)))
            continue
        arguments: Sequence[ast.AST] = [*node.args, *node.keywords]
        if not arguments or any(k.arg is None for k in node.keywords):
            return None  # no arguments, or **kwargs: leave such launches alone
        last = max(arguments, key=lambda a: (a.end_lineno, a.end_col_offset))
        _, end = index.span(last)
        slots.append(Slot(end, end, None, prefix=f", {keyword}="))
    return slots or None


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """``source`` with each slot replaced by (or, for insertion points, given) its new value."""
    ordered = sorted(edits, key=lambda e: e.slot.start, reverse=True)
    for earlier, later in zip(ordered[1:], ordered):
        if earlier.slot.end > later.slot.start:
            raise ValueError("apply_edits: overlapping edits")
    for edit in ordered:
        text = edit.slot.prefix + repr(edit.new_value)
        source = source[: edit.slot.start] + text + source[edit.slot.end :]
    return source
