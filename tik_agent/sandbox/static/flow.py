"""The flow analysis behind the rule ``size-switch`` (:mod:`.rules_flow`): what every value of
a kernel body is computed from (sizes, an index or loaded data, constants), per context of
each helper.  The rule and its reasons are in :mod:`.rules_flow`."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tik_agent.sandbox.static.context import Context

S, I, D, C = "S", "I", "D", "C"  # sizes; an index; loaded data; constants
F = "F"  # with S alone: sizes that went through a floor (tl.cdiv, // or % by a constant)
NONE: frozenset = frozenset()  # nothing yet (a name before its binding is reached)
SIZE, INDEX, DATA, CONST = frozenset({S}), frozenset({I}), frozenset({D}), frozenset({C})
_INDEX_CALLS = frozenset({"program_id", "arange"})
_DATA_CALLS = frozenset({"load"})  # and atomic_*
_SIZE_SOURCES = frozenset({"num_programs"})  # the grid: a function of the sizes, the same in every program
_CONST_CALLS = frozenset({"zeros", "zeros_like"})
_COMBINERS = frozenset({"reduce", "associative_scan"})
_ROUNDS = 40      # passes to a fixed point; one that does not settle is refused
_CONTEXTS = 256   # contexts per file; more is refused
Key = tuple       # (kernel name, what each parameter may be): one context of a body


def dsl_name(ctx: Context, func: ast.expr) -> str | None:
    """The DSL function a call names (``tl.load`` -> ``load``), or a method's name (``x.to``)."""
    path = ctx.resolve(func)
    if path and path.startswith(("triton.language.", "triton.")):
        return path.rsplit(".", 1)[-1]
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def param_names(fn: ast.FunctionDef) -> list[str]:
    """Every named parameter, in order (``*args`` and ``**kwargs`` are the rule's to refuse)."""
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def combine(parts: list[frozenset]) -> frozenset:
    """What a value made of ``parts`` is computed from: all of it."""
    return frozenset().union(*parts)


class TooComplex(Exception):
    """The analysis did not settle within its limits: the rule refuses the file."""


