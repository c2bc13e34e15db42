"""Where a kernel body's run-time arguments may flow: never into a switch of their own.

A size, stride or other run-time argument of a kernel (a parameter that is not a
``tl.constexpr``) may address memory, bound a loop, mask the lanes of a block and
enter the arithmetic on loaded data (``sum_sq / N``).  It may not decide, on its
own, what the program computes: a condition or a flag built from run-time
arguments and constants alone (``M % 13 == 5``, ``if N > 4096:``,
``tl.minimum(tl.maximum(M - 64, 0), 1)``) is the same for every lane of every
program of a launch, so it is a switch on the size, and a switch inside a kernel
body changes no launch: the configuration survey (:mod:`tik_agent.judge.configs`)
cannot see it, and parity judges it only at the sizes the grid happens to draw.
Such a choice belongs on the host, as a constexpr the launcher passes, where the
survey judges every launch it makes.

Each value of a kernel body gets the set of sources it is computed from (flow-
insensitive: a name holds everything the function ever binds to it):

* ``size``: a run-time parameter of a launched kernel, and ``tl.num_programs``;
* ``index``: ``tl.program_id``, ``tl.arange`` and loop variables;
* ``data``: what ``tl.load`` (or an atomic) returns;
* ``const``: literals, constexpr parameters, module constants, dtypes, ``tl.zeros``.

A helper's parameters take the sources of every argument its callers pass.  A value
whose sources are ``size`` and constants alone may be built only with ``+``, ``-``,
``*``, ``tl.cdiv`` and casts (what a tile count or an offset needs); anything else
that yields such a value (a comparison, ``and``/``or``/``not``, ``%``, ``//``,
``/``, shifts and bitwise operators, ``min``/``max``/``where`` and the other DSL
functions) and any ``if``, ``while`` or conditional expression whose test is such a
value is refused.  Comparisons with an index (``offs < N``) or with loaded data
(``t < V``) are masks and bounds checks, and stay allowed.

What this does not stop: a size mixed with an index or loaded data in a way that
leaves its value (``pid * 0 + M``, ``tl.where(offs < 0, x, M)``, a load's ``other``
under an empty mask, a loop ``for m in range(M, M + 1)``), and switches on loaded
values (docs/static-rules.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tik_agent.sandbox.static.context import Context
from tik_agent.sandbox.static.registry import Violation, rule, v

SIZE, INDEX, DATA, CONST = "size", "index", "data", "const"
_INDEX_CALLS = frozenset({"program_id", "arange"})
_SIZE_SOURCES = frozenset({"num_programs"})  # the grid: a function of the sizes, the same in every program
_DATA_CALLS = frozenset({"load"})
_CONST_CALLS = frozenset({"zeros", "zeros_like"})
# What may build a value of sizes and constants alone: a tile count, an offset, a cast, a loop.
_SIZE_OPS = (ast.Add, ast.Sub, ast.Mult)
_SIZE_CALLS = frozenset({"cdiv", "to", "cast", "multiple_of", "max_contiguous", "range", "static_range",
                         "num_programs"})
_ROUNDS = 20  # passes to a fixed point: each adds sources, and there are four


def _dsl_name(ctx: Context, func: ast.expr) -> str | None:
    """The DSL function a call names (``tl.load`` -> ``load``), or a method's name (``x.to``)."""
    path = ctx.resolve(func)
    if path and path.startswith(("triton.language.", "triton.")):
        return path.rsplit(".", 1)[-1]
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _constexprs(ctx: Context, fn: ast.FunctionDef) -> set[str]:
    params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return {a.arg for a in params if a.annotation is not None
            and (ctx.resolve(a.annotation) or "").endswith("constexpr")}


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


Key = tuple  # (kernel name, the sources of each run-time parameter): one context of a body
_CONTEXTS = 64  # contexts per file at most; past it, a helper's callers share one (their union)


