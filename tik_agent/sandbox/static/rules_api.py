"""Rules over what a kernel file imports and which library APIs and namespaces it names."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tik_agent.sandbox.static import policy
from tik_agent.sandbox.static.context import Context, decorator_path, store_targets
from tik_agent.sandbox.static.registry import Violation, rule, v


# Rationale: a kernel needs torch (allocation), triton and the DSL, and at most math and
# typing.  Every other module (os, sys, subprocess, socket, threading, ctypes, numpy,
# time, functools ...) reaches files, processes, the network, timers or caches.
@rule("import")
def _check_imports(ctx: Context) -> Iterator[Violation]:
    """Imports come only from torch, triton, triton.language.*, math, typing, enum, __future__."""
    for node in ctx.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not policy.module_allowed(alias.name):
                    yield v("import", node, f"import of '{alias.name}' is not allowed")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or not policy.module_allowed(module):
                yield v("import", node, f"import from '{'.' * node.level}{module}' is not allowed")
                continue
            for alias in node.names:
                path = f"{module}.{alias.name}"
                if alias.name == "*":
                    yield v("import", node, f"'from {module} import *' hides which names are used")
                elif path == "triton.autotune":
                    continue  # reported by the autotune rule
                elif not policy.api_prefix_allowed(path):
                    yield v("import", node, f"'{path}' is not an allowed API")


# Rationale: a module or namespace object (torch, tl, tl.math, tl.extra.libdevice ...)
# held in a variable, a default, a container or a return value is an alias the other
# rules cannot resolve, and through tl.<namespace> it reaches Python builtins, then ctypes
# and libc.  Namespaces may therefore be named only where they are imported and used
# directly (tl.math.exp(x)); and an imported name is never bound to anything else.
@rule("namespace-value")
def _check_namespace_values(ctx: Context) -> Iterator[Violation]:
    """Modules and DSL namespaces are only used in place (tl.math.exp), never bound, passed or returned."""
    for node in ctx.chains:
        path = ctx.resolve(node)
        if path is not None and policy.is_namespace(path):
            yield v("namespace-value", node, f"'{ast.unparse(node)}' is the module '{path}' used as a value")
    for node in ctx.nodes:
        names: list[tuple[ast.AST, str]] = []
        for target in store_targets(node):
            if isinstance(target, ast.Name):
                names.append((target, target.id))
        if isinstance(node, ast.arg):
            names.append((node, node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append((node, node.name))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.append((node, node.name))
        for where, name in names:
            if name in ctx.aliases:
                yield v("namespace-value", where, f"rebinding imported name '{name}'")


# Rationale: the result must come from a Triton kernel, so torch is for allocation and
# metadata only.  torch.ops, torch.nn, torch.library, torch._C and friends compute or
# register ops; streams, events, graphs and synchronize move work out of the timer's
# sight; torch.backends, torch.set_* and torch.manual_seed change global settings.
@rule("torch-api")
def _check_torch_api(ctx: Context) -> Iterator[Violation]:
    """Only allocation, dtype and device-query parts of torch."""
    yield from _check_api(ctx, ("torch",), "torch-api")
    for node in ctx.nodes:
        # torch.Tensor(...) and torch.dtype(...) are legacy constructors (torch.Tensor(storage)
        # wraps any storage): the classes are for isinstance() and annotations only.
        if isinstance(node, ast.Call) and ctx.resolve(node.func) in ("torch.Tensor", "torch.dtype"):
            yield v("torch-api", node, f"'{ast.unparse(node.func)}(...)' constructs a tensor; use torch.empty")


# Rationale: triton.testing (do_bench), triton.runtime, triton.knobs and triton.compiler
# reach the timer, the cache and the compiler, and tl.core.builtins reaches open and
# eval; a kernel file needs only jit, cdiv, next_power_of_2, heuristics, Config,
# constexpr and the DSL namespaces of triton.language.
@rule("triton-api")
def _check_triton_api(ctx: Context) -> Iterator[Violation]:
    """Only triton.jit/cdiv/next_power_of_2/heuristics/Config/constexpr and the triton.language DSL."""
    yield from _check_api(ctx, ("triton",), "triton-api")


# Rationale: typing and enum import sys, functools and more (typing.sys.modules reaches
# every loaded module), so only the annotation and enum names a kernel file uses pass.
@rule("stdlib-api")
def _check_stdlib_api(ctx: Context) -> Iterator[Violation]:
    """Only pure math functions, common typing names and enum.Enum/IntEnum/auto."""
    yield from _check_api(ctx, ("math", "typing", "enum", "__future__"), "stdlib-api")


def _check_api(ctx: Context, roots: tuple[str, ...], rule_name: str) -> Iterator[Violation]:
    for node in ctx.chains:
        path = ctx.resolve(node)
        if path is None or path.split(".")[0] not in roots or path.startswith("triton.autotune"):
            continue
        if not policy.api_allowed(path):
            yield v(rule_name, node, f"'{path}' is not an allowed API")


# Rationale: autotune picks a config by timing, so which kernel runs (and therefore which
# bits come out) depends on timing noise, and the benchmark loop itself runs inside it.
@rule("autotune")
def _check_autotune(ctx: Context) -> Iterator[Violation]:
    """No triton.autotune."""
    message = "triton.autotune selects configs by timing; pin the config"
    for node in ctx.chains:
        if (ctx.resolve(node) or "").startswith("triton.autotune"):
            yield v("autotune", node, message)
    for node in ctx.nodes:
        if isinstance(node, ast.ImportFrom) and node.module == "triton":
            if any(alias.name == "autotune" for alias in node.names):
                yield v("autotune", node, message)


# Rationale: a decorator wraps the launcher in code of the candidate's choosing; caching
# ones (functools.lru_cache and home-made equivalents) replay results.  Kernels need only
# triton.jit and triton.heuristics.
@rule("decorator")
def _check_decorators(ctx: Context) -> Iterator[Violation]:
    """Only @triton.jit and @triton.heuristics(...) decorate functions."""
    allowed = {"triton.jit", "triton.heuristics", "triton.autotune"}  # autotune: its own rule
    for node in ctx.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if decorator_path(ctx.aliases, decorator) not in allowed:
                    yield v("decorator", decorator, f"decorator '{ast.unparse(decorator)}' is not allowed")


# Rationale: printing (print, tl.device_print, tl.static_print) is a stdout side effect
# that slows kernels, floods logs and can leak data; kernels return results, not text.
@rule("print")
def _check_print(ctx: Context) -> Iterator[Violation]:
    """No print, tl.device_print or tl.static_print."""
    printers = {"triton.language.device_print", "triton.language.static_print"}
    for node in ctx.nodes:
        if isinstance(node, ast.Name) and node.id == "print":
            yield v("print", node, "print() is not allowed")
        elif isinstance(node, (ast.Attribute, ast.Name)) and ctx.resolve(node) in printers:
            yield v("print", node, f"'{ctx.resolve(node)}' is not allowed")


# Rationale: the evaluation checks that a Triton kernel did the work; a file without a
# @triton.jit function can only compute with torch or Python.
@rule("missing-jit")
def _check_has_jit(ctx: Context) -> Iterator[Violation]:
    """At least one function is decorated with @triton.jit."""
    if not ctx.jit_functions:
        yield Violation("missing-jit", 1, "no @triton.jit function defined")
