"""Count Triton kernel launches and where the launched kernels were defined.

Installed by the harness (never by candidate code) before a kernel file is
loaded.  The evaluator uses it to prove that a Triton kernel really ran and
that it came from the candidate's own file, not from the seed or a library.

Two more duties of the same wrapper:

* :func:`surveying`: record every launch's kernel, arguments and grid, and
  hand Triton an empty grid, so that no program runs (the configuration
  survey, :mod:`tik_agent.sandbox.survey`).  Everything else of the launch is
  Triton's own: its argument handling, the grid callable's ``meta``, and on a
  GPU the compile; Triton's launcher starts no program for an empty grid.
* :func:`judged`: a launch that raised inside a judged call fails the call,
  even when the launcher caught the exception (a survey runs no program, so a
  kernel body that fails on purpose must not tell the two apart).
"""

from __future__ import annotations

import inspect
import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from tik_agent.sandbox import hostops, poison


class _Registry:
    """Process-wide launch counts: one per process, like the classes it wraps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.installed = False
        self.params: dict = {}  # kernel function -> (parameter names, constexpr names)
        self.origins: dict = {}  # a code object's file name -> that file, resolved
        self.argspecs: dict = {}  # kernel function -> the interpreter's (names, constexprs)
        self.constexpr_slots: dict = {}  # kernel function -> ((constexpr name, position), ...)


class _Local(threading.local):
    survey: list | None = None   # the launches recorded while surveying, or None
    raised: list[str]            # launches that raised on this thread

    def __init__(self) -> None:
        self.raised = []


_REGISTRY = _Registry()
_LOCAL = _Local()
_INTERPRETED: list = []  # (InterpretedFunction, its argument conversion), once installed


class LaunchCaughtError(RuntimeError):
    """A kernel launch raised inside a judged call, and the entry returned anyway."""


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
        try:
            from triton.runtime.interpreter import _implicit_cvt
            from triton.runtime.jit import _normalize_ty

            _INTERPRETED[:] = [InterpretedFunction, _implicit_cvt, _normalize_ty]
        except ImportError:  # another Triton: a survey goes through the executor with an empty grid
            pass
    except ImportError:  # pragma: no cover - the interpreter ships with triton 3.x
        pass
    for cls in classes:
        _wrap(cls)
    hostops.prepare()
    poison.install()  # before any candidate module loads: it finds the wrappers at torch.empty*


def _wrap(cls) -> None:
    original = cls.run

    def run(self, *args, **kwargs):
        survey = _LOCAL.survey
        if not kwargs.get("warmup", False) and survey is None:
            origin = _origin(self)
            with _REGISTRY.lock:
                _REGISTRY.counts[origin] += 1
        _refuse_tensor_constexprs(self, args, kwargs)
        grid = kwargs.get("grid")
        if callable(grid):
            grid = _checked_grid(grid)
        if survey is not None and not kwargs.get("warmup", False):
            if _INTERPRETED and isinstance(self, _INTERPRETED[0]):
                return _survey_interpreted(self, grid, args, kwargs, survey)
            grid = _recorded_grid(self, grid, args, kwargs, survey)
        kwargs["grid"] = grid
        # The launch copies tensors to and from host buffers with aten ops (under
        # the interpreter): exempt from the host-ops mode while it runs.
        try:
            with hostops.exempt():
                return original(self, *args, **kwargs)
        except BaseException as exc:
            _LOCAL.raised.append(f"{getattr(self, '__name__', 'a kernel')}: {type(exc).__name__}")
            raise

    cls.run = run


def _origin(kernel) -> str:
    code = getattr(getattr(kernel, "fn", None), "__code__", None)
    if code is None:
        return "<unknown>"
    # Keyed by the file name, not the code object: equal code objects from two files (two
    # copies of one kernel) compare equal, whatever their file.
    origin = _REGISTRY.origins.get(code.co_filename)
    if origin is None:
        origin = _REGISTRY.origins[code.co_filename] = str(Path(code.co_filename).resolve())
    return origin


def params(kernel) -> tuple[list[str], frozenset[str]] | None:
    """The kernel function's parameter names and which of them are constexprs (cached)."""
    fn = getattr(kernel, "fn", None)
    if fn is None:
        return None
    found = _REGISTRY.params.get(fn)
    if found is None:
        try:
            names = list(inspect.signature(fn).parameters)
            annotations = inspect.get_annotations(fn)
        except (TypeError, ValueError):  # not a plain function: nothing the interpreter would hand over
            return None
        found = names, frozenset(name for name, ty in annotations.items() if "constexpr" in str(ty))
        _REGISTRY.params[fn] = found
    return found


