"""Count Triton kernel launches and where the launched kernels were defined.

Installed by the harness (never by candidate code) before a kernel file is
loaded.  The evaluator uses it to prove that a Triton kernel really ran and
that it came from the candidate's own file, not from the seed or a library.
"""

from __future__ import annotations

import inspect
import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from tik_agent.sandbox import hostops


class _Registry:
    """Process-wide launch counts: one per process, like the classes it wraps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.installed = False


_REGISTRY = _Registry()


def install() -> None:
    """Wrap the run methods of Triton's JIT and interpreter kernels. Idempotent."""
    with _REGISTRY.lock:
        if _REGISTRY.installed:
            return
        _REGISTRY.installed = True
    from triton.runtime import jit

    classes = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - the interpreter ships with triton 3.x
        pass
    for cls in classes:
        _wrap(cls)
    hostops.prepare()


def _wrap(cls) -> None:
    original = cls.run

    def run(self, *args, **kwargs):
        if not kwargs.get("warmup", False):
            code = getattr(getattr(self, "fn", None), "__code__", None)
            origin = str(Path(code.co_filename).resolve()) if code is not None else "<unknown>"
            with _REGISTRY.lock:
                _REGISTRY.counts[origin] += 1
        _refuse_tensor_constexprs(self, args, kwargs)
        grid = kwargs.get("grid")
        if callable(grid):
            kwargs["grid"] = _checked_grid(grid)
        # The launch copies tensors to and from host buffers with aten ops (under
        # the interpreter): exempt from the host-ops mode while it runs.
        with hostops.exempt():
            return original(self, *args, **kwargs)

    cls.run = run


def _refuse_tensor_constexprs(kernel, args, kwargs) -> None:
    """Under the interpreter a constexpr parameter hands its argument to the kernel body
    unchanged, and the body runs exempt from the host-ops mode: a tensor passed that way
    would be computed on in torch unseen.  Refused before the launch starts."""
    import torch

    fn = getattr(kernel, "fn", None)
    if fn is None:
        return
    try:
        names = list(inspect.signature(fn).parameters)
        annotations = inspect.get_annotations(fn)
    except (TypeError, ValueError):  # not a plain function: nothing the interpreter would hand over
        return
    constexprs = {name for name, ty in annotations.items() if "constexpr" in str(ty)}
    passed = {**dict(zip(names, args)), **kwargs}
    for name in constexprs & set(passed):
        if _holds_tensor(passed[name], torch.Tensor):
            hostops.refuse(hostops.CONSTEXPR_TENSOR)


def _holds_tensor(value, tensor_type, depth: int = 0) -> bool:
    if isinstance(value, tensor_type):
        return True
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)) and depth < 8:
        return any(_holds_tensor(v, tensor_type, depth + 1) for v in value)
    return depth >= 8  # nesting deeper than any constexpr needs: refuse rather than walk on


def _checked_grid(grid):
    """A grid callable is the candidate's host code, evaluated inside the launch:
    it runs with the exemption lifted, like the rest of the launcher."""

    def call(meta):
        with hostops.checked():
            return grid(meta)

    return call


@contextmanager
def recording():
    """Yield a Counter that, on exit, holds launches per defining file."""
    with _REGISTRY.lock:
        before = Counter(_REGISTRY.counts)
    result: Counter[str] = Counter()
    try:
        yield result
    finally:
        with _REGISTRY.lock:
            after = Counter(_REGISTRY.counts)
        after.subtract(before)
        result.update({k: v for k, v in after.items() if v > 0})
