"""Named timing methods.  The evaluator chooses one explicitly and records its name.

* ``interpreter wall clock``: ``time.perf_counter`` around a call under the CPU
  interpreter.  It measures interpreter overhead (programs launched, loop
  trips), not GPU speed, and is labelled so wherever it is reported.
* ``cuda events``: see :mod:`tik_agent.backends.cuda`.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside a timed region.

    Python runs the collector when allocations pass a threshold, in whatever code
    is running then, and collecting runs finalizers: a candidate that leaves a
    suspended generator with a ``finally`` in a reference cycle (no import needed)
    gets its code run inside the next timed call, usually the seed's, and so slows
    the kernel it is compared with.  With the collector paused, what a call leaves
    behind is collected in the untimed code after it (the digests, the next
    inputs).  The collector's previous state is restored."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Timer(Protocol):
    name: str

    def measure(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        """Run ``fn`` once; return (milliseconds, its result)."""
        ...


class WallClockTimer:
    name = "interpreter wall clock"

    def measure(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        with collector_paused():
            start = time.perf_counter()
            out = fn()
            took = (time.perf_counter() - start) * 1e3
        return took, out


def timer_for(device: str) -> Timer:
    if device == "cuda":
        from tik_agent.backends.cuda import CudaEventTimer

        return CudaEventTimer()
    return WallClockTimer()
