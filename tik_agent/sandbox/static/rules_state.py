"""Rules against state that survives between calls, and against writes the harness cannot see."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tik_agent.sandbox.static import policy
from tik_agent.sandbox.static.context import Context, flatten_targets, assignment_targets, root_name, store_targets
from tik_agent.sandbox.static.registry import Violation, rule, v


# Rationale: a kernel module holds imports, constants and functions.  Statements that run
# at import time (calls, loops, if/try blocks) can set up caches, patch the harness or
# start work the timer never sees.
@rule("module-level")
def _check_module_statements(ctx: Context) -> Iterator[Violation]:
    """Module level holds only a docstring, imports, constant assignments and functions."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign, ast.AnnAssign, ast.ClassDef)
    for index, stmt in enumerate(ctx.tree.body):
        is_docstring = index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if not (is_docstring or isinstance(stmt, allowed)):
            yield v("module-level", stmt, f"{type(stmt).__name__} statement at module level is not allowed")


# Rationale: module-level lists, dicts, objects or call results are state that survives
# between calls: a cache keyed on shapes or pointers replays old results instead of
# computing.  Constants (numbers, strings, dtypes, tl.constexpr) are all a kernel needs.
@rule("module-state")
def _check_module_state(ctx: Context) -> Iterator[Violation]:
    """Module-level assignments bind constants only, to plain names."""
    constants: set[str] = set()
    for stmt in ctx.tree.body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        targets = list(flatten_targets(assignment_targets(stmt)))
        if stmt.value is not None and not _is_constant(ctx, stmt.value, constants):
            yield v("module-state", stmt, "module-level value must be a constant")
        for target in targets:
            if isinstance(target, ast.Name):
                if target.id in ctx.aliases:
                    yield v("module-state", stmt, f"rebinding imported name '{target.id}'")
                constants.add(target.id)
            elif not isinstance(target, (ast.Attribute, ast.Subscript)):  # those: monkeypatch
                yield v("module-state", stmt, "module-level assignment target must be a name")


_CONSTANT_CALLS = frozenset({"int", "float", "bool", "triton.constexpr", "triton.language.constexpr"})


