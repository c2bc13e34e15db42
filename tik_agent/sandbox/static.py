"""Static AST rules over an untrusted candidate kernel file.

A candidate is a small Python module: imports of torch and triton, module-level
constants, one or more ``@triton.jit`` kernels and a launcher that allocates outputs
and launches a kernel.  Anything beyond that has no business in a kernel file, so the
rules below are allowlists where they can be and denylists only where an allowlist
would reject legitimate launcher code.

These rules are the first of several walls (the worker process also runs with a
scrubbed environment, resource limits and an audit hook), so they aim to be strict
and readable rather than clever.  Every rule states its reason in a ``Rationale:``
comment next to it.

Usage::

    violations = check_source(path.read_text(), filename=str(path))
    if violations: ...  # reject the candidate; each Violation names rule and line
"""

from __future__ import annotations

import ast
import logging
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from tik_agent import pyparse

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Violation:
    """One broken rule: its name, the 1-based source line and a human message."""

    rule: str
    line: int
    message: str


# --------------------------------------------------------------------------- policy

# Modules a candidate may import (plus the DSL namespaces of triton.language, below).
_ALLOWED_MODULES = frozenset({"torch", "triton", "triton.language", "math", "typing", "enum", "__future__"})

_TRITON_API = frozenset(
    f"triton.{name}" for name in ("jit", "cdiv", "next_power_of_2", "heuristics", "language", "Config", "constexpr")
)

# typing and enum import sys, functools and friends, so only the names a kernel file
# uses are allowed; math holds only pure functions and constants.
_STDLIB_API = frozenset(
    [f"typing.{name}" for name in ("Any", "Optional", "Union", "Tuple", "List", "Dict", "Sequence", "Callable")]
    + ["enum.Enum", "enum.IntEnum", "enum.auto", "__future__.annotations"]
)

# triton.language is allowed as a whole, except what its modules import: builtins,
# inspect, knobs, the C extension, importlib machinery, the runtime driver.  A chain may
# only walk through DSL namespaces and may not end on one of those internals
# (tl.core.builtins.open, tl.extra.module_finder, tl.target_info.driver ...).
_DSL = "triton.language"
_DSL_NAMESPACES = frozenset(
    {"extra", "cuda", "hip", "libdevice", "math", "standard", "random", "utils", "gdc", "target_info"}
)
_DSL_INTERNALS = frozenset(
    {
        "core", "semantic", "tl", "builtins", "inspect", "ir", "knobs", "typing", "pkgutil", "os", "sys",
        "module", "modules", "module_finder", "module_from_spec", "module_name", "spec", "driver", "wraps",
        # Under the CPU interpreter, running a kernel injects the interpreter's own
        # globals into the DSL modules (tl.standard.interpreter_builder, numpy helpers).
        "interpreter_builder", "np_erf_fp32", "np_erf_fp64", "np_umulhi_u64", "partial", "dataclass",
        "annotations", "is_pkg", "np", "numpy", "time", "textwrap", "dataclasses", "triton", "ast",
        "functools", "jit",
    }
)  # fmt: skip

_TORCH_DTYPES = (
    "float16", "bfloat16", "float32", "float64", "half", "float", "double",
    "int8", "int16", "int32", "int64", "uint8", "int", "long", "short", "bool",
    "float8_e4m3fn", "float8_e5m2",
)  # fmt: skip
_TORCH_API = frozenset(
    f"torch.{name}"
    for name in (
        *_TORCH_DTYPES,
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like",
        "dtype", "Tensor", "Size", "device", "finfo", "iinfo", "is_tensor",
        "cuda.current_device", "cuda.get_device_properties", "cuda.is_available", "cuda.device",
    )
)  # fmt: skip

_FORBIDDEN_BUILTINS = frozenset(
    {
        "open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars",
        "getattr", "setattr", "delattr", "breakpoint", "input", "help", "exit", "quit",
        "memoryview", "dir", "object", "super", "classmethod", "staticmethod", "property",
    }
)  # fmt: skip

# Attributes that walk from a generator, coroutine, traceback or function to frames,
# code objects and the globals of whoever called the candidate (the harness).
_INTROSPECTION_ATTRS = frozenset(
    {
        "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
        "tb_frame", "tb_next", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
        "co_code", "co_consts", "func_globals",
    }
)  # fmt: skip

