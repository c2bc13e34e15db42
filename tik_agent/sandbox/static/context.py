"""What the rules share: the tree, import aliases, kernels, scopes and inferred types."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tik_agent.sandbox.static.infer import Types

Scope = ast.AST  # the Module, a FunctionDef or a Lambda
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass
class Context:
    tree: ast.Module
    aliases: dict[str, str]  # local name -> dotted module path it was imported as
    module_names: frozenset[str]  # names bound at module level (functions, constants)
    jit_functions: list[ast.FunctionDef]
    kernel_nodes: frozenset[int]  # id() of every node inside a @triton.jit function (body and arguments)
    parents: dict[int, ast.AST]  # id(node) -> its parent node
    entries: frozenset[str] | None = None  # the launchers the harness calls, when the caller knows them
    types: "Types | None" = field(default=None)  # filled in by infer.infer()

    def in_kernel(self, node: ast.AST) -> bool:
        return id(node) in self.kernel_nodes

    def resolve(self, node: ast.AST) -> str | None:
        return resolve(self.aliases, node)

    def constexprs(self, fn: ast.FunctionDef) -> set[str]:
        """The parameters of ``fn`` annotated ``tl.constexpr`` (however triton is imported)."""
        return {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)
                if a.annotation is not None and (self.resolve(a.annotation) or "").endswith("constexpr")}

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def scope_of(self, node: ast.AST) -> Scope:
        """The innermost function (or the module) whose body holds ``node``.

        Default values belong to the scope around the function, not to it.
        """
        child, cursor = node, self.parent(node)
        while cursor is not None:
            if isinstance(cursor, FUNCTIONS) and not _is_default_of(child, cursor):
                return cursor
            child, cursor = cursor, self.parent(cursor)
        return self.tree

    @functools.cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node of the file, walked once (the rules read this list many times)."""
        return list(ast.walk(self.tree))

    @functools.cached_property
    def chains(self) -> list[ast.expr]:
        return list(outermost_chains(self.tree))

    def host_nodes(self) -> list[ast.AST]:
        """Every node outside @triton.jit functions."""
        return self._host_nodes

    @functools.cached_property
    def _host_nodes(self) -> list[ast.AST]:
        return [n for n in self.nodes if not self.in_kernel(n)]


def _is_default_of(child: ast.AST, fn: ast.AST) -> bool:
    if child is getattr(fn, "args", None):
        return False
    args = fn.args
    return any(child is d for d in [*args.defaults, *args.kw_defaults] if d is not None) or (
        not isinstance(fn, ast.Lambda) and any(child is d for d in fn.decorator_list)
    )


def resolve(aliases: dict[str, str], node: ast.AST) -> str | None:
    """Dotted path of a ``tl.load`` / ``torch.cuda.x`` style chain rooted at an import."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def decorator_path(aliases: dict[str, str], decorator: ast.expr) -> str | None:
    return resolve(aliases, decorator.func if isinstance(decorator, ast.Call) else decorator)


def build_context(tree: ast.Module, entry: str | tuple[str, ...] | None = None) -> Context:
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
        for target in assignment_targets(stmt):
            module_names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    jit_functions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(decorator_path(aliases, d) == "triton.jit" for d in node.decorator_list)
    ]
    kernel_nodes = {
        id(inner) for fn in jit_functions for part in (*fn.body, fn.args) for inner in ast.walk(part)
    }
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    entries = None if entry is None else frozenset((entry,) if isinstance(entry, str) else entry)
    return Context(tree, aliases, frozenset(module_names), jit_functions, frozenset(kernel_nodes), parents, entries)


def assignment_targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def flatten_targets(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from flatten_targets(list(target.elts))
        elif isinstance(target, ast.Starred):
            yield from flatten_targets([target.value])
        else:
            yield target


def store_targets(node: ast.AST) -> list[ast.expr]:
    """Every target ``node`` stores into or deletes: assignments, for, with-as, walrus, comprehensions."""
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return list(flatten_targets([node.target]))
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return list(flatten_targets([node.optional_vars]))
    if isinstance(node, ast.NamedExpr):
        return [node.target]
    return list(flatten_targets(assignment_targets(node)))


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def outermost_chains(tree: ast.AST) -> Iterator[ast.expr]:
    """Every Name/Attribute chain that is not itself the ``value`` of a longer chain."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
            yield node
