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

Every value of a body gets what it is computed from (:mod:`.flow`, flow-insensitive:
a name holds all its bindings): sizes (the run-time parameters of a kernel the
host launches, or of one whose name is used any other way than a direct call from
a kernel body; ``tl.num_programs``; ``tl.inline_asm_elementwise``, which can read
the grid), an index or loaded data (``tl.program_id``, ``tl.arange``, variables of
loops over a ``range``, ``tl.load``, atomics), or constants.  A variable of a loop
over anything else, or of a comprehension, holds what its iterable holds; ``a, b =
N, pid`` binds each name to its own value; a binding inside a loop also takes the
loop's bounds (a counter only ever given constants still counts a size's
iterations).  A helper is read once per set of sources its callers pass, wherever
the call stands (a helper given an index at one site and two sizes at another is a
switch at the second); its constexpr annotations count for nothing (Triton passes a
called helper what its caller has); a function handed to ``tl.reduce`` or
``tl.associative_scan`` (or their method forms) combines data.

Refused outright, because the analysis could not tell what flows where: arguments
unpacked into a helper, a kernel with ``*args`` or ``**kwargs``, a kernel body
that rebinds a name of the module, a name that holds sizes alone at one binding
and an index or data at another (one that does not read the name) when a test
reads it, and a file whose analysis does not settle within its limits.

A value of sizes and constants alone may be built with ``+``, ``-``, ``*``, ``/``,
``//`` and ``%`` by a constant, ``tl.cdiv``, casts, ``range`` and hints
(``multiple_of``, ``max_contiguous``, ``assume``, ``device_assert``).  Refused: a
comparison, ``and``/``or``/``not``, ``~``, shifts and bitwise operators, ``**``,
``//`` or ``%`` by a size, ``min``/``max``/``where`` or any other DSL function that
yields such a value; a cast of one to ``int1``, ``int8`` or ``int16`` (a truncation
is a flag), or to an integer type from a value with ``/`` in it, written in the
cast or in a binding of a name it reads (a floor); any ``if``, ``while`` or
conditional expression whose test is such a value; and loaded data meeting a floor
of sizes alone (``tl.cdiv``, ``//`` or ``%``) as an operand.  Comparisons with an index
(``offs < N``) or with loaded data (``t < V``) are masks and bounds checks, and
stay allowed.

What this does not stop: a size mixed with an index or loaded data in a way that
leaves its value (``pid * 0 + M``, ``tl.where(offs < 0, x, M)``, a load's ``other``
under an empty mask, ``(M, pid)[0]``, ``for m in range(M, M + 1)``, a tuple of a size
and data handed to ``tl.reduce``); a name rebound to data through itself (``w = w *
0 + tl.load(...)``: an accumulator's update reads itself); a flag built by floor
arithmetic, which ``tl.cdiv`` and ``//`` by a constant allow
(``tl.cdiv(M + 8, 13) - tl.cdiv(M + 7, 13)`` is ``M % 13 == 5``), used as a mask
bound against an index or as a trip count (where it meets loaded data, as a
factor or an operand, it is refused: a floor of sizes may count tiles, chunks and
trips, not scale, pick or bound data); ``.dtype`` of a run-time argument (Triton types an
int argument int64 only from 2**31); and switches on loaded values.  Refused
though honest: a counter in a loop over sizes compared with a size (``if ki ==
k_tiles - 1``), ``while off < N`` loops, and ``tl.maximum(N, 1)``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tik_agent.sandbox.static.context import Context
from tik_agent.sandbox.static.flow import (
    CONST, D, F, I, Flow, Key, TooComplex, bindings, dsl_name, param_names, size_only,
)
from tik_agent.sandbox.static.registry import Violation, rule, v

_SIZE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_BY_CONSTANT = (ast.FloorDiv, ast.Mod)
_SIZE_CALLS = frozenset({"cdiv", "to", "cast", "multiple_of", "max_contiguous", "assume", "range", "static_range",
                         "num_programs"})
_CASTS = frozenset({"to", "cast"})
_NARROW = frozenset({"int1", "int8", "int16", "uint8", "uint16"})
_HINTS = frozenset({"assume", "device_assert", "static_assert"})
_UNPACKS = "unpacks"
_VARARGS = "varargs"


def _floor(got: frozenset) -> bool:
    """Sizes alone that went through a floor: a step function of the sizes, a flag in the making."""
    return F in got and size_only(got)


def _reused(flow: Flow, key: Key) -> Iterator[tuple[ast.AST, str]]:
    """A name that holds sizes alone at one binding (or as a parameter) and an index or data at
    another that does not read it: since a name holds all its bindings, a test between the two
    would look like one on data.  An accumulator (``acc += x``) reads itself and is not this."""
    fn = flow.kernels[key[0]]
    params = set(param_names(fn))
    sizes: dict[str, ast.AST] = {p: fn for p, got in flow.env[key].items() if p in params and size_only(got)}
    other: dict[str, ast.AST] = {}
    for node in ast.walk(fn):
        for target, value in bindings(node):
            got = flow.bound(key, node, value)
            reads = set() if value is None else {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                if size_only(got):
                    sizes.setdefault(name, node)
                elif (I in got or D in got) and name not in reads:
                    other.setdefault(name, node)
    tested = {n.id for node in ast.walk(fn) if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Compare, ast.BoolOp))
              for n in ast.walk(node.test if isinstance(node, (ast.If, ast.While, ast.IfExp)) else node)
              if isinstance(n, ast.Name)}
    # A helper may test its parameter: a name passed to one counts as tested (its context holds
    # all the name's bindings, so the helper's test would look like one on data).
    tested |= {n.id for node in ast.walk(fn) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
               and node.func.id in flow.kernels
               for arg in [*node.args, *(k.value for k in node.keywords)] for n in ast.walk(arg) if isinstance(n, ast.Name)}
    for name in sorted(sizes.keys() & other.keys() & tested):
        yield other[name], f"rebinds '{name}', which holds run-time arguments alone elsewhere, to an index or data:"


def _switches(flow: Flow, key: Key) -> Iterator[tuple[ast.AST, str]]:
    ctx, fn = flow.ctx, flow.kernels[key[0]]
    yield from _reused(flow, key)
    if fn.args.vararg or fn.args.kwarg:
        yield fn, _VARARGS
    for name in sorted(flow.local[key[0]] & ctx.module_names):
        yield next(b for b in ast.walk(fn) for t, _ in bindings(b) for n in ast.walk(t)
                   if isinstance(n, ast.Name) and n.id == name), f"rebinds '{name}', a name of the module, here:"
    hints = {id(n) for call in ast.walk(fn) if isinstance(call, ast.Call) and dsl_name(ctx, call.func) in _HINTS
             for n in ast.walk(call)}
    for node in ast.walk(fn):
        if id(node) in hints:
            continue  # tl.assume(stride > 0), tl.device_assert(N <= BLOCK): they decide nothing
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            if size_only(flow.kinds(key, node.test)):
                yield node.test, "decides a branch"
        elif isinstance(node, (ast.Compare, ast.BoolOp)) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert))):
            if size_only(flow.kinds(key, node)):
                yield node, "is a condition"
        if isinstance(node, (ast.BinOp, ast.Compare, ast.Call)) and _scales_data(flow, key, node):
            yield node, "meets loaded data with a floor of sizes"
            continue
        if isinstance(node, ast.BinOp) and not isinstance(node.op, _SIZE_OPS):
            if isinstance(node.op, _BY_CONSTANT) and flow.kinds(key, node.right) <= CONST:
                continue
            if size_only(flow.kinds(key, node)):
                yield node, f"uses {type(node.op).__name__}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in flow.kernels:
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                yield node, _UNPACKS
        elif isinstance(node, ast.Call):
            called = dsl_name(ctx, node.func) or ast.unparse(node.func)
            if not size_only(flow.kinds(key, node)):
                continue
            if called not in _SIZE_CALLS:
                yield node, f"calls {called}"
            elif called in _CASTS and _truncates(flow, key, node):
                yield node, "casts to a narrower integer (or a quotient to an integer)"


