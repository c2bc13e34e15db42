"""Named timing methods.  The evaluator chooses one explicitly and records its name.

* ``interpreter wall clock``: ``time.perf_counter`` around a call under the CPU
  interpreter.  It measures interpreter overhead (programs launched, loop
  trips), not GPU speed, and is labelled so wherever it is reported.
* ``cuda events``: see :mod:`tik_agent.backends.cuda`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from tik_agent.backends.collector import collector_paused
from tik_agent.backends.cuda import CudaEventTimer


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
        return CudaEventTimer()
    return WallClockTimer()
