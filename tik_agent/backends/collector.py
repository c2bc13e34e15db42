"""The garbage collector held off around timed calls (every timer uses it)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


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
