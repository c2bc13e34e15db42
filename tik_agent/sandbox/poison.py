"""Poisoned allocations: every tensor ``torch.empty*`` hands out during a judged call is
filled with a bit pattern, so that an output element the kernel never writes holds it.

Two runs with different patterns then disagree (caught as non-determinism).  Done at
allocation, not by recycling freed memory, so it does not depend on what the CPU or
CUDA allocator happens to reuse.

The allocators are wrapped once (:func:`install`) and the wrappers stay: outside a
call they hand the tensor on untouched.  They used to be swapped in and out around
every call, and setting attributes of ``torch.Tensor`` costs tens of microseconds,
paid inside every timed call and about 16,000 times in each configuration survey.
Installed before a candidate's module is loaded, so that what it finds at
``torch.empty`` is the wrapper from its first line on, in survey calls and judged
calls alike.  Harness code: the candidate cannot undo it (the static rules forbid
touching torch's attributes).  The pattern in force is a process-wide setting, as the
swapped attributes were: a thread the launcher started allocates poisoned memory too.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from tik_agent.sandbox import hostops

# Bit patterns written into every freshly allocated tensor during a call.  Positive
# patterns (they fit the signed integer views), NaNs with payloads no kernel produces
# where the width allows.
POISON = {4: (0x7FC0DEAD, 0x7FC0BEEF), 2: (0x7E5A, 0x7C5B), 8: (0x7FF8DEADDEADBEEF, 0x7FF8BEEFBEEFDEAD)}

# Every allocator the static rules let a launcher call that hands out memory unwritten.
FUNCTIONS = ("empty", "empty_like", "empty_strided")
METHODS = ("new_empty", "new_empty_strided")

_OFF = object()  # no call in progress: the wrappers hand tensors on untouched


class _State:
    which: object = _OFF  # a pattern index, None (a survey call: nothing written) or _OFF
    installed = False
    lock = threading.Lock()


def _poison(t):
    which = _State.which
    if which is _OFF or which is None:
        return t
    import torch

    size = t.element_size() if isinstance(t, torch.Tensor) else 0
    if size in POISON and t.numel() and t.dtype != torch.bool:
        view = {8: torch.int64, 4: torch.int32, 2: torch.int16}[size]
        with hostops.exempt():  # the harness's fill, not the candidate's
            t.view(view).fill_(POISON[size][which])
    return t


def _function(fn):
    def allocate(*args, **kwargs):
        return _poison(fn(*args, **kwargs))

    allocate.__name__ = allocate.__qualname__ = fn.__name__
    return allocate


def _method(fn):
    def allocate(self, *args, **kwargs):
        return _poison(fn(self, *args, **kwargs))

    allocate.__name__ = fn.__name__
    allocate.__qualname__ = f"Tensor.{fn.__name__}"
    return allocate


def install() -> None:
    """Wrap torch's allocators, once per process."""
    with _State.lock:
        if _State.installed:
            return
        import torch

        for name in FUNCTIONS:
            setattr(torch, name, _function(getattr(torch, name)))
        for name in METHODS:
            setattr(torch.Tensor, name, _method(getattr(torch.Tensor, name)))
        _State.installed = True


@contextmanager
def poisoned_allocations(which: int | None):
    """Fill every tensor that ``torch.empty*`` hands out in the body with poison pattern
    ``which`` (None: nothing written, for the survey; the same wrappers are called, so a
    launcher cannot tell a survey call by what ``torch.empty`` is)."""
    install()
    before, _State.which = _State.which, which
    try:
        yield
    finally:
        _State.which = before