# Tensor methods that compute (or copy, convert, synchronise) on the host side.
_HOST_COMPUTE_METHODS = frozenset(
    {
        "sum", "mean", "exp", "log", "log_softmax", "softmax", "matmul", "mm", "bmm", "addmm",
        "einsum", "norm", "pow", "sqrt", "rsqrt", "mul", "add", "sub", "div", "square", "gather",
        "scatter", "index_select", "max", "min", "amax", "amin", "logsumexp", "cumsum", "clone",
        "float", "half", "bfloat16", "double", "to", "type", "cpu", "cuda", "numpy", "tolist",
        "item", "record_stream", "backward", "register_hook", "pin_memory", "masked_fill",
        "where", "abs", "neg", "var", "std", "prod", "argmax", "argmin", "sort", "topk",
    }
)  # fmt: skip

_DUNDER = re.compile(r"__[A-Za-z]\w*__")


# --------------------------------------------------------------------------- context


@dataclass
class _Context:
    """What the rules share: the tree, import aliases and which nodes are kernel code."""

    tree: ast.Module
    aliases: dict[str, str]  # local name -> dotted module path it was imported as
    module_names: frozenset[str]  # names bound at module level (functions, constants)
    jit_functions: list[ast.FunctionDef]
    kernel_nodes: frozenset[int]  # id() of every node inside a @triton.jit body

    def in_kernel(self, node: ast.AST) -> bool:
        return id(node) in self.kernel_nodes

    def resolve(self, node: ast.AST) -> str | None:
        return _resolve(self.aliases, node)


def _resolve(aliases: dict[str, str], node: ast.AST) -> str | None:
    """Dotted path of a ``tl.load`` / ``torch.cuda.x`` style chain rooted at an import."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def _decorator_path(aliases: dict[str, str], decorator: ast.expr) -> str | None:
    return _resolve(aliases, decorator.func if isinstance(decorator, ast.Call) else decorator)


def _build_context(tree: ast.Module) -> _Context:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    module_names = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module_names.add(stmt.name)
        for target in _assignment_targets(stmt):
            module_names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    jit_functions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(_decorator_path(aliases, d) == "triton.jit" for d in node.decorator_list)
    ]
    kernel_nodes = {
        id(inner) for fn in jit_functions for part in (*fn.body, fn.args) for inner in ast.walk(part)
    }
    return _Context(tree, aliases, frozenset(module_names), jit_functions, frozenset(kernel_nodes))


def _assignment_targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def _flatten_targets(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from _flatten_targets(list(target.elts))
        elif isinstance(target, ast.Starred):
            yield from _flatten_targets([target.value])
        else:
            yield target


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _outermost_chains(tree: ast.AST) -> Iterator[ast.expr]:
    """Every Name/Attribute chain that is not itself the ``value`` of a longer chain."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
            yield node


def _api_allowed(path: str) -> bool:
    """Whether a dotted path (``torch.empty``, ``tl.extra.libdevice.rsqrt``) may be used."""
    if path in _TORCH_API or path in _TRITON_API or path in _STDLIB_API or path == _DSL:
        return True
    if path.startswith("math."):
        return path.count(".") == 1
    if path.startswith(_DSL + "."):
        *namespaces, name = path[len(_DSL) + 1 :].split(".")
        return (
            all(n in _DSL_NAMESPACES for n in namespaces)
            and name not in _DSL_INTERNALS
            and not name.startswith("_")
            # Inside a DSL sub-module, capitalised names are the classes it imports
            # (typing aliases, and the interpreter's GridExecutor, InterpreterBuilder ...).
            and not (namespaces and name[:1].isupper())
        )
    return False


def _api_prefix_allowed(path: str) -> bool:
    """True if ``path`` is allowed or leads to something allowed (``from torch import cuda``)."""
    return _api_allowed(path) or any(entry.startswith(path + ".") for entry in _TORCH_API | _TRITON_API)


# --------------------------------------------------------------------------- registry

Check = Callable[[_Context], Iterator[Violation]]


@dataclass(frozen=True)
class Rule:
    """A named check; its rationale lives in the comment next to its definition."""

    name: str
    summary: str
    check: Check