def _scales_data(flow: Flow, key: Key, node: ast.AST) -> bool:
    """One operand is loaded data and another a floor of sizes alone (``x * (tl.cdiv(M + 8, 13) -
    tl.cdiv(M + 7, 13))``): a floor of sizes may count tiles, chunks and loop trips, not scale,
    pick or bound data.  A helper call's arguments are read in the helper."""
    if isinstance(node, ast.BinOp):
        operands = [node.left, node.right]
    elif isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
    elif isinstance(node.func, ast.Name) and node.func.id in flow.kernels:
        return False
    else:
        operands = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(node.func, ast.Attribute):
            operands.append(node.func.value)
    kinds = [flow.kinds(key, o) for o in operands]
    return any(D in k for k in kinds) and any(_floor(k) for k in kinds)


def _truncates(flow: Flow, key: Key, call: ast.Call) -> bool:
    """A cast to int1/int8/int16, or to any integer type of a value with ``/`` in it (written in the
    cast or in a binding of a name it reads)."""
    ctx = flow.ctx
    method = isinstance(call.func, ast.Attribute) and not ctx.resolve(call.func)  # x.to(dtype) or tl.cast(x, dtype)
    dtype = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if dtype is None:
        positional = call.args[0:1] if method else call.args[1:2]
        dtype = positional[0] if positional else None
    name = ((ctx.resolve(dtype) or "") if dtype is not None else "").rsplit(".", 1)[-1]
    if name in _NARROW:
        return True
    source = call.func.value if method else (call.args[0] if call.args else None)
    return source is not None and name.startswith(("int", "uint")) and _divides(flow, key, source, set())


def _divides(flow: Flow, key: Key, node: ast.AST, seen: set) -> bool:
    """``node`` has a true division in it, or reads a name one of whose bindings has."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            return True
        if isinstance(n, ast.Name) and n.id not in seen:
            seen.add(n.id)
            for b in ast.walk(flow.kernels[key[0]]):
                for target, value in bindings(b):
                    if value is not None and any(isinstance(t, ast.Name) and t.id == n.id for t in ast.walk(target)) \
                            and _divides(flow, key, value, seen):
                        return True
    return False


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
        flow = Flow(ctx)
        found: dict[int, tuple[str, ast.AST, str]] = {}
        for key in flow.contexts():
            for node, what in _switches(flow, key):
                found.setdefault(id(node), (key[0], node, what))
    except TooComplex as exc:
        yield v("size-switch", ctx.jit_functions[0], f"the kernels are too involved to tell where their run-time "
                                                     f"arguments flow ({exc}); write them plainer")
        return
    for name, node, what in found.values():
        structural = what is _VARARGS or what is _UNPACKS or what.startswith("rebinds")
        if not structural and any(id(n) in found for n in ast.walk(node) if n is not node):
            continue  # the innermost switch of an expression is the one to show
        if what is _VARARGS:
            yield v("size-switch", node, f"kernel '{name}' takes *args or **kwargs: which parameter holds a "
                                         "run-time argument cannot be told; name every parameter")
            continue
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
