"""Flat offsets in 64 bits where the declared domain reaches past 2**31 elements.

A kernel that computes ``rows * stride`` (or ``row * N``) in 32-bit integers is
right until the product passes 2**31 - 1, and a row of 152,064 logits gets there
at about 14,000 rows: an ordinary training batch, and no case the CPU can afford
to run with real data.  The huge views of the domain's cases
(:mod:`tik_agent.spec.domain_cases`) reach such offsets for a kernel that reads a
view through its strides; a kernel that first copies its inputs to contiguous ones
never sees them.  So, when a spec's domain lets a batched input hold 2**31
elements or more, this rule reads the candidate's kernels:

* an *index* is a value computed from ``tl.program_id`` or from the target of a
  ``for`` loop in a kernel body (and anything computed from one) in 32 bits;
* a *size* is a kernel parameter that a launch fills with anything computed from a
  stride, a shape, ``numel()`` or ``len()``, or from a name the launcher bound to one;
* an index times a size is a 32-bit product that can wrap: it is refused unless
  one side went through ``.to(tl.int64)`` or ``tl.cast(..., tl.int64)`` first
  (which widens everything computed from it).

Rationale: the bug is invisible to every case that fits in memory, and the fix is
one cast that costs nothing the timing can see.  It is a rule on the source, so it
reads names flow-insensitively: an index assigned wide in one place and narrow in
another counts as narrow.  Not covered: offsets built without a multiplication
(repeated addition), an index counted by hand in a ``while`` loop, sizes a launch
passes through a helper function, and layouts
other than rows (the attention kernels multiply head and block indices by small
strides by design).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tik_agent.pyparse import parse

from tik_agent.spec.schema import KernelSpec

LIMIT = 1 << 31
_WIDE, _INDEX = "wide", "index"
_SIZE_METHODS = ("stride", "size", "numel", "nelement")


@dataclass(frozen=True)
class NarrowOffset:
    line: int
    message: str


def needs_wide_offsets(spec: KernelSpec) -> bool:
    """Whether a batched input may hold 2**31 elements or more within the declared domain."""
    domain = spec.domain
    if spec.layout != "rows" or domain is None or not domain.declared:
        return False
    for inp in spec.inputs:
        if inp.batched:
            count = 1
            for dim in inp.shape:
                count *= int(domain.dims[dim].high) if isinstance(dim, str) else dim
            if count >= LIMIT:
                return True
    return False


def _is_int64(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "int64"


def _call_name(node: ast.Call) -> str | None:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)


class _Kernel:
    """Index and size names of one ``@triton.jit`` function."""

    def __init__(self, fn: ast.FunctionDef, sizes: set[str]):
        self.fn, self.sizes, self.names = fn, sizes, {}
        for target in (t for node in ast.walk(fn) if isinstance(node, ast.For) for t in ast.walk(node.target)):
            if isinstance(target, ast.Name):
                self.names[target.id] = _INDEX
        for _ in range(8):  # flow-insensitive: to a fixpoint (a chain of eight assignments is plenty)
            changed = False
            for node in ast.walk(fn):
                targets, value = _assignment(node)
                kind = self.kind(value) if value is not None else None
                for name in targets:
                    if kind == _INDEX and self.names.get(name) != _INDEX or kind == _WIDE and name not in self.names:
                        self.names[name] = kind
                        changed = True
            if not changed:
                break

    def kind(self, node: ast.AST) -> str | None:
        """wide (int64), index (a 32-bit index) or None for anything else."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Subscript):
            return self.kind(node.value)
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name == "to" and node.args and _is_int64(node.args[0]) or name == "cast" and any(
                    _is_int64(a) for a in node.args[1:] + [k.value for k in node.keywords]):
                return _WIDE
            if name == "program_id":
                return _INDEX
            if name in ("load", "sum", "max", "min", "arange", "full", "zeros", "cdiv"):
                return None
            parts = list(node.args) + ([node.func.value] if isinstance(node.func, ast.Attribute) else [])
            return _combine(self.kind(p) for p in parts)
        if isinstance(node, ast.BinOp):
            return _combine((self.kind(node.left), self.kind(node.right)))
        if isinstance(node, ast.UnaryOp):
            return self.kind(node.operand)
        return None

    def is_size(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.sizes for n in ast.walk(node)) and self.kind(node) != _WIDE

    def narrow_products(self):
        for node in ast.walk(self.fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                for index, size in ((node.left, node.right), (node.right, node.left)):
                    if self.kind(index) == _INDEX and self.kind(size) != _WIDE and self.is_size(size):
                        yield node
                        break


def _combine(kinds) -> str | None:
    kinds = set(kinds)
    return _WIDE if _WIDE in kinds else _INDEX if _INDEX in kinds else None


def _assignment(node: ast.AST) -> tuple[list[str], ast.AST | None]:
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)], node.value
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
        value = ast.BinOp(node.target, ast.Add(), node.value) if isinstance(node, ast.AugAssign) else node.value
        return [node.target.id], value
    return [], None