RULES: dict[str, Rule] = {}


def _rule(name: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        summary = (check.__doc__ or "").strip().splitlines()[0]
        RULES[name] = Rule(name, summary, check)
        return check

    return register


def _v(rule: str, node: ast.AST, message: str) -> Violation:
    return Violation(rule, getattr(node, "lineno", 0), message)


# --------------------------------------------------------------------------- rules


# Rationale: a kernel needs torch (allocation), triton and the DSL, and at most math and
# typing.  Every other module (os, sys, subprocess, socket, threading, ctypes, numpy,
# time, functools ...) reaches files, processes, the network, timers or caches.
@_rule("import")
def _check_imports(ctx: _Context) -> Iterator[Violation]:
    """Imports come only from torch, triton, triton.language.*, math, typing, enum, __future__."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _module_allowed(alias.name):
                    yield _v("import", node, f"import of '{alias.name}' is not allowed")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or not _module_allowed(module):
                yield _v("import", node, f"import from '{'.' * node.level}{module}' is not allowed")
                continue
            for alias in node.names:
                path = f"{module}.{alias.name}"
                if alias.name == "*":
                    yield _v("import", node, f"'from {module} import *' hides which names are used")
                elif path == "triton.autotune":
                    continue  # reported by the autotune rule
                elif not _api_prefix_allowed(path):
                    yield _v("import", node, f"'{path}' is not an allowed API")


def _module_allowed(module: str) -> bool:
    return module in _ALLOWED_MODULES or (module.startswith(_DSL + ".") and _api_allowed(module))


# Rationale: these builtins read or write files (open), run arbitrary code (eval, exec,
# compile, __import__), reach other namespaces (globals, vars, getattr, object) or wait
# for a person (input, breakpoint, help).  A kernel launcher needs none of them.
@_rule("forbidden-builtin")
def _check_builtins(ctx: _Context) -> Iterator[Violation]:
    """No open/eval/exec/compile/__import__/getattr/globals/... and no 3-argument type()."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Name) and node.id in _FORBIDDEN_BUILTINS:
            yield _v("forbidden-builtin", node, f"use of '{node.id}' is not allowed")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "type"
            and len(node.args) + len(node.keywords) != 1
        ):
            yield _v("forbidden-builtin", node, "type() may only inspect a value, not create a class")


# Rationale: dunder names and attributes (__class__, __subclasses__, __globals__,
# __builtins__, __dict__, __code__, module __getattr__ ...) are the classic way out of
# any Python restriction.  Format strings can reach them too ("{0.__globals__}").
@_rule("dunder")
def _check_dunders(ctx: _Context) -> Iterator[Violation]:
    """No dunder names, attributes, parameters or strings (the __future__ import is fine)."""
    for node in ast.walk(ctx.tree):
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
            names = _DUNDER.findall(node.value)
        for name in names:
            if _DUNDER.fullmatch(name):
                yield _v("dunder", node, f"dunder '{name}' is not allowed")


# Rationale: frame, code and traceback attributes lead from any generator or exception
# to the harness's frames and globals (its reference outputs, its imported os module),
# and format-string fields such as "{0.attr}" or "{0[key]}" do the same inside a string.
@_rule("introspection")
def _check_introspection(ctx: _Context) -> Iterator[Violation]:
    """No frame/code/traceback attributes and no attribute or item access in format fields."""
    formatter = string.Formatter()
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Attribute) and node.attr in _INTROSPECTION_ATTRS:
            yield _v("introspection", node, f"attribute '{node.attr}' reaches frames or code objects")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" in node.value:
            try:
                fields = [f for _, f, _, _ in formatter.parse(node.value) if f]
            except ValueError:
                continue
            for field in fields:
                if "." in field or "[" in field:
                    yield _v("introspection", node, f"format field '{{{field}}}' reads attributes or items")


