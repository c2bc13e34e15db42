"""Host compute caught at run time: a torch dispatch mode around every judged call.

The static rules read the launcher's syntax; this module watches what it does.
While a candidate's entry runs, every aten op that reaches the dispatcher
outside a Triton launch must be an allocation, a view or a metadata query.
Anything else (arithmetic, conversions, reductions, copies between tensors,
host syncs such as ``item()``, storage swaps such as ``set_``) is host compute
or an escape route, whatever syntax produced it: an operator, a method name
the static rules allow, a builtin that iterates a tensor.

Triton launches are exempt while they run: under the CPU interpreter the launch
itself copies arguments to and from host buffers with aten ops.  The launch
wrapper in :mod:`tik_agent.sandbox.launches` and the harness's poisoning enter
:func:`exempt`; the depth counter is per thread.

Some tensor methods read elements without dispatching (``tolist``, ``numpy``)
or switch dispatch modes off (printing a tensor): those are refused for the
duration of the call too.

A violation raises :class:`HostComputeError` and is also remembered, so that a
candidate which catches the exception is still judged by it (see
:func:`watching`).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# aten overload packets (the name before the overload) a launcher may dispatch.
# Allocation: fresh memory, uninitialised or zeroed (torch.zeros dispatches as
# aten.zeros itself, so fill_ and zero_ are not needed and stay out).
_ALLOCATION = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros"}
)
# Views: the same storage, other sizes and strides.  Composite methods (reshape,
# flatten, narrow, contiguous ...) reach the dispatcher as these.  clone is what
# contiguous() dispatches for a strided input: same dtype, same bits, new layout.
_VIEWS = frozenset(
    {
        "view", "_unsafe_view", "_reshape_alias", "alias", "as_strided", "t", "transpose", "permute",
        "expand", "unsqueeze", "squeeze", "select", "slice", "unbind", "split", "split_with_sizes",
        "detach", "lift_fresh", "clone",
    }
)  # fmt: skip
# Metadata: answered from sizes and strides, never from the elements.
_METADATA = frozenset({"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "dim", "is_contiguous",
                       "stride", "size", "numel", "is_same_size"})
ADMITTED = _ALLOCATION | _VIEWS | _METADATA
# In a survey call no program runs and the launcher cannot read an element, so a zeroed
# allocation is allocated and not written: the seed's attention backward zeroes whole cache
# gradients, which cost the survey seconds on the CPU.
_ZEROED = {"zeros": ("empty", "memory_format"), "zeros_like": ("empty_like", "default"),
           "new_zeros": ("new_empty", "default")}


def _unzeroed(func):
    import torch

    name, overload = _ZEROED[_packet(func)]
    return getattr(getattr(torch.ops.aten, name), overload)


class HostComputeError(RuntimeError):
    """A judged call dispatched a torch op that computes outside a Triton launch."""


@dataclass
class _State(threading.local):
    exempt_depth: int = 0
    watching: int = 0  # depth of watching() on this thread
    unwritten: int = 0  # depth of watching(unwritten=True): the survey, where nothing reads memory
    violations: list[str] = field(default_factory=list)


_STATE = _State()


def op_name(func) -> str:
    """``aten.mul.Tensor`` for an OpOverload, whatever its str() looks like."""
    return str(func)


def _packet(func) -> str:
    # OpOverload exposes the packet name as e.g. 'aten::mul'; fall back on str().
    name = getattr(getattr(func, "_schema", None), "name", "") or str(func)
    return name.split("::")[-1].split(".")[0]


def admitted(func) -> bool:
    """Whether ``func`` (an aten OpOverload) may run in launcher code."""
    try:
        return _ADMITTED_OPS[func]
    except (KeyError, TypeError):  # TypeError: not hashable, so not one of torch's overloads; judged anew
        found = getattr(func, "namespace", "aten") == "aten" and _packet(func) in ADMITTED
        if type(func).__module__ == "torch._ops":  # torch's own overload objects, one per op: their answer holds
            _ADMITTED_OPS[func] = found
        return found


_ADMITTED_OPS: dict = {}  # OpOverload -> admitted(), filled as ops are first dispatched


CONSTEXPR_TENSOR = "a torch.Tensor passed as a constexpr to a Triton launch"


def refuse(what: str) -> None:
    """Record and raise a violation; ``what`` is harness text (an op name), never the candidate's."""
    message = f"host compute: {what}"
    _STATE.violations.append(message)
    log.debug("%s", message)
    raise HostComputeError(message)


def outside(op: str) -> str:
    return f"{op} outside a Triton launch"


