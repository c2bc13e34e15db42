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

Every value of a body gets what it is computed from (flow-insensitive: a name
holds all its bindings): sizes (the run-time parameters of a kernel the host
launches, or of one whose name is used any other way than a direct call from a
kernel body, and ``tl.num_programs``), an index or loaded data (``tl.program_id``,
``tl.arange``, loop variables, ``tl.load``, atomics), constants.  A binding inside
a loop also takes the loop's bounds (a counter only ever given constants still
counts a size's iterations).  A helper is read once per set of sources its callers
pass (a helper given an index at one site and two sizes at another is a switch at
the second); constexpr annotations of a helper count for nothing (Triton passes a
called helper what its caller has); a name that holds sizes alone at one binding
and an index or data at another (one that does not read the name) is refused; a function handed to ``tl.reduce`` or
``tl.associative_scan`` combines data; arguments unpacked into a helper are
refused.

A value of sizes and constants alone may be built with ``+``, ``-``, ``*``, ``/``,
``//`` and ``%`` by a constant, ``tl.cdiv``, casts, ``range`` and hints
(``multiple_of``, ``max_contiguous``, ``assume``).  Refused: a comparison,
``and``/``or``/``not``, ``~``, shifts and bitwise operators, ``**``, ``//`` or ``%``
by a size, ``min``/``max``/``where`` or any other DSL function that yields such a
value; a cast of one to ``int1``, ``int8`` or ``int16`` (a truncation is a flag),
or to an integer type from a value with ``/`` in it (a floor); and any ``if``,
``while`` or conditional expression whose test is such a value.  Comparisons with
an index (``offs < N``) or with loaded data (``t < V``) are masks and bounds
checks, and stay allowed.  When the analysis does not settle within its limits,
the file is refused.

What this does not stop: a size mixed with an index or loaded data in a way that
leaves its value (``pid * 0 + M``, ``tl.where(offs < 0, x, M)``, a load's ``other``
under an empty mask, ``(M, pid)[0]``, a loop ``for m in range(M, M + 1)``); a name
that holds a size and is later rebound to data through itself (``w = N``, ``if w >
3000:``, ``w = w * 0 + tl.load(...)``: an accumulator's update reads itself, so a
rebinding that does is not refused as a reused name); a trip count that is a flag
(``range(tl.cdiv(N, 3001) - 1)``, a loop that runs zero times or once); ``.dtype``
of a run-time argument (Triton types an int argument int64 only from 2**31); and
switches on loaded values.  Refused though honest: a counter in a loop over sizes
compared with a size (``if ki == k_tiles - 1``), and ``while off < N`` loops.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tik_agent.sandbox.static.context import Context
from tik_agent.sandbox.static.registry import Violation, rule, v

S, X, C = "S", "X", "C"  # sizes; an index or loaded data; constants
NONE: frozenset = frozenset()  # nothing yet (a name before its binding is reached)
SIZE, OTHER, CONST = frozenset({S}), frozenset({X}), frozenset({C})
_INDEX_CALLS = frozenset({"program_id", "arange", "load"})  # and atomic_*: an index or loaded data
_SIZE_SOURCES = frozenset({"num_programs"})  # the grid: a function of the sizes, the same in every program
_CONST_CALLS = frozenset({"zeros", "zeros_like"})
_SIZE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_BY_CONSTANT = (ast.FloorDiv, ast.Mod)
_SIZE_CALLS = frozenset({"cdiv", "to", "cast", "multiple_of", "max_contiguous", "assume", "range", "static_range",
                         "num_programs"})
_CASTS = frozenset({"to", "cast"})
_NARROW = frozenset({"int1", "int8", "int16", "uint8", "uint16"})
_COMBINERS = frozenset({"reduce", "associative_scan"})
_UNPACKS = "unpacks"
_ROUNDS = 40      # passes to a fixed point; one that does not settle is refused
_CONTEXTS = 256   # contexts per file; more is refused
Key = tuple       # (kernel name, what each parameter may be): one context of a body