# Rationale: a kernel module holds imports, constants and functions.  Statements that run
# at import time (calls, loops, if/try blocks) can set up caches, patch the harness or
# start work the timer never sees.
@_rule("module-level")
def _check_module_statements(ctx: _Context) -> Iterator[Violation]:
    """Module level holds only a docstring, imports, constant assignments and functions."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign, ast.AnnAssign, ast.ClassDef)
    for index, stmt in enumerate(ctx.tree.body):
        is_docstring = index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if not (is_docstring or isinstance(stmt, allowed)):
            yield _v("module-level", stmt, f"{type(stmt).__name__} statement at module level is not allowed")


# Rationale: module-level lists, dicts, objects or call results are state that survives
# between calls: a cache keyed on shapes or pointers replays old results instead of
# computing.  Constants (numbers, strings, dtypes, tl.constexpr) are all a kernel needs.
@_rule("module-state")
def _check_module_state(ctx: _Context) -> Iterator[Violation]:
    """Module-level assignments bind constants only, to plain names."""
    constants: set[str] = set()
    for stmt in ctx.tree.body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        targets = list(_flatten_targets(_assignment_targets(stmt)))
        if stmt.value is not None and not _is_constant(ctx, stmt.value, constants):
            yield _v("module-state", stmt, "module-level value must be a constant")
        for target in targets:
            if isinstance(target, ast.Name):
                if target.id in ctx.aliases:
                    yield _v("module-state", stmt, f"rebinding imported name '{target.id}'")
                constants.add(target.id)
            elif not isinstance(target, (ast.Attribute, ast.Subscript)):  # those: monkeypatch
                yield _v("module-state", stmt, "module-level assignment target must be a name")


_CONSTANT_CALLS = frozenset({"int", "float", "bool", "triton.constexpr", "triton.language.constexpr"})


def _is_constant(ctx: _Context, node: ast.expr, constants: set[str]) -> bool:
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
        return path.startswith(("torch.", "math.", _DSL + ".")) and _api_allowed(path)
    if isinstance(node, ast.Call) and not node.keywords:
        callee = (node.func.id if isinstance(node.func, ast.Name) else ctx.resolve(node.func)) or ""
        pure = callee in _CONSTANT_CALLS or callee.startswith("math.")
        return pure and all(_is_constant(ctx, a, constants) for a in node.args)
    return False


# Rationale: global and nonlocal let a function rebind module or closure state, which
# is how results get cached between calls (keyed on shapes, pointers or call counts).
@_rule("global")
def _check_global(ctx: _Context) -> Iterator[Violation]:
    """No global or nonlocal statements."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            yield _v("global", node, f"'{type(node).__name__.lower()}' statement is not allowed")