class _Flow:
    """The sources of every value of every kernel body in the file, per context: a helper
    is read once for each set of sources its callers pass (a helper called with an index at
    one site and with two sizes at another is a switch at the second)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.kernels = {fn.name: fn for fn in ctx.jit_functions}
        self.constexprs = {name: _constexprs(ctx, fn) for name, fn in self.kernels.items()}
        self.params = {name: [p for p in _params(fn) if p not in self.constexprs[name]]
                       for name, fn in self.kernels.items()}
        called = {n.func.id for fn in ctx.jit_functions for n in ast.walk(fn)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.kernels}
        launched = {n.value.id for n in ctx.host_nodes()
                    if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.kernels}
        self.env: dict[Key, dict[str, set[str]]] = {}
        self.returns: dict[Key, set[str]] = {}
        # A kernel the host launches (or that no kernel calls) gets sizes in every run-time parameter.
        for name in self.kernels:
            if name in launched or name not in called:
                self._context(name, tuple(frozenset({SIZE}) for _ in self.params[name]))
        for _ in range(_ROUNDS):
            if not self._pass():
                break

    def _context(self, name: str, signature: tuple) -> Key:
        key = (name, signature)
        if key not in self.env:
            if len(self.env) >= _CONTEXTS:  # one shared context: the union of what callers pass
                key = (name, None)
                self.env.setdefault(key, {p: set() for p in self.params[name]})
                for p, got in zip(self.params[name], signature):
                    self.env[key][p] |= got
            else:
                self.env[key] = {p: set(got) for p, got in zip(self.params[name], signature)}
            self.returns.setdefault(key, set())
        return key

    def contexts(self) -> list[Key]:
        return list(self.env)

    def _pass(self) -> bool:
        before = (len(self.env), sum(len(v) for e in self.env.values() for v in e.values()),
                  sum(len(r) for r in self.returns.values()))
        for key in self.contexts():
            env, fn = self.env[key], self.kernels[key[0]]
            for node in ast.walk(fn):
                if node is fn:
                    continue
                for target, value in _bindings(node):
                    got = {INDEX} if value is None else self.sources(key, value)
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            env.setdefault(n.id, set()).update(got)
                if isinstance(node, ast.Return) and node.value is not None:
                    self.returns[key] |= self.sources(key, node.value)
        after = (len(self.env), sum(len(v) for e in self.env.values() for v in e.values()),
                 sum(len(r) for r in self.returns.values()))
        return after != before

    def _call(self, key: Key, call: ast.Call) -> set[str]:
        """A helper's return in the context its arguments make here."""
        callee = call.func.id
        passed = dict(zip(_params(self.kernels[callee]), call.args))
        passed.update((k.arg, k.value) for k in call.keywords if k.arg)
        signature = tuple(frozenset(self.sources(key, passed[p])) if p in passed else frozenset({CONST})
                          for p in self.params[callee])
        return self.returns[self._context(callee, signature)]

    def sources(self, key: Key, node: ast.AST) -> set[str]:
        """What ``node`` in the body of context ``key`` is computed from."""
        fn = key[0]
        if isinstance(node, ast.Constant):
            return {CONST}
        if isinstance(node, ast.Name):
            if node.id in self.constexprs[fn]:
                return {CONST}
            return set(self.env[key].get(node.id, {CONST}))  # module constants, tl, kernels
        if isinstance(node, ast.Attribute):
            return {CONST} if node.attr in ("dtype", "element_ty", "shape") else self.sources(key, node.value)
        if isinstance(node, ast.Call):
            name = _dsl_name(self.ctx, node.func)
            if name in _INDEX_CALLS:
                return {INDEX}
            if name in _SIZE_SOURCES:
                return {SIZE}
            if name in _DATA_CALLS or (name or "").startswith("atomic_"):
                return {DATA}
            if name in _CONST_CALLS:
                return {CONST}
            out = self.sources(key, node.func.value) if isinstance(node.func, ast.Attribute) else set()
            if isinstance(node.func, ast.Name) and node.func.id in self.kernels:
                out |= self._call(key, node)
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                out |= self.sources(key, arg)
            return out or {CONST}
        if isinstance(node, (ast.Slice, ast.expr_context)):
            return set()
        out: set[str] = set()
        for child in ast.iter_child_nodes(node):
            out |= self.sources(key, child)
        return out or {CONST}


def _bindings(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """(target, value) for each binding ``node`` makes; a loop variable's value is None (an index)."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield target, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        yield node.target, node.value
        if isinstance(node, ast.AugAssign):
            yield node.target, node.target  # x += y keeps what x had
    elif isinstance(node, ast.For):
        yield node.target, None
        yield node.target, node.iter  # a loop over sizes alone (range(M, M + 1)) keeps them
    elif isinstance(node, ast.comprehension):
        yield node.target, None


def _size_only(got: set[str]) -> bool:
    return SIZE in got and got <= {SIZE, CONST}


def _switches(flow: _Flow, key: Key) -> Iterator[tuple[ast.AST, str]]:
    fn = flow.kernels[key[0]]
    for node in ast.walk(fn):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            if _size_only(flow.sources(key, node.test)):
                yield node.test, "decides a branch"
        elif isinstance(node, (ast.Compare, ast.BoolOp)) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert))):
            if _size_only(flow.sources(key, node)):
                yield node, "is a condition"
        elif isinstance(node, ast.BinOp) and not isinstance(node.op, _SIZE_OPS):
            if _size_only(flow.sources(key, node)):
                yield node, f"uses {type(node.op).__name__}"
        elif isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in flow.kernels):
            called = _dsl_name(flow.ctx, node.func) or ast.unparse(node.func)
            if called not in _SIZE_CALLS and _size_only(flow.sources(key, node)):
                yield node, f"calls {called}"


# Rationale: a switch inside a kernel body on its run-time sizes changes no launch, so the
# configuration survey cannot see it, and parity judges it only where the grid's sizes land
# (`M % 13 == 5`, tests/adversarial/kernel_switch/).  Chosen on the host, the same choice
# is a constexpr of the launch and the survey judges it wherever it changes.
@rule("size-switch")
def check_size_switch(ctx: Context) -> Iterator[Violation]:
    """A kernel body never branches or computes a flag on its run-time arguments alone."""
    if not ctx.jit_functions:
        return
    flow = _Flow(ctx)
    found: dict[int, tuple[str, ast.AST, str]] = {}
    for key in flow.contexts():
        for node, what in _switches(flow, key):
            found.setdefault(id(node), (key[0], node, what))
    for name, node, what in found.values():
        if any(id(n) in found for n in ast.walk(node) if n is not node):
            continue  # the innermost switch of an expression is the one to show
        yield v("size-switch", node,
                f"in kernel '{name}', '{_short(node)}' {what} on run-time arguments and constants alone: "
                "a switch on sizes inside a kernel body is judged only where the grid lands; choose on "
                "the host and pass a tl.constexpr, whose every change the configuration survey judges")


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