def _dsl_name(ctx: Context, func: ast.expr) -> str | None:
    """The DSL function a call names (``tl.load`` -> ``load``), or a method's name (``x.to``)."""
    path = ctx.resolve(func)
    if path and path.startswith(("triton.language.", "triton.")):
        return path.rsplit(".", 1)[-1]
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def _combine(parts: list[frozenset]) -> frozenset:
    """What a value made of ``parts`` is computed from: all of it."""
    return frozenset().union(*parts)


class TooComplex(Exception):
    pass


class _Flow:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.kernels = {fn.name: fn for fn in ctx.jit_functions}
        self.env: dict[Key, dict[str, frozenset]] = {}
        self.returns: dict[Key, frozenset] = {}
        self.loops = {id(n): loops for fn in ctx.jit_functions for n, loops in _with_loops(fn)}
        direct, combined = set(), {}
        for fn in ctx.jit_functions:
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.kernels:
                    direct.add(id(n.func))
                elif isinstance(n, ast.Call) and _dsl_name(ctx, n.func) in _COMBINERS:
                    fn_arg = n.args[2] if len(n.args) > 2 else next(
                        (k.value for k in n.keywords if k.arg == "combine_fn"), None)
                    if isinstance(fn_arg, ast.Name) and fn_arg.id in self.kernels:
                        combined[id(fn_arg)] = fn_arg.id
        escaped = {n.id for n in ctx.nodes if isinstance(n, ast.Name) and n.id in self.kernels
                   and id(n) not in direct and id(n) not in combined}
        called = {n.id for n in ctx.nodes if isinstance(n, ast.Name) and id(n) in direct}
        # Names a body binds: read before their binding is reached, they are nothing yet.
        self.local = {name: {n.id for node in ast.walk(fn) for target, _ in _bindings(node)
                             for n in ast.walk(target) if isinstance(n, ast.Name)}
                      for name, fn in self.kernels.items()}
        for name, fn in self.kernels.items():
            constexprs = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)
                          if a.annotation is not None and (ctx.resolve(a.annotation) or "").endswith("constexpr")}
            # Launched, used as a value, or never called: every run-time parameter a size.
            if name in escaped or (name not in called and name not in combined.values()):
                self._context(name, tuple(CONST if p in constexprs else SIZE for p in _params(fn)))
        for name in set(combined.values()):
            self._context(name, tuple(OTHER for _ in _params(self.kernels[name])))
        for _ in range(_ROUNDS):
            if not self._pass():
                return
        raise TooComplex("the flow analysis did not settle")

    def _context(self, name: str, signature: tuple) -> Key:
        key = (name, signature)
        if key not in self.env:
            if len(self.env) >= _CONTEXTS:
                raise TooComplex(f"more than {_CONTEXTS} ways of calling the file's kernels")
            self.env[key] = dict(zip(_params(self.kernels[name]), signature))
            self.returns[key] = NONE
        return key

    def contexts(self) -> list[Key]:
        return list(self.env)

    def _state(self) -> tuple:
        return (len(self.env), sum(len(k) for e in self.env.values() for k in e.values()),
                sum(len(e) for e in self.env.values()), sum(len(r) for r in self.returns.values()))

    def _pass(self) -> bool:
        before = self._state()
        for key in self.contexts():
            env, fn = self.env[key], self.kernels[key[0]]
            for node in ast.walk(fn):
                if node is fn:
                    continue
                for target, value in _bindings(node):
                    got = self.bound(key, node, value)
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            env[n.id] = env.get(n.id, NONE) | got
                if isinstance(node, ast.Return) and node.value is not None:
                    self.returns[key] = self.returns[key] | self.kinds(key, node.value)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.kernels:
                    self.kinds(key, node)  # every call's context, wherever the call stands
        return self._state() != before

    def bound(self, key: Key, node: ast.AST, value: ast.expr | None) -> frozenset:
        """What a binding made by ``node`` gives its name: its value and the bounds of the loops
        around it (a loop variable: an index)."""
        if value is None:
            return OTHER
        return _combine([self.kinds(key, value), *(self.kinds(key, h) for h in self.loops.get(id(node), ()))])

    def _call(self, key: Key, call: ast.Call) -> frozenset:
        """A helper's return in the context its arguments make here."""
        callee = call.func.id
        params = _params(self.kernels[callee])
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            every = frozenset().union(*(self.kinds(key, a) for a in [*call.args, *(k.value for k in call.keywords)]))
            signature = tuple(every for _ in params)
        else:
            passed = dict(zip(params, call.args))
            passed.update((k.arg, k.value) for k in call.keywords)
            signature = tuple(self.kinds(key, passed[p]) if p in passed else CONST for p in params)
        return self.returns[self._context(callee, signature)]

    def kinds(self, key: Key, node: ast.AST) -> frozenset:
        """What ``node`` in the body of context ``key`` may be made of, without an index or data."""
        if isinstance(node, ast.Constant):
            return CONST
        if isinstance(node, ast.Name):
            env = self.env[key]
            if node.id in env:
                return env[node.id]
            return NONE if node.id in self.local[key[0]] else CONST  # module constants, tl, kernels
        if isinstance(node, ast.Attribute):
            return CONST if node.attr in ("dtype", "element_ty", "shape") else self.kinds(key, node.value)
        if isinstance(node, ast.Starred):
            return self.kinds(key, node.value)
        if isinstance(node, ast.Call):
            name = _dsl_name(self.ctx, node.func) or ""
            if name in _INDEX_CALLS or name.startswith("atomic_"):
                return OTHER
            if name in _SIZE_SOURCES:
                return SIZE
            if name in _CONST_CALLS:
                return CONST
            if isinstance(node.func, ast.Name) and node.func.id in self.kernels:
                return self._call(key, node)
            parts = [self.kinds(key, node.func.value)] if isinstance(node.func, ast.Attribute) else []
            parts += [self.kinds(key, a) for a in [*node.args, *(k.value for k in node.keywords)]]
            return _combine(parts) if parts else CONST
        if isinstance(node, (ast.Slice, ast.expr_context)):
            return CONST
        parts = [self.kinds(key, child) for child in ast.iter_child_nodes(node)]
        return _combine(parts) if parts else CONST


