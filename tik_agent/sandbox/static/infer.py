"""What each name and expression in host code can hold: a small, flow-insensitive type inference.

Host code (everything outside ``@triton.jit`` functions) may compute only on
values that are provably plain: Python numbers, strings, shapes, dtypes and
devices.  This module says which values those are.  Every binding of a name
(assignment, augmented assignment, walrus, unpacking, for and comprehension
targets, with-as, parameters through their defaults and every call site)
adds to the name's set of types, in its own function's scope; the sets grow
until nothing changes.  What cannot be shown plain is ``unknown`` and is
treated as a tensor: when in doubt, the rules reject.

Parameters of the entry (and of a backward entry) without a default are unknown
(the harness calls them with tensors); when the caller does not name the entry, every module-level
function is taken to be one.  Other functions' parameters have the types of
their defaults and of the arguments at every call site; a function
passed around as a value has unknown parameters; a grid or heuristics callable
receives the launch's meta dict, whose entries have the types of the
arguments passed under those names at the launch sites.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from tik_agent.sandbox.static import policy
from tik_agent.sandbox.static.context import Context, flatten_targets
from tik_agent.sandbox.static.kinds import (
    API_RESULTS, BOOL, BUILTIN, BUILTIN_RESULTS, FLOAT, FUNC, INT, KERNEL, META, NONE, PLAIN, RANGE, SIZE,
    STR, TENSOR, UNKNOWN, api_type, attribute_type, constant_type, method_type,
)  # fmt: skip


def plain(types: Iterable[str]) -> bool:
    """Provably a Python number, string, shape, dtype or device (never a tensor)."""
    types = frozenset(types)
    return bool(types) and types <= PLAIN


class Types:
    """The fixed point of the inference over one module; query it with :meth:`of`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.bindings: dict[int, dict[str, set[str]]] = {}
        self.kernels = {fn.name: fn for fn in ctx.jit_functions}
        self.functions: dict[str, list[ast.AST]] = {}
        for node in ctx.host_nodes():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.functions.setdefault(target.id, []).append(node.value)
        self.constexprs = {
            a.arg for fn in ctx.jit_functions for a in fn.args.args if a.annotation is not None
            and (ctx.resolve(a.annotation) or "").endswith("constexpr")
        }
        self.launch_args: dict[str, set[str]] = {}
        self._cache: dict[int, frozenset[str]] = {}
        self._returning: set[int] = set()
        loads = [n for n in ctx.host_nodes() if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        self._uses: dict[str, list[ast.Name]] = {}
        for name in loads:
            self._uses.setdefault(name.id, []).append(name)
        self._calls = [n for n in ctx.host_nodes() if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        self._roles: dict[int, str] = {}
        self._solve()

    # ------------------------------------------------------------------ solving

    def _solve(self) -> None:
        for _ in range(50):  # the sets only grow over a finite lattice; this is a guard, not a limit in practice
            before = self._size()
            self._cache.clear()
            for node in self.ctx.host_nodes():
                self._visit(node)
            if self._size() == before:
                break
        self._cache.clear()

    def _size(self) -> int:
        return sum(len(s) for scope in self.bindings.values() for s in scope.values()) + sum(
            len(s) for s in self.launch_args.values()
        )

    def _bind(self, scope: ast.AST, name: str, types: Iterable[str]) -> None:
        self.bindings.setdefault(id(scope), {}).setdefault(name, set()).update(types)

    def _bind_target(self, target: ast.expr, value: ast.expr | None, types: frozenset[str]) -> None:
        if isinstance(target, ast.Name):
            self._bind(self.ctx.scope_of(target), target.id, types)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, None, frozenset({SIZE}) if plain(self._elements(types)) else {UNKNOWN})
        elif isinstance(target, (ast.Tuple, ast.List)):
            literal = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            literal = literal and not any(isinstance(e, ast.Starred) for e in (*value.elts, *target.elts))
            for i, element in enumerate(target.elts):
                if literal:
                    self._bind_target(element, value.elts[i], self.of(value.elts[i]))
                else:
                    self._bind_target(element, None, self._elements(types))

    def _visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.Assign):
            types = self.of(node.value)
            for target in node.targets:
                self._bind_target(target, node.value, types)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._bind_target(node.target, node.value, self.of(node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self._bind_target(node.target, None, self._binop(self.of(node.target), self.of(node.value)))
        elif isinstance(node, ast.NamedExpr):
            self._bind_target(node.target, node.value, self.of(node.value))
        elif isinstance(node, (ast.For, ast.comprehension)):
            self._bind_target(node.target, None, self._elements(self.of(node.iter)))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            for target in flatten_targets([node.optional_vars]):
                self._bind_target(target, None, frozenset({UNKNOWN}))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind(ctx.scope_of(node), node.name, {UNKNOWN})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._bind(ctx.scope_of(node), node.name, {KERNEL if node.name in self.kernels else FUNC})
            self._parameters(node)
        elif isinstance(node, ast.Lambda):
            self._parameters(node)
        elif isinstance(node, ast.Call):
            self._launch(node)

    def _parameters(self, fn: ast.AST) -> None:
        args = fn.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        defaults.update((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
        role = self._role(fn)
        for arg in [*positional, *args.kwonlyargs]:
            self._bind(fn, arg.arg, ())  # bound, even if nothing reaches it: see lookup()
            if arg in defaults:
                self._bind(fn, arg.arg, self.of(defaults[arg]))
            if role == "meta":
                self._bind(fn, arg.arg, {META})
            elif role == "escaped" or (role == "top" and arg not in defaults):
                self._bind(fn, arg.arg, {UNKNOWN})
        for arg in (args.vararg, args.kwarg):
            if arg is not None:
                self._bind(fn, arg.arg, {UNKNOWN})
        for call in self._call_sites(fn):
            starred = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
            for i, value in enumerate(call.args):
                if i < len(positional) and not starred:
                    self._bind(fn, positional[i].arg, self.of(value))
            for keyword in call.keywords:
                if keyword.arg is not None:
                    self._bind(fn, keyword.arg, self.of(keyword.value))
            if starred:
                for arg in [*positional, *args.kwonlyargs]:
                    self._bind(fn, arg.arg, {UNKNOWN})

    def _role(self, fn: ast.AST) -> str:
        """'meta' (a grid or heuristics callable), 'escaped' (used as a value), 'top' or 'local'."""
        if id(fn) not in self._roles:
            self._roles[id(fn)] = self._find_role(fn)
        return self._roles[id(fn)]

    def _find_role(self, fn: ast.AST) -> str:
        ctx = self.ctx
        name = getattr(fn, "name", None)
        if isinstance(fn, ast.Lambda):
            parent = ctx.parent(fn)
            if isinstance(parent, ast.Assign):
                name = next((t.id for t in parent.targets if isinstance(t, ast.Name)), None)
            elif self._grid_position(fn):
                return "meta"
            else:
                return "escaped"
        uses = self._uses.get(name or "", [])
        # Rationale: a top-level function nothing refers to is typed as an entry (its
        # parameters whatever a caller passes, i.e. tensors), which is the strictest
        # reading: a kernel file may carry a launcher its spec does not name (a backward
        # entry under a forward-only spec), and its parameters are then tensors too.
        top = ctx.scope_of(fn) is ctx.tree and (ctx.entries is None or name in ctx.entries or not uses)
        # A nested function nothing refers to never runs (getattr, globals and vars are
        # refused): it reads like a grid not used yet.  A top-level one may be the entry.
        if (not uses and not top) or any(self._grid_position(n) for n in uses):
            return "meta"
        if any(not (isinstance(ctx.parent(n), ast.Call) and ctx.parent(n).func is n) for n in uses):
            return "escaped"
        return "top" if top else "local"

    def _grid_position(self, node: ast.AST) -> bool:
        """``kernel[node]`` or a value of ``@triton.heuristics({...: node})``."""
        parent = self.ctx.parent(node)
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            return isinstance(parent.value, ast.Name) and parent.value.id in self.kernels
        while isinstance(parent, (ast.Dict, ast.keyword)):
            parent = self.ctx.parent(parent)
        return isinstance(parent, ast.Call) and self.ctx.resolve(parent.func) == "triton.heuristics"

    def _call_sites(self, fn: ast.AST) -> list[ast.Call]:
        names = {n for n, nodes in self.functions.items() if any(f is fn for f in nodes)}
        return [n for n in self._calls if n.func.id in names]

    def _launch(self, call: ast.Call) -> None:
        """Record what a ``kernel[grid](...)`` passes under each parameter name."""
        func = call.func
        if not (isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in self.kernels):
            return
        params = [a.arg for a in self.kernels[func.value.id].args.args]
        for i, value in enumerate(call.args):
            if i < len(params) and not isinstance(value, ast.Starred):
                self.launch_args.setdefault(params[i], set()).update(self.of(value))
        for keyword in call.keywords:
            if keyword.arg is not None:
                self.launch_args.setdefault(keyword.arg, set()).update(self.of(keyword.value))

    # ------------------------------------------------------------------ queries

    def lookup(self, node: ast.Name) -> frozenset[str] | None:
        """The types bound to a name where ``node`` reads it; None when nothing in the file binds it."""
        scope: ast.AST | None = self.ctx.scope_of(node)
        while scope is not None:
            found = self.bindings.get(id(scope), {}).get(node.id)
            if found is not None:
                return frozenset(found) or frozenset({UNKNOWN})
            scope = None if scope is self.ctx.tree else self.ctx.scope_of(scope)
        return None

    def of(self, node: ast.AST) -> frozenset[str]:
        """The set of types ``node`` may evaluate to (host code only)."""
        key = id(node)
        if key not in self._cache:
            self._cache[key] = frozenset(self._of(node)) or frozenset({UNKNOWN})
        return self._cache[key]

    def _of(self, node: ast.AST) -> Iterable[str]:
        ctx = self.ctx
        path = ctx.resolve(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if path is not None and not (isinstance(node, ast.Name) and self.lookup(node) is not None):
            return {api_type(path)}
        if isinstance(node, ast.Constant):
            return {constant_type(node.value)}
        if isinstance(node, ast.Name):
            found = self.lookup(node)
            if found is not None:
                return found
            return {BUILTIN} if node.id in policy.ALL_BUILTINS else {UNKNOWN}
        if isinstance(node, ast.Attribute):
            return {t for r in self.of(node.value) for t in attribute_type(r, node.attr)}
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return {t for r in self.of(node.value) for t in self._item(r, node.slice)}
        if isinstance(node, ast.BinOp):
            return self._binop(self.of(node.left), self.of(node.right))
        if isinstance(node, ast.UnaryOp):
            operand = self.of(node.operand)
            if not plain(operand):
                return {TENSOR}
            return {BOOL} if isinstance(node.op, ast.Not) else operand
        if isinstance(node, ast.Compare):
            identity = all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
            return {BOOL} if identity or all(plain(self.of(e)) for e in (node.left, *node.comparators)) else {TENSOR}
        if isinstance(node, ast.BoolOp):
            return {t for value in node.values for t in self.of(value)}
        if isinstance(node, ast.IfExp):
            return self.of(node.body) | self.of(node.orelse)
        if isinstance(node, (ast.Tuple, ast.List)):
            elements = [self._elements(self.of(e.value)) if isinstance(e, ast.Starred) else self.of(e) for e in node.elts]
            return {SIZE} if all(plain(e) for e in elements) else {UNKNOWN}
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return {SIZE} if plain(self.of(node.elt)) else {UNKNOWN}
        if isinstance(node, ast.JoinedStr):
            return {STR}
        if isinstance(node, ast.Lambda):
            return {FUNC}
        if isinstance(node, ast.NamedExpr):
            return self.of(node.value)
        return {UNKNOWN}

    def _call(self, node: ast.Call) -> Iterable[str]:
        func = self.ctx.resolve(node.func)
        if func is not None and not (isinstance(node.func, ast.Name) and self.lookup(node.func) is not None):
            if func.startswith("math."):
                return {INT, FLOAT}
            return {API_RESULTS.get(func, UNKNOWN)}
        if isinstance(node.func, ast.Name):
            kinds = self.of(node.func)
            result: set[str] = set()
            if FUNC in kinds:
                result |= self._returns(node.func.id)
            if BUILTIN in kinds:
                result |= self._builtin(node.func.id, node)
            return result or {UNKNOWN}
        if isinstance(node.func, ast.Attribute):
            return {t for r in self.of(node.func.value) for t in method_type(r, node.func.attr, node)}
        return {UNKNOWN}

    def _returns(self, name: str) -> set[str]:
        result: set[str] = set()
        for fn in self.functions.get(name, []):
            if id(fn) in self._returning:  # recursion: give up on precision, not on safety
                return {UNKNOWN}
            self._returning.add(id(fn))
            try:
                if isinstance(fn, ast.Lambda):
                    result |= self.of(fn.body)
                    continue
                returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and self.ctx.scope_of(n) is fn]
                for r in returns:
                    result |= self.of(r.value) if r.value is not None else {NONE}
                if not returns:
                    result.add(NONE)
            finally:
                self._returning.discard(id(fn))
        return result

    def _builtin(self, name: str, node: ast.Call) -> set[str]:
        if name in BUILTIN_RESULTS:
            return {BUILTIN_RESULTS[name]}
        args = [self.of(a) for a in node.args]
        if name in ("tuple", "list", "sorted", "reversed"):
            return {SIZE} if len(args) == 1 and plain(self._elements(args[0])) else {UNKNOWN}
        if name in ("min", "max", "abs", "sum", "pow", "divmod"):
            merged = self._elements(args[0]) if len(args) == 1 and name != "abs" else {t for a in args for t in a}
            return set(merged) if plain(merged) else {TENSOR}
        return {UNKNOWN}

    def _item(self, container: str, index: ast.expr) -> Iterable[str]:
        if container == NONE:
            return set()
        if container == SIZE:
            return {SIZE} if isinstance(index, ast.Slice) else {INT}
        if container == STR:
            return {STR}
        if container == META:
            key = index.value if isinstance(index, ast.Constant) and isinstance(index.value, str) else None
            if key in self.launch_args:
                return self.launch_args[key]
            return {INT} if key in self.constexprs else {UNKNOWN}
        if container == TENSOR:
            return {TENSOR}
        return {UNKNOWN}

    def _elements(self, types: Iterable[str]) -> frozenset[str]:
        out: set[str] = set()
        for t in types:
            out |= {SIZE: {INT}, RANGE: {INT}, STR: {STR}, TENSOR: {TENSOR}, META: {STR}}.get(t, {UNKNOWN})
        return frozenset(out)

    @staticmethod
    def _binop(left: frozenset[str], right: frozenset[str]) -> frozenset[str]:
        return (left | right) & PLAIN if plain(left) and plain(right) else frozenset({TENSOR})


def infer(ctx: Context) -> Types:
    ctx.types = Types(ctx)
    return ctx.types


__all__ = ["Types", "infer", "plain"]