class Flow:
    """What every value of every kernel body in a file is computed from, per context: a helper
    is read once for each set of sources its callers pass (one given an index at one site and
    two sizes at another is read twice)."""

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
                elif isinstance(n, ast.Call) and dsl_name(ctx, n.func) in _COMBINERS:
                    at = 2 if ctx.resolve(n.func) else 1  # tl.reduce(x, axis, fn); x.reduce(axis, fn)
                    fn_arg = n.args[at] if len(n.args) > at else next(
                        (k.value for k in n.keywords if k.arg == "combine_fn"), None)
                    if isinstance(fn_arg, ast.Name) and fn_arg.id in self.kernels:
                        combined[id(fn_arg)] = fn_arg.id
        escaped = {n.id for n in ctx.nodes if isinstance(n, ast.Name) and n.id in self.kernels
                   and id(n) not in direct and id(n) not in combined}
        called = {n.id for n in ctx.nodes if isinstance(n, ast.Name) and id(n) in direct}
        # Names a body binds: read before their binding is reached, they are nothing yet.
        self.local = {name: {n.id for node in ast.walk(fn) for target, _ in bindings(node)
                             for n in ast.walk(target) if isinstance(n, ast.Name)}
                      for name, fn in self.kernels.items()}
        roots = []
        for name, fn in self.kernels.items():
            constexprs = ctx.constexprs(fn)
            # Launched, used as a value, or never called: every run-time parameter a size.
            if name in escaped or (name not in called and name not in combined.values()):
                roots.append(self._context(name, tuple(CONST if p in constexprs else SIZE for p in param_names(fn))))
        for name in set(combined.values()):
            roots.append(self._context(name, tuple(DATA for _ in param_names(self.kernels[name]))))
        self._memo: dict | None = None
        self._live: list[Key] | None = None
        for _ in range(_ROUNDS):
            if not self._pass():
                # Settled: from here on nothing changes, so each node of the file is worked out once
                # (the rule asks for every node, and each answer walks the node's subtree).
                self._memo, self._tree = {}, {id(n) for n in ctx.nodes}
                self._live = self._reached(roots)
                return
        raise TooComplex("the flow analysis did not settle")

    def _context(self, name: str, signature: tuple) -> Key:
        key = (name, signature)
        if key not in self.env:
            if len(self.env) >= _CONTEXTS:
                raise TooComplex(f"more than {_CONTEXTS} ways of calling the file's kernels")
            self.env[key] = dict(zip(param_names(self.kernels[name]), signature))
            self.returns[key] = NONE
        return key

    def contexts(self) -> list[Key]:
        """Every context so far; once settled, only those the settled sources reach from the
        launched kernels.  A pass can make a context from sources not yet complete (a helper
        called in a loop before the loop's loads reach its arguments): no call makes it in the
        end, and judged it would flag what no call passes."""
        return list(self.env) if self._live is None else list(self._live)

    def _reached(self, roots: list[Key]) -> list[Key]:
        before = len(self.env)
        seen, todo = set(roots), list(roots)
        while todo:
            key = todo.pop()
            for node in ast.walk(self.kernels[key[0]]):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.kernels:
                    callee = self._callee(key, node)
                    if callee not in seen:
                        seen.add(callee)
                        todo.append(callee)
        if len(self.env) != before:  # a settled analysis makes no new context
            raise TooComplex("the flow analysis did not settle")
        return [k for k in self.env if k in seen]

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
                for target, value in bindings(node):
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
            return INDEX
        return combine([self.kinds(key, value), *(self.kinds(key, h) for h in self.loops.get(id(node), ()))])

    def _call(self, key: Key, call: ast.Call) -> frozenset:
        """A helper's return in the context its arguments make here."""
        return self.returns[self._callee(key, call)]

    def _callee(self, key: Key, call: ast.Call) -> Key:
        """The context a call of a helper makes with its arguments here."""
        callee = call.func.id
        params = param_names(self.kernels[callee])
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            every = frozenset().union(*(self.kinds(key, a) for a in [*call.args, *(k.value for k in call.keywords)]))
            signature = tuple(every for _ in params)
        else:
            passed = dict(zip(params, call.args))
            passed.update((k.arg, k.value) for k in call.keywords)
            signature = tuple(self.kinds(key, passed[p]) if p in passed else CONST for p in params)
        return self._context(callee, signature)

    def kinds(self, key: Key, node: ast.AST) -> frozenset:
        """What ``node`` in the body of context ``key`` is computed from."""
        if self._memo is None or id(node) not in self._tree:  # a node made here (x += y) is never kept
            return self._kinds(key, node)
        memo = (key, id(node))
        if memo not in self._memo:
            self._memo[memo] = self._kinds(key, node)
        return self._memo[memo]

    def _kinds(self, key: Key, node: ast.AST) -> frozenset:
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
            name = dsl_name(self.ctx, node.func) or ""
            if name in _INDEX_CALLS:
                return INDEX
            if name in _DATA_CALLS or name.startswith("atomic_"):
                return DATA
            if name in _SIZE_SOURCES:
                return SIZE
            if name == "inline_asm_elementwise":  # reads registers: the grid's size among them
                return combine([SIZE, *(self.kinds(key, a) for a in [*node.args, *(k.value for k in node.keywords)])])
            if name in _CONST_CALLS:
                return CONST
            if isinstance(node.func, ast.Name) and node.func.id in self.kernels:
                return self._call(key, node)
            parts = [self.kinds(key, node.func.value)] if isinstance(node.func, ast.Attribute) else []
            parts += [self.kinds(key, a) for a in [*node.args, *(k.value for k in node.keywords)]]
            got = combine(parts) if parts else CONST
            return got | {F} if name == "cdiv" and size_only(got) else got
        if isinstance(node, (ast.Slice, ast.expr_context)):
            return CONST
        parts = [self.kinds(key, child) for child in ast.iter_child_nodes(node)]
        got = combine(parts) if parts else CONST
        floor = isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod))
        return got | {F} if floor and size_only(got) else got


def size_only(got: frozenset) -> bool:
    """Computed from sizes (and constants) alone: no index, no loaded data."""
    return S in got and I not in got and D not in got


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


def bindings(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """(target, value) for each binding ``node`` makes; a loop variable's value is None (an index)."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(target.elts) == len(node.value.elts) \
                    and not any(isinstance(e, ast.Starred) for e in (*target.elts, *node.value.elts)):
                yield from zip(target.elts, node.value.elts)  # a, b = N, pid: each its own
            else:
                yield target, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        yield node.target, ast.BinOp(node.target, node.op, node.value) if isinstance(node, ast.AugAssign) \
            else node.value
    elif isinstance(node, (ast.For, ast.comprehension)):
        ranged = isinstance(node.iter, ast.Call) and getattr(node.iter.func, "id", getattr(node.iter.func, "attr", "")) \
            in ("range", "static_range")
        yield node.target, None if ranged else node.iter  # over a range: an index; else what it holds