def _refuse_tensor_constexprs(kernel, args, kwargs) -> None:
    """Under the interpreter a constexpr parameter hands its argument to the kernel body
    unchanged, and the body runs exempt from the host-ops mode: a tensor passed that way
    would be computed on in torch unseen.  Refused before the launch starts."""
    import torch

    found = _constexpr_slots(kernel)
    if not found:
        return
    for name, index in found:
        # A keyword overrides a positional argument of the same name, as the launch binds them.
        if name in kwargs:
            value = kwargs[name]
        elif index < len(args):
            value = args[index]
        else:
            continue
        if _holds_tensor(value, torch.Tensor):
            hostops.refuse(hostops.CONSTEXPR_TENSOR)


def _constexpr_slots(kernel) -> tuple[tuple[str, int], ...]:
    """Each constexpr parameter's name and position (cached with :func:`params`)."""
    fn = getattr(kernel, "fn", None)
    found = _REGISTRY.constexpr_slots.get(fn) if fn is not None else None
    if found is None:
        names, constexprs = params(kernel) or ([], frozenset())
        found = tuple((name, i) for i, name in enumerate(names) if name in constexprs)
        if fn is not None and fn in _REGISTRY.params:
            _REGISTRY.constexpr_slots[fn] = found
    return found


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


def _recorded_grid(kernel, grid, args, kwargs, survey: list):
    """A grid that records the launch with the grid Triton computed, then starts no program.
    Triton evaluates it exactly as it would the launcher's own (same ``meta``)."""

    def empty(meta):
        value = grid(meta) if callable(grid) else grid
        survey.append({"kernel": kernel, "args": args, "kwargs": kwargs, "grid": value})
        return (0, 0, 0)

    return empty


def _survey_interpreted(kernel, grid, args, kwargs, survey: list) -> None:
    """The interpreter's launch up to its grid, as Triton's executor does it (the same
    ``meta``: arguments bound by name, the ones that are not constexprs converted to
    pointers), then no program.  Triton's executor would also copy every argument's
    storage onto itself, which touches every page of an input nobody wrote."""
    _, convert, normalize = _INTERPRETED
    fn = kernel.fn
    spec = _REGISTRY.argspecs.get(fn)
    if spec is None:
        full = inspect.getfullargspec(fn)
        annotations = {name: normalize(ty) for name, ty in inspect.get_annotations(fn).items()}
        spec = _REGISTRY.argspecs[fn] = (set(full.args) | set(full.kwonlyargs),
                                         {name for name, ty in annotations.items() if ty == "constexpr"})
    names, constexprs = spec
    value = grid
    if callable(grid):  # only a grid callable sees the arguments as Triton hands them over
        passed = {k: v for k, v in kwargs.items() if k in names}
        with hostops.exempt():  # the conversion reads pointers, as the launch itself does
            bound = inspect.getcallargs(fn, *args, **passed)
            meta = {name: v if name in constexprs else convert(v) for name, v in bound.items()}
        value = grid(meta)
    assert len(value) <= 3, "grid must have at most 3 dimensions"  # Triton's own check, as it words it
    survey.append({"kernel": kernel, "args": args, "kwargs": kwargs, "grid": value})


@contextmanager
def surveying():
    """Yield a list that collects every launch made inside the block (kernel, args,
    kwargs, grid as Triton computed it); no kernel program runs."""
    if _LOCAL.survey is not None:
        raise RuntimeError("surveying() does not nest")
    found: list = []
    _LOCAL.survey = found
    try:
        yield found
    finally:
        _LOCAL.survey = None


@contextmanager
def judged():
    """Around a judged call: a launch that raised inside it fails the call, even when
    the candidate's code caught the exception and returned."""
    before = len(_LOCAL.raised)
    try:
        yield
    finally:
        caught = _LOCAL.raised[before:]
        del _LOCAL.raised[before:]
    if caught:
        raise LaunchCaughtError(f"a kernel launch raised inside the entry, which went on ({caught[0]}): "
                                "a launch's failure is the call's")


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