def _size_expr(node: ast.AST, size_names: set[str]) -> bool:
    """Anything computed from a stride, a shape, a size, numel or ``len``, or a name the launcher
    bound to one: ``x.stride(0)``, ``int(x.shape[1])``, ``len(weight)``, ``strides[0]`` after
    ``strides = x.stride()``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and n.func.attr in _SIZE_METHODS
                                        or isinstance(n.func, ast.Name) and n.func.id == "len"):
            return True
        if isinstance(n, ast.Attribute) and n.attr == "shape" or isinstance(n, ast.Name) and n.id in size_names:
            return True
    return False


def _launcher_sizes(fn: ast.FunctionDef) -> set[str]:
    """Names a host function binds to sizes: ``M, N = x.shape``, ``n = x.stride(0)``, ``s = int(n)``."""
    names: set[str] = set()
    for _ in range(8):  # to a fixpoint, as in _Kernel: a later line may feed an earlier name
        before = len(names)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and _size_expr(node.value, names):
                names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if len(names) == before:
            break
    return names


def _kernel_sizes(tree: ast.Module, kernels: dict[str, ast.FunctionDef]) -> dict[str, set[str]]:
    """Per kernel, the parameters some launch fills with a size."""
    out: dict[str, set[str]] = {name: set() for name in kernels}
    for host in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name not in kernels):
        names = _launcher_sizes(host)
        for call in (n for n in ast.walk(host) if isinstance(n, ast.Call)):
            target = call.func.value if isinstance(call.func, ast.Subscript) else None
            if not isinstance(target, ast.Name) or target.id not in kernels:
                continue
            params = [a.arg for a in kernels[target.id].args.args]
            for param, arg in zip(params, call.args):
                if _size_expr(arg, names):
                    out[target.id].add(param)
            for keyword in call.keywords:
                if keyword.arg in params and _size_expr(keyword.value, names):
                    out[target.id].add(keyword.arg)
    return out


def narrow_offsets(source: str, filename: str = "<candidate>") -> list[NarrowOffset]:
    """Every 32-bit index-times-size product in the file's kernels (see the module's docstring)."""
    tree = parse(source, filename=filename)
    kernels = {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
               and any("jit" in ast.unparse(d) for d in fn.decorator_list)}
    found = []
    for name, sizes in _kernel_sizes(tree, kernels).items():
        for product in _Kernel(kernels[name], sizes).narrow_products():
            found.append(NarrowOffset(product.lineno, (
                f"{ast.unparse(product)!r} in {name} multiplies an index (from tl.program_id or a loop) by a size "
                f"or stride in 32 bits; the domain lets an input hold 2**31 elements or more, where that wraps: "
                f"cast the index to tl.int64 first (.to(tl.int64))")))
    return sorted(found, key=lambda f: f.line)



