"""The graph phase of a worker: the timing that decides speedups on a GPU.

Runs inside a sandbox worker after the per-call phase (:mod:`tik_agent.sandbox.timed`).
For each workload cell the trusted plan gives a base seed (the cell's non-float
inputs), one fill seed per round and the rounds whose outputs are digested; the
seed's own worker has chosen the number of calls per graph (:func:`reference`).
Every kernel has input slots of its own and is captured with one call per slot,
through the host-ops mode with its launches recorded.  Before every replay a
kernel's slots are refilled: the candidate's from the round's seed, the others'
only with data the candidate has already replayed on
(:mod:`tik_agent.sandbox.graph_rounds`), so that no buffer of this process holds
the answer the candidate is computing.  Each of the candidate's outputs is
compared in bits with the seed graph's on the same data, and in the digested
rounds its outputs, its inputs and the seed's outputs are kept for the parent,
who compares them with what the seed's own worker computed
(:mod:`tik_agent.judge.graphcheck`).

The stand-in backend (:class:`~tik_agent.backends.graph_timer.EagerReplayBackend`)
runs the same phase on the CPU interpreter: the GPU check's rehearsal and tests.
"""

from __future__ import annotations

import functools
import statistics
from collections import Counter
from typing import Callable

from tik_agent.backends.graph_sets import InputSlots
from tik_agent.backends.graph_timer import (DEFAULT_L2_BYTES, EagerReplayBackend, NAME, graph_calls,
                                            measure_cell, tensor_bytes)
from tik_agent.bits import output_digest
from tik_agent.sandbox import hostops, launches
from tik_agent.sandbox.graph_rounds import CellRounds
from tik_agent.sandbox.poison import poisoned_allocations
from tik_agent.sandbox.timed import cell_entry
from tik_agent.spec.cases import make_inputs, workload_case

PHASE_GRAPHS = "graphs"
REHEARSAL_CALLS = 2
REHEARSAL_NAME = "eager replay stand-in for cuda graphs (rehearsal: wall clock)"


def _l2(device: str) -> int:
    if device == "cuda":
        import torch

        from tik_agent.backends.graph_timer import l2_bytes

        return l2_bytes(torch)
    return DEFAULT_L2_BYTES


def backend_for(device: str):
    """The real graphs on cuda, the stand-in elsewhere; with the L2 size the sets must exceed."""
    if device == "cuda":
        from tik_agent.backends.graph_timer import TorchGraphBackend

        return TorchGraphBackend(), _l2(device), NAME
    return EagerReplayBackend(), _l2(device), REHEARSAL_NAME


def _slots(spec, cell, device: str, base_seed: int, calls: int, count: int) -> InputSlots:
    return InputSlots(make_inputs(spec, workload_case(cell, int(base_seed)), device, on_device=True)[:count], calls)


def reference(spec, device: str, seed: Callable, graph: dict) -> dict:
    """The seed's side, in its own worker: per cell the number of calls per graph and the
    digests of the seed's output on each slot of each digested round."""
    import time

    kwargs = dict(spec.kwargs)
    l2 = _l2(device)  # the seed's worker captures nothing: no backend (stream, NVML) to make
    out = {}
    entry = seed
    for cell in spec.workload_for(device):
        g = graph[cell.name]
        seed, count = cell_entry(spec, cell, entry)
        probe = make_inputs(spec, workload_case(cell, int(g["base"])), device, on_device=True)[:count]
        seed(*probe, **kwargs)
        _sync(device)
        start = time.perf_counter()
        result = seed(*probe, **kwargs)
        _sync(device)
        single_ms = (time.perf_counter() - start) * 1e3
        set_bytes = tensor_bytes(probe) + tensor_bytes(result)
        calls = graph_calls(set_bytes, l2, single_ms) if device == "cuda" else REHEARSAL_CALLS
        slots = _slots(spec, cell, device, g["base"], calls, count)
        digests = {}
        for r in g["checked"]:
            slots.fill(g["fill"][r])
            digests[str(r)] = [output_digest(seed(*s, **kwargs)) for s in slots.sets]
        out[cell.name] = {"calls": calls, "digests": digests, "set_bytes": set_bytes}
        del slots
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _watched(fn: Callable, kwargs: dict, seen: Counter, poison: bool) -> Callable:
    """A kernel as the graph calls it: in the host-ops mode, its launches counted.

    The stand-in re-runs calls eagerly, so what an output it never writes holds is
    whatever the allocator hands back (another kernel's output, freed a moment
    before): there it is poisoned, as in parity.  A real graph's outputs live in its own
    pool, where an unwritten element keeps the last replay's value on other inputs."""

    def call(inputs):
        with launches.recording() as rec, hostops.watching():
            if poison:
                with poisoned_allocations(0):
                    out = fn(*inputs, **kwargs)
            else:
                out = fn(*inputs, **kwargs)
        seen.update(rec)
        return out

    return call


def _bare(fn: Callable, kwargs: dict, inputs):
    return fn(*inputs, **kwargs)


def graph_phase(spec, device: str, kernels: dict[str, Callable], graph: dict, calls: dict,
                progress: Callable[[str], None]) -> dict:
    """Capture, replay and check every workload cell; samples are milliseconds per call."""
    progress(PHASE_GRAPHS)
    backend, l2, name = backend_for(device)
    kwargs = dict(spec.kwargs)
    result: dict = {"timer": name, "samples": {}, "cells": {}, "checked": {}, "mismatch": {}, "launches": {},
                    "calls": {}, "l2_bytes": l2}
    for cell in spec.workload_for(device):
        g = graph[cell.name]
        n = int(calls[cell.name])
        called = {k: cell_entry(spec, cell, fn) for k, fn in kernels.items()}
        slots = {k: _slots(spec, cell, device, g["base"], n, called["seed"][1]) for k in kernels}
        seen = {k: Counter() for k in kernels}
        fns = {k: _watched(fn, kwargs, seen[k], poison=device != "cuda") for k, (fn, _) in called.items()}
        # The launch overhead (a figure reported, never judged) of the calls as a user makes
        # them: outside the host-ops mode's dispatch and the launch recording, which cost per call.
        bare = {k: functools.partial(_bare, fn, kwargs) for k, (fn, _) in called.items()}
        rounds = CellRounds(slots, g["fill"], g["checked"])
        m = measure_cell(backend, fns, {k: s.sets for k, s in slots.items()}, slots["seed"].set_bytes, l2,
                         len(g["fill"]), before=rounds.before, after_replay=rounds.after_replay,
                         finish=rounds.finish, min_samples=len(g["fill"]), bare=bare)
        result["samples"][cell.name] = m.samples_ms
        detail = m.detail()
        detail["bytes"] = slots["seed"].set_bytes + rounds.out_bytes  # read and written per call
        detail["flops"] = cell.flops
        detail["median_us"] = {k: statistics.median(v) * 1e3 for k, v in m.samples_ms.items()}
        result["cells"][cell.name] = detail
        result["checked"][cell.name] = rounds.digests
        result["mismatch"][cell.name] = rounds.mismatch
        result["launches"][cell.name] = dict(seen["candidate"])
        result["calls"][cell.name] = n
        del slots, fns, rounds
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()
    return result