# Rationale: a mutable default argument (list, dict, set, call result) is created once
# and shared by every call, i.e. hidden module state usable as a cache.
@_rule("mutable-default")
def _check_defaults(ctx: _Context) -> Iterator[Violation]:
    """Default arguments are constants, names or attributes, never containers or calls."""
    mutable = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Call)
    for node in ast.walk(ctx.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                if isinstance(default, mutable):
                    yield _v("mutable-default", default, "mutable default argument is shared between calls")


# Rationale: classes carry state between calls and give access to descriptors and
# metaclass hooks; a kernel file is functions and constants.
@_rule("class")
def _check_classes(ctx: _Context) -> Iterator[Violation]:
    """No class definitions."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.ClassDef):
            yield _v("class", node, f"class '{node.name}' is not allowed")


# Rationale: async code schedules work the timer and the parity check may never see.
@_rule("async")
def _check_async(ctx: _Context) -> Iterator[Violation]:
    """No async functions, await, async for or async with."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            yield _v("async", node, "async code is not allowed")


# Rationale: a decorator wraps the launcher in code of the candidate's choosing; caching
# ones (functools.lru_cache and home-made equivalents) replay results.  Kernels need only
# triton.jit and triton.heuristics.
@_rule("decorator")
def _check_decorators(ctx: _Context) -> Iterator[Violation]:
    """Only @triton.jit and @triton.heuristics(...) decorate functions."""
    allowed = {"triton.jit", "triton.heuristics", "triton.autotune"}  # autotune: its own rule
    for node in ast.walk(ctx.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if _decorator_path(ctx.aliases, decorator) not in allowed:
                    yield _v("decorator", decorator, f"decorator '{ast.unparse(decorator)}' is not allowed")


# Rationale: autotune picks a config by timing, so which kernel runs (and therefore which
# bits come out) depends on timing noise, and the benchmark loop itself runs inside it.
@_rule("autotune")
def _check_autotune(ctx: _Context) -> Iterator[Violation]:
    """No triton.autotune."""
    message = "triton.autotune selects configs by timing; pin the config"
    for node in _outermost_chains(ctx.tree):
        if (ctx.resolve(node) or "").startswith("triton.autotune"):
            yield _v("autotune", node, message)
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.ImportFrom) and node.module == "triton":
            if any(alias.name == "autotune" for alias in node.names):
                yield _v("autotune", node, message)


# Rationale: a @triton.jit object's attributes (cache, run, fn, device_caches, warmup)
# hold compiled kernels and the raw Python function; reaching them lets a candidate
# replay cached results or swap what the launch runs.  Launching is kernel[grid](...).
@_rule("kernel-attribute")
def _check_kernel_attribute(ctx: _Context) -> Iterator[Violation]:
    """Kernels are only launched (kernel[grid](...)), never inspected or changed."""
    kernels = {fn.name for fn in ctx.jit_functions}
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in kernels:
            yield _v("kernel-attribute", node, f"'{ast.unparse(node)}' reaches into a compiled kernel")


def _stores(ctx: _Context) -> Iterator[tuple[ast.AST, ast.expr, bool]]:
    """(statement, attribute-or-item target, target is rooted at a module-level name)."""
    roots = set(ctx.aliases) | set(ctx.module_names)
    for node in ast.walk(ctx.tree):
        for target in _flatten_targets(_assignment_targets(node)):
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                yield node, target, _root_name(target) in roots


# Rationale: assigning to an attribute or item of a module or of a module-level object
# patches the harness (torch.cuda.synchronize, triton.testing.do_bench, a kernel's
# cache) so that timing or comparison lies.
@_rule("monkeypatch")
def _check_monkeypatch(ctx: _Context) -> Iterator[Violation]:
    """No assignment or deletion of attributes or items on imported modules or module-level names."""
    for _, target, global_root in _stores(ctx):
        if global_root:
            yield _v("monkeypatch", target, f"'{ast.unparse(target)}' modifies a module or module-level object")


# Rationale: outside a kernel, setting attributes (x.data = ..., t.grad = ...) swaps
# tensor storage or mutates inputs behind the parity check's back.
@_rule("attribute-assignment")
def _check_attribute_assignment(ctx: _Context) -> Iterator[Violation]:
    """No attribute assignment outside @triton.jit functions."""
    for node, target, global_root in _stores(ctx):
        if isinstance(target, ast.Attribute) and not global_root and not ctx.in_kernel(node):
            yield _v("attribute-assignment", target, f"assignment to '{ast.unparse(target)}'")


# Rationale: writing tensor elements from the host (y[...] = ...) is torch compute done
# outside a Triton kernel, and on an input it is input mutation.
@_rule("host-store")
def _check_host_store(ctx: _Context) -> Iterator[Violation]:
    """No item assignment or deletion outside @triton.jit functions."""
    for node, target, global_root in _stores(ctx):
        if isinstance(target, ast.Subscript) and not global_root and not ctx.in_kernel(node):
            yield _v("host-store", target, f"item assignment '{ast.unparse(target)}' outside a kernel")


# Rationale: the result must come from a Triton kernel, so torch is for allocation and
# metadata only.  torch.ops, torch.nn, torch.library, torch._C and friends compute or
# register ops; streams, events, graphs and synchronize move work out of the timer's
# sight; torch.backends, torch.set_* and torch.manual_seed change global settings.
@_rule("torch-api")
def _check_torch_api(ctx: _Context) -> Iterator[Violation]:
    """Only allocation, dtype and device-query parts of torch."""
    yield from _check_api(ctx, ("torch",), "torch-api")


# Rationale: triton.testing (do_bench), triton.runtime, triton.knobs and triton.compiler
# reach the timer, the cache and the compiler, and tl.core.builtins reaches open and
# eval; a kernel file needs only jit, cdiv, next_power_of_2, heuristics, Config,
# constexpr and the DSL namespaces of triton.language.
@_rule("triton-api")
def _check_triton_api(ctx: _Context) -> Iterator[Violation]:
    """Only triton.jit/cdiv/next_power_of_2/heuristics/Config/constexpr and the triton.language DSL."""
    yield from _check_api(ctx, ("triton",), "triton-api")


# Rationale: typing and enum import sys, functools and more (typing.sys.modules reaches
# every loaded module), so only the annotation and enum names a kernel file uses pass.
@_rule("stdlib-api")
def _check_stdlib_api(ctx: _Context) -> Iterator[Violation]:
    """Only pure math functions, common typing names and enum.Enum/IntEnum/auto."""
    yield from _check_api(ctx, ("math", "typing", "enum", "__future__"), "stdlib-api")


def _check_api(ctx: _Context, roots: tuple[str, ...], rule: str) -> Iterator[Violation]:
    for node in _outermost_chains(ctx.tree):
        path = ctx.resolve(node)
        if path is None or path.split(".")[0] not in roots or path.startswith("triton.autotune"):
            continue
        if not _api_allowed(path):
            yield _v(rule, node, f"'{path}' is not an allowed API")


# Rationale: outside a kernel, tensor math (x.sum(), a @ b, .to(), out=...) computes
# the answer with torch instead of Triton, host syncs (.item(), .cpu()) pull work out
# of the kernel, and in-place methods (anything ending in '_') can mutate inputs.
@_rule("host-compute")
def _check_host_compute(ctx: _Context) -> Iterator[Violation]:
    """No tensor compute methods, in-place methods, '@' or out= outside @triton.jit functions."""
    for node in ast.walk(ctx.tree):
        if ctx.in_kernel(node):
            continue
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and ctx.resolve(node.func) is None:
                method = node.func.attr
                if method in _HOST_COMPUTE_METHODS or method.endswith("_"):
                    yield _v("host-compute", node, f"method '.{method}()' computes outside a Triton kernel")
            if any(k.arg == "out" for k in node.keywords):
                yield _v("host-compute", node, "out= writes a result outside a Triton kernel")
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            yield _v("host-compute", node, "'@' multiplies matrices outside a Triton kernel")


# Rationale: printing (print, tl.device_print, tl.static_print) is a stdout side effect
# that slows kernels, floods logs and can leak data; kernels return results, not text.
@_rule("print")
def _check_print(ctx: _Context) -> Iterator[Violation]:
    """No print, tl.device_print or tl.static_print."""
    printers = {"triton.language.device_print", "triton.language.static_print"}
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Name) and node.id == "print":
            yield _v("print", node, "print() is not allowed")
        elif isinstance(node, (ast.Attribute, ast.Name)) and ctx.resolve(node) in printers:
            yield _v("print", node, f"'{ctx.resolve(node)}' is not allowed")


