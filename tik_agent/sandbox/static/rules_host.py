"""Rules over what host code and kernel bodies may do with the values they hold."""

from __future__ import annotations

import ast
import string
from collections.abc import Iterator

from tik_agent.sandbox.static import policy
from tik_agent.sandbox.static.context import Context
from tik_agent.sandbox.static.infer import plain
from tik_agent.sandbox.static.kinds import DEVICE, DTYPE, FUNC, INFO, KERNEL, META, NONE, SIZE, STR, TENSOR_LIKE
from tik_agent.sandbox.static.registry import Violation, rule, v


# Rationale: these builtins read or write files (open), run arbitrary code (eval, exec,
# compile, __import__), reach other namespaces (globals, vars, getattr, object) or wait
# for a person (input, breakpoint, help).  Beyond those, only the builtins a launcher
# uses are allowed (numbers, len, range, tuple, isinstance, exceptions ...): id, iter,
# map, hasattr and the rest are not needed, and each is a way around the type rules.
@rule("forbidden-builtin")
def _check_builtins(ctx: Context) -> Iterator[Violation]:
    """No open/eval/exec/getattr/globals/..., no builtin outside a short list, no 3-argument type()."""
    free = _FreeNames(ctx)
    for node in ctx.nodes:
        if isinstance(node, ast.Name) and node.id in policy.FORBIDDEN_BUILTINS:
            yield v("forbidden-builtin", node, f"use of '{node.id}' is not allowed")
        elif (
            isinstance(node, ast.Name)
            and node.id in policy.ALL_BUILTINS
            and node.id not in policy.ALLOWED_BUILTINS
            and free.is_free(node)
        ):
            yield v("forbidden-builtin", node, f"builtin '{node.id}' is not on the list a kernel file may use")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "type"
            and len(node.args) + len(node.keywords) != 1
        ):
            yield v("forbidden-builtin", node, "type() may only inspect a value, not create a class")