def _with_loops(fn: ast.FunctionDef) -> Iterator[tuple[ast.AST, tuple]]:
    """Each binding node of ``fn`` with the headers of the loops around it (a ``for``'s
    iterable, a ``while``'s test)."""
    def walk(node: ast.AST, headers: tuple):
        for child in ast.iter_child_nodes(node):
            inner = headers
            if isinstance(node, ast.For) and child in node.body:
                inner = headers + (node.iter,)
            elif isinstance(node, ast.While) and child in node.body:
                inner = headers + (node.test,)
            yield child, inner
            yield from walk(child, inner)
    yield from walk(fn, ())


def _bindings(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """(target, value) for each binding ``node`` makes; a loop variable's value is None (an index)."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield target, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        yield node.target, ast.BinOp(node.target, node.op, node.value) if isinstance(node, ast.AugAssign) \
            else node.value
    elif isinstance(node, (ast.For, ast.comprehension)):
        yield node.target, None


def _sizes(got: frozenset) -> bool:
    """Computed from sizes (and constants) alone."""
    return S in got and X not in got


def _reused(flow: _Flow, key: Key) -> Iterator[tuple[ast.AST, str]]:
    """A name that holds sizes alone at one binding (or as a parameter) and an index or data at
    another that does not read it: since a name holds all its bindings, a test between the two
    would look like one on data.  An accumulator (``acc += x``) reads itself and is not this."""
    fn = flow.kernels[key[0]]
    sizes: dict[str, ast.AST] = {p: fn for p, got in flow.env[key].items() if p in _params(fn) and _sizes(got)}
    other: dict[str, ast.AST] = {}
    for node in ast.walk(fn):
        for target, value in _bindings(node):
            got = flow.bound(key, node, value)
            reads = set() if value is None else {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                if _sizes(got):
                    sizes.setdefault(name, node)
                elif X in got and name not in reads:
                    other.setdefault(name, node)
    for name in sorted(sizes.keys() & other.keys()):
        yield other[name], f"rebinds '{name}', which holds run-time arguments alone elsewhere, to an index or data:"


def _switches(flow: _Flow, key: Key) -> Iterator[tuple[ast.AST, str]]:
    ctx, fn = flow.ctx, flow.kernels[key[0]]
    yield from _reused(flow, key)
    hints = {id(n) for call in ast.walk(fn) if isinstance(call, ast.Call) and _dsl_name(ctx, call.func) == "assume"
             for n in ast.walk(call)}
    for node in ast.walk(fn):
        if id(node) in hints:
            continue  # tl.assume(stride > 0): a hint to the compiler, it decides nothing
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            if _sizes(flow.kinds(key, node.test)):
                yield node.test, "decides a branch"
        elif isinstance(node, (ast.Compare, ast.BoolOp)) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert))):
            if _sizes(flow.kinds(key, node)):
                yield node, "is a condition"
        elif isinstance(node, ast.BinOp) and not isinstance(node.op, _SIZE_OPS):
            if isinstance(node.op, _BY_CONSTANT) and flow.kinds(key, node.right) <= CONST:
                continue
            if _sizes(flow.kinds(key, node)):
                yield node, f"uses {type(node.op).__name__}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in flow.kernels:
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                yield node, _UNPACKS
        elif isinstance(node, ast.Call):
            called = _dsl_name(ctx, node.func) or ast.unparse(node.func)
            if not _sizes(flow.kinds(key, node)):
                continue
            if called not in _SIZE_CALLS:
                yield node, f"calls {called}"
            elif called in _CASTS and _truncates(ctx, node):
                yield node, "casts to a narrower integer (or a quotient to an integer)"


def _truncates(ctx: Context, call: ast.Call) -> bool:
    """A cast to int1/int8/int16, or to any integer type of a value with ``/`` in it."""
    args = [*call.args, *(k.value for k in call.keywords)]
    target = next((ctx.resolve(a) or "" for a in args[-1:]), "")
    name = target.rsplit(".", 1)[-1]
    if name in _NARROW:
        return True
    source = call.func.value if isinstance(call.func, ast.Attribute) and _dsl_name(ctx, call.func) == "to" else \
        (call.args[0] if call.args else None)
    divides = source is not None and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
                                         for n in ast.walk(source))
    return divides and name.startswith(("int", "uint"))


# Rationale: a switch inside a kernel body on its run-time sizes changes no launch, so the
# configuration survey cannot see it, and parity judges it only where the grid's sizes land
# (`M % 13 == 5`, tests/adversarial/static/kernel_*.py).  Chosen on the host, the same choice
# is a constexpr of the launch and the survey judges it wherever it changes.
@rule("size-switch")
def check_size_switch(ctx: Context) -> Iterator[Violation]:
    """A kernel body never branches or computes a flag on its run-time arguments alone."""
    if not ctx.jit_functions:
        return
    try:
        flow = _Flow(ctx)
        found: dict[int, tuple[str, ast.AST, str]] = {}
        for key in flow.contexts():
            for node, what in _switches(flow, key):
                found.setdefault(id(node), (key[0], node, what))
    except TooComplex as exc:
        yield v("size-switch", ctx.jit_functions[0], f"the kernels are too involved to tell where their run-time "
                                                     f"arguments flow ({exc}); write them plainer")
        return
    for name, node, what in found.values():
        if any(id(n) in found for n in ast.walk(node) if n is not node):
            continue  # the innermost switch of an expression is the one to show
        if what.startswith("rebinds"):
            yield v("size-switch", node, f"in kernel '{name}', {what} give each its own name (a test of the "
                                         "name could otherwise switch on the size unseen)")
            continue
        if what is _UNPACKS:
            yield v("size-switch", node, f"in kernel '{name}', '{_short(node)}' unpacks its arguments into a helper: "
                                         "which parameter gets a run-time argument cannot be told; pass each one "
                                         "by position or name")
            continue
        yield v("size-switch", node,
                f"in kernel '{name}', '{_short(node)}' {what} on run-time arguments and constants alone: "
                "a switch on sizes inside a kernel body is judged only where the grid lands; choose on "
                "the host and pass a tl.constexpr, whose every change the configuration survey judges")


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