_REPORTED = re.compile(r"host compute: (aten\.(\w+)\.\w+|torch\.Tensor\.(\w+)) outside a Triton launch")


def reported(text: str) -> str | None:
    """The violation a worker's error text reports, checked against what this module can raise.

    The text around it is the candidate's (its own exceptions and messages can
    imitate ours), so only a real aten op, a listed tensor method or the fixed
    constexpr message is returned: nothing else of the text can travel on.
    """
    if "host compute: " + CONSTEXPR_TENSOR in text:
        return CONSTEXPR_TENSOR
    import torch

    for match in _REPORTED.finditer(text):
        op, packet, method = match.groups()
        if (packet and hasattr(torch.ops.aten, packet)) or (method and method in _UNDISPATCHED):
            return outside(op)
    return None


@contextmanager
def exempt():
    """Let aten ops through on this thread: a Triton launch, or the harness's own work."""
    _STATE.exempt_depth += 1
    try:
        yield
    finally:
        _STATE.exempt_depth -= 1


@contextmanager
def checked():
    """Lift the exemption on this thread for the body: candidate code called
    from inside a launch (a grid callable) is host code again."""
    depth, _STATE.exempt_depth = _STATE.exempt_depth, 0
    try:
        yield
    finally:
        _STATE.exempt_depth = depth


@functools.cache
def _mode_class():
    """Built on first use, so that importing this module does not import torch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostOpsMode(TorchDispatchMode):
        """Raises on the first op that is not allocation, view or metadata."""

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo unless told
            # not to, and that wrapper imports torch._dynamo on its first call: 2 s of every
            # worker's start here.  Nothing in a worker compiles with dynamo (torch.compile is
            # outside the static rules' API), so there is nothing to skip.
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if _STATE.exempt_depth == 0 and not admitted(func):
                refuse(outside(op_name(func)))
            if _STATE.unwritten and _packet(func) in _ZEROED:
                func = _unzeroed(func)
            return func(*args, **(kwargs or {}))

    return HostOpsMode


def prepare() -> None:
    """Import and enter the mode once, before the worker's audit hook is installed.  With
    torch's default a mode's first dispatch imports ``torch._dynamo``, whose import sets
    ``TORCHINDUCTOR_CACHE_DIR`` in the environment (which the hook forbids) and costs 2 s;
    this mode opts out (``_should_skip_dynamo``; ``tests/test_hostops.py``).  A later
    import of dynamo inside a worker would now meet the hook at that environment write; the
    CPU suite's evaluations (forward, backward, timing) make none, and the CUDA graph and
    timing code do not import it."""
    import torch

    _guard_undispatched_methods()
    with _mode_class()():
        torch.empty(0)


# Tensor methods that read elements without dispatching an aten op (tolist, numpy,
# the buffer protocol) or that switch dispatch modes off while they run (printing a
# tensor does): refused outside launches by patching them for the call's duration.
_UNDISPATCHED = ("tolist", "numpy", "__array__", "__repr__", "__str__", "__format__", "__dlpack__",
                 "untyped_storage", "storage", "_typed_storage", "data_ptr", "__reduce_ex__")


@functools.cache
def _guard_undispatched_methods() -> None:
    """Wrap the undispatched tensor methods once: while a call is watched (and not
    inside a launch) they refuse; otherwise they behave as before.  Installed once
    rather than patched per call, because patching a type costs tens of microseconds
    per call inside the timed region."""
    import torch

    def refusing(name, original):
        def method(self, *args, **kwargs):
            if _STATE.watching and _STATE.exempt_depth == 0:
                refuse(outside(f"torch.Tensor.{name}"))
            return original(self, *args, **kwargs)

        return method

    for name in _UNDISPATCHED:
        setattr(torch.Tensor, name, refusing(name, getattr(torch.Tensor, name)))


@contextmanager
def watching(unwritten: bool = False):
    """Run the body under the host-ops mode; raise if it dispatched any forbidden op
    (``unwritten``: a survey call, whose zeroed allocations are left unwritten).

    The check after the body catches a candidate that swallowed the exception
    raised at the op itself: the first violation is what the verdict reports,
    even when the body then failed in some other way.
    """
    _guard_undispatched_methods()
    before = len(_STATE.violations)
    _STATE.watching += 1
    _STATE.unwritten += int(unwritten)
    try:
        with _mode_class()():
            yield
    finally:
        _STATE.watching -= 1
        _STATE.unwritten -= int(unwritten)
        caught = _STATE.violations[before:]
        del _STATE.violations[before:]
        if caught:
            raise HostComputeError(caught[0])