class _FreeNames:
    """Whether a name read is bound by the file where it is read, or falls through to builtins."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.module_level = set(ctx.aliases) | set(ctx.module_names)
        self.kernel_locals = {id(fn): _bound_in(fn) for fn in ctx.jit_functions}
        self.kernel_of = {id(n): fn for fn in ctx.jit_functions for n in ast.walk(fn) if ctx.in_kernel(n)}

    def is_free(self, node: ast.Name) -> bool:
        fn = self.kernel_of.get(id(node))
        if fn is not None:  # kernel code: the type inference does not cover it
            return node.id not in self.kernel_locals[id(fn)] | self.module_level
        return node.id not in self.ctx.aliases and self.ctx.types.lookup(node) is None


def _bound_in(fn: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
    return names


# Rationale: every name must be bound by the file itself (an import, an assignment, a
# parameter, a def) or be a listed builtin.  Under the CPU interpreter, the first launch
# copies the interpreter's own globals into the candidate's module (np, inspect, time,
# the C extension): a free name such as inspect or time reaches frames and timers.
@rule("unbound-name")
def _check_unbound_names(ctx: Context) -> Iterator[Violation]:
    """Every name read is bound in its scope by the file, or is a builtin."""
    free = _FreeNames(ctx)
    for node in ctx.nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in policy.ALL_BUILTINS:
            if free.is_free(node):
                yield v("unbound-name", node, f"name '{node.id}' is not bound in this file")


# Rationale: dunder names and attributes (__class__, __subclasses__, __globals__,
# __builtins__, __dict__, __code__, module __getattr__ ...) are the classic way out of
# any Python restriction.  Format strings can reach them too ("{0.__globals__}").
@rule("dunder")
def _check_dunders(ctx: Context) -> Iterator[Violation]:
    """No dunder names, attributes, parameters or strings (the __future__ import is fine)."""
    for node in ctx.nodes:
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [n for n in (node.name, node.asname) if n]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = policy.DUNDER.findall(node.value)
        for name in names:
            if policy.DUNDER.fullmatch(name):
                yield v("dunder", node, f"dunder '{name}' is not allowed")


# Rationale: frame, code and traceback attributes lead from any generator or exception
# to the harness's frames and globals (its reference outputs, its imported os module),
# and format-string fields such as "{0.attr}" or "{0[key]}" do the same inside a string.
@rule("introspection")
def _check_introspection(ctx: Context) -> Iterator[Violation]:
    """No frame/code/traceback attributes and no attribute or item access in format fields."""
    formatter = string.Formatter()
    for node in ctx.nodes:
        if isinstance(node, ast.Attribute) and node.attr in policy.INTROSPECTION_ATTRS:
            yield v("introspection", node, f"attribute '{node.attr}' reaches frames or code objects")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" in node.value:
            try:
                fields = [f for _, f, _, _ in formatter.parse(node.value) if f]
            except ValueError:
                continue
            for field in fields:
                if "." in field or "[" in field:
                    yield v("introspection", node, f"format field '{{{field}}}' reads attributes or items")


# Rationale: outside a kernel the answer must not be computed with torch.  Tensor
# methods that compute (x.sum(), .to(), .type_as()), '@' and out= are the obvious
# forms; every operator (* / + - ** % // comparisons, not, truth tests, f-string
# formatting, indexing with a tensor) and the numeric builtins (sum, max, abs, int ...)
# are the others.  They are allowed only on values the type inference proves plain
# (Python numbers, shapes, dtypes, devices); an unknown value counts as a tensor.
@rule("host-compute")
def _check_host_compute(ctx: Context) -> Iterator[Violation]:
    """No tensor compute outside @triton.jit functions: methods, operators, truth tests or builtins on tensors."""
    types = ctx.types
    for node in ctx.host_nodes():
        if isinstance(node, ast.Call):
            if any(k.arg == "out" for k in node.keywords):
                yield v("host-compute", node, "out= writes a result outside a Triton kernel")
            yield from _plain_arguments(ctx, node)
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            yield v("host-compute", node, "'@' multiplies matrices outside a Triton kernel")
            continue
        operands: list[ast.expr] = []
        if isinstance(node, ast.BinOp):
            operands = [node.left, node.right]
        elif isinstance(node, ast.AugAssign):
            operands = [node.target, node.value]
        elif isinstance(node, ast.UnaryOp):
            operands = [node.operand]
        elif isinstance(node, ast.Compare) and not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            operands = [node.left, *node.comparators]
        elif isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            operands = [node.test]
        elif isinstance(node, ast.BoolOp):
            operands = list(node.values)
        elif isinstance(node, ast.comprehension):
            operands = list(node.ifs)
        elif isinstance(node, ast.FormattedValue):
            operands = [node.value]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if types.of(node.value) & TENSOR_LIKE and types.of(node.value) != {KERNEL}:
                operands = _index_leaves(node.slice)
        for operand in operands:
            if not plain(types.of(operand)):
                yield v("host-compute", node, f"'{_short(node)}' computes on a tensor (or a value not shown to be "
                        "a Python number) outside a Triton kernel")
                break


def _plain_arguments(ctx: Context, call: ast.Call) -> Iterator[Violation]:
    """Arguments of numeric builtins, shape and str methods, triton.cdiv/next_power_of_2 and math.* must be plain."""
    func = call.func
    path = ctx.resolve(func) or ""
    numeric = path in ("triton.cdiv", "triton.next_power_of_2") or path.startswith("math.")
    if isinstance(func, ast.Attribute) and path == "":
        # Methods of shapes and strings compare or format their arguments:
        # x.shape.index(t) and '{}'.format(t) compute on a tensor.
        numeric = bool(ctx.types.of(func.value) & {SIZE, STR})
    if isinstance(func, ast.Name) and func.id in policy.NUMERIC_BUILTINS and ctx.types.lookup(func) is None:
        numeric = numeric or func.id not in ctx.aliases
    if not numeric:
        return
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        value = arg.value if isinstance(arg, ast.Starred) else arg
        if not plain(ctx.types.of(value)):
            yield v("host-compute", call, f"'{_short(call)}' takes a tensor (or a value not shown to be a "
                    "Python number) outside a Triton kernel")
            return


def _index_leaves(index: ast.expr) -> list[ast.expr]:
    if isinstance(index, ast.Slice):
        return [e for e in (index.lower, index.upper, index.step) if e is not None]
    if isinstance(index, ast.Tuple):
        return [leaf for e in index.elts for leaf in _index_leaves(e)]
    return [index]


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# What host code may read from a value of each inferred type; plain attributes
# (x.shape) and methods (x.stride(0)) separately, so a bound method is not a value.
_PLAIN_ATTRS = {DEVICE: set(policy.DEVICE_ATTRS), DTYPE: set(policy.DTYPE_ATTRS), INFO: set(policy.INFO_ATTRS)}
_METHODS = {SIZE: policy.SIZE_METHODS, STR: policy.STR_METHODS, META: frozenset({"get"})}
_TENSOR_METHODS = set(policy.TENSOR_METADATA_METHODS) | policy.TENSOR_VIEW_METHODS


def _attribute_allowed(receiver: str, attr: str, called: bool) -> bool:
    if receiver in TENSOR_LIKE:
        return attr in _TENSOR_METHODS if called else attr in policy.TENSOR_ATTRS
    if called:
        return attr in _METHODS.get(receiver, ())
    return attr in _PLAIN_ATTRS.get(receiver, ())


# Rationale: a launcher reads metadata (shape, stride(), dtype, device, numel()), takes
# views (view, reshape, transpose, contiguous ...) and allocates (new_empty); every
# other attribute of a tensor or other value is refused, because the list of escapes is
# open-ended: untyped_storage().from_file() and new(storage) open files in C++, .data
# and .grad swap storage, data_ptr() is a cache key, type_as and friends compute.
@rule("unlisted-attribute")
def _check_value_attributes(ctx: Context) -> Iterator[Violation]:
    """Host code reads only listed metadata, view and allocation attributes of its values."""
    kernels = {fn.name for fn in ctx.jit_functions}
    for node in ctx.host_nodes():
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        if ctx.resolve(node) is not None or (isinstance(node.value, ast.Name) and node.value.id in kernels):
            continue  # module paths: the API rules; kernels: kernel-attribute
        parent = ctx.parent(node)
        called = isinstance(parent, ast.Call) and parent.func is node
        # None has no attributes to abuse (reading one raises): out=None, then a tensor.
        receivers = ctx.types.of(node.value) - {NONE} or ctx.types.of(node.value)
        if all(_attribute_allowed(r, node.attr, called) for r in receivers):
            continue
        compute = node.attr in policy.HOST_COMPUTE_METHODS or node.attr.endswith("_")
        rule_name = "host-compute" if compute and receivers & TENSOR_LIKE else "unlisted-attribute"
        kind = "method" if called else "attribute"
        what = "/".join(sorted(receivers))
        yield v(rule_name, node, f"{kind} '.{node.attr}' of a {what} value is not allowed outside a Triton kernel")


# Rationale: a kernel body is DSL code, and under the interpreter it runs as host Python
# while the host-ops mode stands aside for the launch: torch, and the file's plain Python
# functions, have no business there.
@rule("kernel-scope")
def _check_kernel_scope(ctx: Context) -> Iterator[Violation]:
    """Kernel bodies name only the DSL, other kernels, module constants and their own locals."""
    kernels = {fn.name for fn in ctx.jit_functions}
    helpers = {
        s.name for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name not in kernels
    }
    for node in ctx.nodes:
        if not ctx.in_kernel(node) or not isinstance(node, (ast.Name, ast.Attribute)):
            continue
        path = ctx.resolve(node) if isinstance(node, ast.Name) else None
        if path is not None and path.split(".")[0] == "torch":
            yield v("kernel-scope", node, f"'{node.id}' (torch) used inside a @triton.jit function")
        elif isinstance(node, ast.Name) and node.id in helpers:
            yield v("kernel-scope", node, f"host function '{node.id}' called from a @triton.jit function")


# Rationale: under the interpreter a DSL value's .handle is a numpy array, which reaches
# numpy, ctypes and files (arr.ctypes, arr.tofile): kernel code reads only the members
# the DSL documents (to, dtype, shape, element_ty, the tensor methods ...).
@rule("dsl-attribute")
def _check_dsl_attributes(ctx: Context) -> Iterator[Violation]:
    """Inside @triton.jit functions, attributes of values are limited to the DSL's tensor and dtype members."""
    for node in ctx.nodes:
        if ctx.in_kernel(node) and isinstance(node, ast.Attribute) and ctx.resolve(node) is None:
            if node.attr not in policy.DSL_VALUE_ATTRS:
                yield v("dsl-attribute", node, f"'.{node.attr}' is not a DSL member a kernel may use")


