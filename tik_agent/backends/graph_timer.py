"""Device timing that measures the kernel: CUDA-graph replay in alternating rounds.

For each workload cell, every kernel (candidate, seed, parent) is captured once
in a CUDA graph of ``calls`` calls, each call on its own input set (no call of a
replay sees inputs another call of it saw, so a kernel cannot skip work it
already did), the sets together larger than the L2 cache; given one list of
sets per kernel, no kernel's graph reads another's inputs.  The graphs are
replayed in rounds whose order alternates (rotated, then reversed), at least
:data:`MIN_SAMPLES` replays per kernel and cell; before every replay the
caller's ``before`` hook may rewrite the inputs (outside the timed region),
after every replay its ``after_replay`` hook sees that kernel's outputs, and
after the last round its ``finish`` hook may replay any kernel again, untimed.  A
sample is one replay's device time divided by ``calls``, so the host's launch
cost (the Python wrapper, ``torch.empty``, Triton's launcher) is not in it.
That cost is measured apart, as the per-call time of the same calls launched
eagerly minus the replayed time, and reported separately.  SM clocks are read
before and after each cell.

The arithmetic (:func:`measure_cell` and the helpers above it) runs on any
:class:`GraphBackend`, so it is tested on the CPU with a fake clock;
:class:`TorchGraphBackend` is the CUDA one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from tik_agent.backends import nvml

from tik_agent.backends.collector import collector_paused

MIN_SAMPLES = 20
TARGET_REPLAY_MS = 2.0         # a replay long enough that event resolution does not matter
MAX_CALLS = 4096
MAX_SET_BYTES = 4 * 1024**3    # all input sets of one cell together
L2_FACTOR = 2                  # input sets cover at least this many L2s
DEFAULT_L2_BYTES = 64 * 1024**2
EAGER_REPEATS = 3
NAME = "cuda graph replay (rotating inputs > L2, launch overhead apart)"


class GraphBackend(Protocol):
    def capture(self, fn: Callable[[Any], Any], sets: Sequence[Any], calls: int) -> tuple[Any, list]:
        """A replayable graph of ``calls`` calls, call i on ``sets[i % len(sets)]``, and the
        outputs of those calls (which every replay writes anew)."""
        ...

    def replay_ms(self, graph: Any) -> float:
        """Device time of one replay of ``graph``, in milliseconds."""
        ...

    def eager_ms(self, fn: Callable[[Any], Any], sets: Sequence[Any], calls: int) -> float:
        """Time of the same calls launched one by one from the host, in milliseconds."""
        ...

    def clocks(self) -> dict:
        ...


def sets_needed(bytes_per_set: int, l2_bytes: int, *, factor: int = L2_FACTOR, cap: int = MAX_CALLS,
                max_bytes: int = MAX_SET_BYTES) -> int:
    """How many input sets make the rotation larger than ``factor`` L2s (at least 2)."""
    want = math.ceil(factor * l2_bytes / max(bytes_per_set, 1)) + 1
    return max(2, min(want, cap, max(max_bytes // max(bytes_per_set, 1), 2)))


def choose_calls(single_call_ms: float, sets: int, *, target_ms: float = TARGET_REPLAY_MS,
                 cap: int = MAX_CALLS) -> int:
    """Calls per graph: every set at least once, and a replay of about ``target_ms``."""
    by_time = math.ceil(target_ms / single_call_ms) if single_call_ms > 0 else cap
    return max(1, min(cap, max(sets, by_time)))


def graph_calls(set_bytes: int, l2_bytes: int, single_call_ms: float, *, max_bytes: int = MAX_SET_BYTES) -> int:
    """Calls per graph, each on its own input set: more than two L2s of sets, a replay of
    about :data:`TARGET_REPLAY_MS`, within ``max_bytes`` of sets (at least two calls)."""
    want = choose_calls(single_call_ms, sets_needed(set_bytes, l2_bytes, max_bytes=max_bytes))
    return max(2, min(want, max_bytes // max(set_bytes, 1)))


def round_orders(names: Sequence[str], rounds: int) -> list[list[str]]:
    """Rounds come in pairs, an order and its reverse, each pair rotated one further: each kernel
    goes first and last equally often and follows each other kernel from both sides (with two
    kernels: AB, BA, BA, AB, ...)."""
    names = list(names)
    orders = []
    for r in range(rounds):
        k = (r // 2) % len(names)
        order = names[k:] + names[:k]
        orders.append(order[::-1] if r % 2 else order)
    return orders


@dataclass
class CellMeasurement:
    calls: int
    input_sets: int
    set_bytes: int
    l2_cold: bool                       # the rotation covers more than L2_FACTOR L2s
    samples_ms: dict[str, list[float]]  # per call, one value per replay
    launch_overhead_us: dict[str, float]
    clocks_before: dict = field(default_factory=dict)
    clocks_after: dict = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def detail(self) -> dict:
        return {"calls": self.calls, "input_sets": self.input_sets, "set_bytes": self.set_bytes,
                "l2_cold": self.l2_cold, "launch_overhead_us": self.launch_overhead_us,
                "clocks_before": self.clocks_before, "clocks_after": self.clocks_after}


def measure_cell(backend: GraphBackend, kernels: dict[str, Callable], sets: Sequence[Any] | dict[str, Sequence[Any]],
                 set_bytes: int, l2_bytes: int, rounds: int, *, before: Callable[[str, int], None] | None = None,
                 after_replay: Callable[[str, int, list], None] | None = None,
                 finish: Callable[[Callable[[str], list]], None] | None = None,
                 min_samples: int = MIN_SAMPLES, bare: dict[str, Callable] | None = None) -> CellMeasurement:
    """Capture each kernel (one call per set), replay in alternating rounds, measure the launch
    overhead apart: eager calls of ``bare[name]`` where given (the kernel as a user calls it,
    outside whatever the harness wraps a judged call in), else of the kernel as captured.
    ``sets`` is one list for every kernel or one per kernel (of equal lengths).
    ``before(kernel, round)`` runs before each replay and ``after_replay(kernel, round, outputs)``
    after it, with that kernel's captured outputs (which every replay rewrites); after the launch
    overhead is measured, ``finish(replay)`` may call ``replay(kernel)`` for one more replay and
    its outputs.  None of them is timed."""
    own = sets if isinstance(sets, dict) else {name: sets for name in kernels}
    calls = len(own[next(iter(kernels))])
    captured = {name: backend.capture(fn, own[name], calls) for name, fn in kernels.items()}
    graphs = {name: c[0] for name, c in captured.items()}
    outputs = {name: c[1] for name, c in captured.items()}
    clocks_before = backend.clocks()
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    order_log: list[str] = []
    for r, order in enumerate(round_orders(list(kernels), max(rounds, min_samples))):
        for name in order:
            if before is not None:
                before(name, r)
            samples[name].append(backend.replay_ms(graphs[name]) / calls)
            order_log.append(name)
            if after_replay is not None:
                after_replay(name, r, outputs[name])
    overhead = {}
    for name, fn in (bare or kernels).items():
        eager = statistics.median(backend.eager_ms(fn, own[name], calls) / calls for _ in range(EAGER_REPEATS))
        overhead[name] = (eager - statistics.median(samples[name])) * 1e3
    clocks_after = backend.clocks()
    if finish is not None:
        def replay(name: str) -> list:
            backend.replay_ms(graphs[name])
            return outputs[name]

        finish(replay)
    return CellMeasurement(calls, calls, set_bytes, calls * set_bytes > L2_FACTOR * l2_bytes, samples,
                           overhead, clocks_before, clocks_after, order_log)


def tensor_bytes(values: Any) -> int:
    """Bytes of the tensors in ``values`` (a tensor, or nested lists/tuples/dicts of them)."""
    if hasattr(values, "element_size") and hasattr(values, "numel"):
        return int(values.element_size() * values.numel())
    if isinstance(values, dict):
        return sum(tensor_bytes(v) for v in values.values())
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


class TorchGraphBackend:
    """The CUDA implementation: torch.cuda.CUDAGraph, CUDA events, NVML clocks where readable."""

    def __init__(self):
        import torch

        self.torch = torch
        self.stream = torch.cuda.Stream()
        self._nvml = nvml.handle(torch)

    def _warm(self, fn, sets) -> None:
        torch = self.torch
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for s in sets[:2]:
                fn(s)
        torch.cuda.current_stream().wait_stream(self.stream)
        torch.cuda.synchronize()

    def capture(self, fn, sets, calls):
        torch = self.torch
        self._warm(fn, sets)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            outputs = [fn(sets[i % len(sets)]) for i in range(calls)]
        torch.cuda.synchronize()
        return graph, outputs

    def _events(self, body) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with collector_paused():  # see tik_agent.backends.collector.collector_paused
            torch.cuda.synchronize()
            start.record()
            body()
            end.record()
            torch.cuda.synchronize()
        return start.elapsed_time(end)

    def replay_ms(self, graph) -> float:
        return self._events(graph.replay)

    def eager_ms(self, fn, sets, calls) -> float:
        def body():
            for i in range(calls):
                fn(sets[i % len(sets)])

        return self._events(body)

    def clocks(self) -> dict:
        if self._nvml is None:
            return {}
        try:
            import pynvml

            return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(self._nvml, pynvml.NVML_CLOCK_SM),
                    "mem_mhz": pynvml.nvmlDeviceGetClockInfo(self._nvml, pynvml.NVML_CLOCK_MEM)}
        except Exception:  # clocks are a record, never a reason to fail a measurement
            return {}


def l2_bytes(torch) -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or DEFAULT_L2_BYTES)


class EagerReplayBackend:
    """A stand-in for CUDA graphs on any device (the CPU interpreter's rehearsal, tests):
    a "capture" runs each call once and keeps its outputs; a "replay" runs the same calls
    again and copies their results into those outputs, as a graph's replay rewrites its
    own buffers.  Timed with the wall clock; it exercises every step but the device."""

    def capture(self, fn, sets, calls):
        graph = [(fn, sets[i % len(sets)]) for i in range(calls)]
        outputs = [fn(s) for _, s in graph]
        return (graph, outputs), outputs

    def replay_ms(self, graph) -> float:
        import time

        calls, outputs = graph
        with collector_paused():
            start = time.perf_counter()
            fresh = [fn(s) for fn, s in calls]
            took = (time.perf_counter() - start) * 1e3
        for old, new in zip(outputs, fresh):
            _copy_into(old, new)
        return took

    def eager_ms(self, fn, sets, calls) -> float:
        import time

        with collector_paused():
            start = time.perf_counter()
            for i in range(calls):
                fn(sets[i % len(sets)])
            took = (time.perf_counter() - start) * 1e3
        return took

    def clocks(self) -> dict:
        return {}


def _copy_into(old, new) -> None:
    """A replay writes where the capture's outputs live; an output of another shape leaves
    them as they were (stale, so the comparison after the round fails)."""
    if isinstance(old, (tuple, list)) and isinstance(new, (tuple, list)):
        for o, n in zip(old, new):
            _copy_into(o, n)
    elif hasattr(old, "copy_") and hasattr(new, "shape") and tuple(old.shape) == tuple(new.shape) \
            and old.dtype == new.dtype:
        old.copy_(new)