# Rationale: the evaluation checks that a Triton kernel did the work; a file without a
# @triton.jit function can only compute with torch or Python.
@_rule("missing-jit")
def _check_has_jit(ctx: _Context) -> Iterator[Violation]:
    """At least one function is decorated with @triton.jit."""
    if not ctx.jit_functions:
        yield Violation("missing-jit", 1, "no @triton.jit function defined")


# --------------------------------------------------------------------------- entry point


def check_source(source: str, filename: str = "candidate.py") -> list[Violation]:
    """Run every rule over ``source``; an empty list means the candidate passed.

    A file that does not parse yields exactly one violation with rule ``syntax``.
    Violations are sorted by line, then rule name, without duplicates.
    """
    try:
        tree = pyparse.parse(source, filename=filename)
    except SyntaxError as err:
        return [Violation("syntax", err.lineno or 0, f"{filename}: {err.msg}")]
    except ValueError as err:  # e.g. null bytes in the source
        return [Violation("syntax", 0, f"{filename}: {err}")]
    except (RecursionError, MemoryError):  # how the parser reports nesting too deep
        return [Violation("syntax", 0, f"{filename}: nesting too deep to analyse")]
    ctx = _build_context(tree)
    try:
        found = {violation for rule in RULES.values() for violation in rule.check(ctx)}
    except RecursionError:
        return [Violation("syntax", 0, f"{filename}: nesting too deep to analyse")]
    violations = sorted(found, key=lambda v: (v.line, v.rule, v.message))
    if violations:
        logger.debug("%s: %d static violation(s)", filename, len(violations))
    return violations