# Rationale: under the interpreter a constexpr parameter receives the launch's argument
# as it is: a tensor passed as a constexpr arrives in the kernel body as a torch tensor,
# where its methods (sum, exp, sort, item ...) compute in torch while the host-ops mode
# stands aside for the launch; a host function or lambda passed to a kernel runs there
# too.  Constexprs take plain values (numbers, dtypes) or other @triton.jit functions.
@rule("launch-argument")
def _check_launch_arguments(ctx: Context) -> Iterator[Violation]:
    """Launch arguments for constexpr parameters are plain values or kernels; no host functions are passed."""
    kernels = {fn.name: fn for fn in ctx.jit_functions}
    for node in ctx.host_nodes():
        func = node.func if isinstance(node, ast.Call) else None
        if not isinstance(func, ast.Subscript):
            continue
        if not (isinstance(func.value, ast.Name) and func.value.id in kernels):
            if KERNEL in ctx.types.of(func.value):  # an alias: what it launches cannot be read here
                yield v("launch-argument", func.value, f"'{_short(func.value)}[...]' launches a kernel through "
                        "another name: launch each kernel by its own name")
            continue
        params = kernels[func.value.id].args.args
        constexprs = ctx.constexprs(kernels[func.value.id])
        named = [(params[i].arg if i < len(params) else None, a) for i, a in enumerate(node.args)]
        named += [(k.arg, k.value) for k in node.keywords]
        for name, value in named:
            types = ctx.types.of(value.value if isinstance(value, ast.Starred) else value)
            if FUNC in types or isinstance(value, ast.Lambda):
                yield v("launch-argument", value, f"'{_short(value)}' passes a host function to a kernel")
            elif name in constexprs and not (plain(types) or types == {KERNEL}):
                yield v("launch-argument", value, f"constexpr '{name}' gets '{_short(value)}', which is not shown to "
                        "be a plain value (a tensor arrives in the kernel body as a torch tensor)")
