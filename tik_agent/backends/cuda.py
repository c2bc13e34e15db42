"""The GPU path: device-side timing with an L2 flush and a full synchronisation.

Each sample is one call on fresh inputs: the L2 cache is flushed by writing a
buffer larger than any current GPU's L2, the whole device is synchronised (so
work on any stream is waited for, not only the current one), and CUDA events
bracket the call; a second full synchronisation ends the sample.
"""

from __future__ import annotations

from typing import Any, Callable

from tik_agent.backends.collector import collector_paused

L2_FLUSH_BYTES = 256 * 1024 * 1024


class CudaEventTimer:
    name = "cuda events (L2 flushed, device synchronised)"

    def __init__(self, flush_bytes: int = L2_FLUSH_BYTES):
        import torch

        self._torch = torch
        self._flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")

    def measure(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        torch = self._torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        self._flush.zero_()
        with collector_paused():  # no finalizer left by an earlier call runs in this one
            torch.cuda.synchronize()
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
        return start.elapsed_time(end), out