def _is_constant(ctx: Context, node: ast.expr, constants: set[str]) -> bool:
    """Numbers, strings, dtypes, tl.constexpr(...), math on those, and earlier constants."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.Tuple):
        return all(_is_constant(ctx, e, constants) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _is_constant(ctx, node.operand, constants)
    if isinstance(node, ast.BinOp):
        return _is_constant(ctx, node.left, constants) and _is_constant(ctx, node.right, constants)
    if isinstance(node, ast.Attribute):
        path = ctx.resolve(node) or ""
        return path.startswith(("torch.", "math.", policy.DSL + ".")) and policy.api_allowed(path)
    if isinstance(node, ast.Call) and not node.keywords:
        callee = (node.func.id if isinstance(node.func, ast.Name) else ctx.resolve(node.func)) or ""
        pure = callee in _CONSTANT_CALLS or callee.startswith("math.")
        return pure and all(_is_constant(ctx, a, constants) for a in node.args)
    return False


# Rationale: global and nonlocal let a function rebind module or closure state, which
# is how results get cached between calls (keyed on shapes, pointers or call counts).
@rule("global")
def _check_global(ctx: Context) -> Iterator[Violation]:
    """No global or nonlocal statements."""
    for node in ctx.nodes:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            yield v("global", node, f"'{type(node).__name__.lower()}' statement is not allowed")


# Rationale: a default argument is created once and shared by every call, so anything
# but a constant is hidden state: a list, dict or set, a call result, and a container
# nested at any depth inside a tuple (cache=([],)).  Tuples are refused too, even empty
# ones: a launcher has no use for them, and "constant all the way down" is then one
# readable rule.  A default may also name a module-level constant or a dtype.
@rule("mutable-default")
def _check_defaults(ctx: Context) -> Iterator[Violation]:
    """Default arguments are numbers, strings, None, module-level constants or dtypes; nothing else."""
    constants = {t.id for stmt in ctx.tree.body for t in flatten_targets(assignment_targets(stmt))
                 if isinstance(t, ast.Name) and isinstance(stmt, (ast.Assign, ast.AnnAssign))}
    for node in ctx.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                if not _constant_default(ctx, default, constants):
                    yield v("mutable-default", default,
                            f"default '{ast.unparse(default)}' is not a constant: defaults are shared between calls")


def _constant_default(ctx: Context, node: ast.expr, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float))
    if isinstance(node, ast.Name):
        return node.id in constants and node.id not in ctx.aliases
    if isinstance(node, ast.Attribute):
        path = ctx.resolve(node) or ""
        dtype = path.startswith("torch.") and path[6:] in policy.TORCH_DTYPES
        return dtype or (path.startswith(policy.DSL + ".") and path.count(".") == 2 and policy.api_allowed(path)
                         and not policy.is_namespace(path))
    return False


# Rationale: classes carry state between calls and give access to descriptors and
# metaclass hooks; a kernel file is functions and constants.
@rule("class")
def _check_classes(ctx: Context) -> Iterator[Violation]:
    """No class definitions."""
    for node in ctx.nodes:
        if isinstance(node, ast.ClassDef):
            yield v("class", node, f"class '{node.name}' is not allowed")


# Rationale: async code schedules work the timer and the parity check may never see.
@rule("async")
def _check_async(ctx: Context) -> Iterator[Violation]:
    """No async functions, await, async for or async with."""
    for node in ctx.nodes:
        if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            yield v("async", node, "async code is not allowed")


# Rationale: a @triton.jit object's attributes (cache, run, fn, device_caches, warmup)
# hold compiled kernels and the raw Python function; reaching them lets a candidate
# replay cached results or swap what the launch runs.  Launching is kernel[grid](...).
@rule("kernel-attribute")
def _check_kernel_attribute(ctx: Context) -> Iterator[Violation]:
    """Kernels are only launched (kernel[grid](...)), never inspected or changed."""
    kernels = {fn.name for fn in ctx.jit_functions}
    for node in ctx.nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in kernels:
            yield v("kernel-attribute", node, f"'{ast.unparse(node)}' reaches into a compiled kernel")


def _stores(ctx: Context) -> Iterator[tuple[ast.AST, ast.expr, bool]]:
    """(statement, attribute-or-item target, target is rooted at a module-level name).

    Every way of storing counts: assignments and del, but also for, with-as and
    comprehension targets (``for x.data in ...``).
    """
    roots = set(ctx.aliases) | set(ctx.module_names)
    for node in ctx.nodes:
        for target in store_targets(node):
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                yield node, target, root_name(target) in roots


# Rationale: assigning to an attribute or item of a module or of a module-level object
# patches the harness (torch.cuda.synchronize, triton.testing.do_bench, a kernel's
# cache) so that timing or comparison lies.
@rule("monkeypatch")
def _check_monkeypatch(ctx: Context) -> Iterator[Violation]:
    """No assignment or deletion of attributes or items on imported modules or module-level names."""
    for _, target, global_root in _stores(ctx):
        if global_root:
            yield v("monkeypatch", target, f"'{ast.unparse(target)}' modifies a module or module-level object")


# Rationale: outside a kernel, setting attributes (x.data = ..., t.grad = ...) swaps
# tensor storage or mutates inputs behind the parity check's back.
@rule("attribute-assignment")
def _check_attribute_assignment(ctx: Context) -> Iterator[Violation]:
    """No attribute assignment outside @triton.jit functions."""
    for node, target, global_root in _stores(ctx):
        if isinstance(target, ast.Attribute) and not global_root and not ctx.in_kernel(node):
            yield v("attribute-assignment", target, f"assignment to '{ast.unparse(target)}'")


# Rationale: writing tensor elements from the host (y[...] = ...) is torch compute done
# outside a Triton kernel, and on an input it is input mutation.
@rule("host-store")
def _check_host_store(ctx: Context) -> Iterator[Violation]:
    """No item assignment or deletion outside @triton.jit functions."""
    for node, target, global_root in _stores(ctx):
        if isinstance(target, ast.Subscript) and not global_root and not ctx.in_kernel(node):
            yield v("host-store", target, f"item assignment '{ast.unparse(target)}' outside a kernel")


# Rationale: under the CPU interpreter a kernel body runs as plain Python, so an
# attribute or item stored there lands on a real object (a pointer argument, a DSL
# function, a constexpr) that outlives the launch: a call counter that tells the timed
# calls from the checked ones.  The DSL stores memory with tl.store, never this way.
@rule("kernel-store")
def _check_kernel_store(ctx: Context) -> Iterator[Violation]:
    """No attribute or item assignment or deletion inside @triton.jit functions."""
    for node, target, _ in _stores(ctx):
        if ctx.in_kernel(node):
            yield v("kernel-store", target, f"'{ast.unparse(target)}' stores onto an object from a kernel body")


# Rationale: whether two values in a kernel are the same object is a fact about the front
# end running it, not about the kernel.  Triton's compiler, its interpreter and tik-agent's
# interpreter caches (tik_agent/backends/interpreter_speed.py shares shape objects) answer
# ``a.shape is b.shape`` differently, so a kernel could tell the CPU evaluator from a GPU
# and compute other bits on each.  A test against None (an optional pointer) is the only
# identity a kernel needs.
@rule("kernel-identity")
def _check_kernel_identity(ctx: Context) -> Iterator[Violation]:
    """No ``is`` / ``is not`` inside a @triton.jit function, except against None."""
    for node in ctx.nodes:
        if not isinstance(node, ast.Compare) or not ctx.in_kernel(node):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if isinstance(op, (ast.Is, ast.IsNot)) and not any(
                    isinstance(x, ast.Constant) and x.value is None for x in (left, right)):
                yield v("kernel-identity", node,
                        f"'{ast.unparse(node)}': object identity inside a kernel is not allowed (only 'is None')")
