"""Timed calls in the worker, every one of them kept for the judge.

Runs inside a sandbox worker.  The trusted side sends a plan
(:mod:`tik_agent.judge.plan`): the warm-up count, where the extra re-check of
each cell goes and the case seed of every call's inputs.  Each call of the
candidate goes through :func:`tik_agent.sandbox.harness.guarded_call` (poisoned
allocations and whatever else the harness puts around judged calls) with
launch recording on; its output's digest, the digest of its inputs after the
call and its launches are kept.  Digesting happens outside the timed region.

A seed with a backward entry has two kinds of cell: a training cell
(``backward = true``) times the whole step, forward then backward, and digests
its outputs and gradients; any other cell times and digests the forward alone.

The seed (and the parent) are timed in the same interleaved rounds, through
the same wrapper, so that both sides pay the same overhead; their outputs are
not kept: the seed's digests on the candidate's inputs come from a reference
worker (:func:`seed_digests`), never from this process.
"""

from __future__ import annotations

from typing import Callable

from tik_agent.backends.timers import timer_for
from tik_agent.bits import digest, output_digest
from tik_agent.sandbox import launches
from tik_agent.sandbox.harness import TrainingStep, guarded_call
from tik_agent.spec.cases import make_inputs, workload_case

PHASE_TIMING = "timing"
PHASE_RECHECK = "recheck"


def cell_entry(spec, cell, entry: Callable) -> tuple[Callable, int]:
    """What a cell calls, and how many of the judged call's inputs it takes: the whole
    training step for a training cell, otherwise the forward on the forward's inputs
    (no upstream gradients).  The graph phase follows the same rule."""
    if cell.backward or not isinstance(entry, TrainingStep):
        return entry, len(spec.checked_inputs)
    return entry.forward, len(spec.inputs)


def cell_call(spec, cell, entry: Callable, seed: int, device: str) -> tuple[Callable, list]:
    """What a cell times, and its inputs, drawn on the device (both workers draw them there)."""
    fn, count = cell_entry(spec, cell, entry)
    return fn, make_inputs(spec, workload_case(cell, seed), device, on_device=True)[:count]


def time_kernels(spec, device: str, kernels: dict[str, Callable], plan: dict,
                 progress: Callable[[str], None]) -> dict:
    """Warm-ups, interleaved timed rounds and re-checks; returns samples and per-call facts.

    Called once the parent has opened the gate (:mod:`tik_agent.sandbox.worker`)."""
    progress(PHASE_TIMING)
    timer = timer_for(device)
    names = list(kernels)  # the candidate first
    kwargs = dict(spec.kwargs)
    cells = spec.workload_for(device)
    rounds, warmup = int(plan["rounds"]), int(plan["warmup"])
    samples = {cell.name: {n: [] for n in names} for cell in cells}
    calls: dict[str, list[dict]] = {cell.name: [] for cell in cells}
    used = {cell.name: {n: 0 for n in names} for cell in cells}

    def inputs_for(cell, name):
        k = used[cell.name][name]
        used[cell.name][name] += 1
        return cell_call(spec, cell, kernels[name], int(plan["seeds"][cell.name][name][k]), device)

    def candidate_call(cell, kind: str, timed: bool) -> float | None:
        fn, inputs = inputs_for(cell, "candidate")
        which = len(calls[cell.name]) % 2
        ms = None
        with launches.recording() as rec:
            if timed:
                ms, out = timer.measure(lambda: guarded_call(fn, inputs, kwargs, which))
            else:
                out = guarded_call(fn, inputs, kwargs, which)
        calls[cell.name].append({"kind": kind, "out": output_digest(out), "inputs": digest(inputs),
                                 "launches": dict(rec)})
        return ms

    def other_call(cell, name: str, timed: bool) -> float | None:
        fn, inputs = inputs_for(cell, name)
        if timed:
            return timer.measure(lambda: guarded_call(fn, inputs, kwargs))[0]
        guarded_call(fn, inputs, kwargs)
        return None

    def call(cell, name: str, kind: str, timed: bool):
        return candidate_call(cell, kind, timed) if name == "candidate" else other_call(cell, name, timed)

    for _ in range(warmup):
        for cell in cells:
            for name in names:
                call(cell, name, "warm-up", timed=False)
    for r in range(rounds):
        for cell in cells:
            if int(plan["recheck_at"][cell.name]) == r:
                candidate_call(cell, "re-check", timed=False)
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                samples[cell.name][name].append(call(cell, name, "timed", timed=True))
    progress(PHASE_RECHECK)
    for cell in cells:
        if int(plan["recheck_at"][cell.name]) >= rounds:
            candidate_call(cell, "re-check", timed=False)
    return {"timer": timer.name, "samples": samples, "calls": calls}


def seed_digests(spec, device: str, seed: Callable, seeds: dict[str, list[int]]) -> dict[str, list[dict]]:
    """The seed's output digest and the input digest for each of the candidate's timed inputs."""
    cells = {cell.name: cell for cell in spec.workload_for(device)}
    out: dict[str, list[dict]] = {}
    for name, case_seeds in seeds.items():
        cell = cells[name]
        rows = []
        for s in case_seeds:
            fn, inputs = cell_call(spec, cell, seed, int(s), device)
            before = digest(inputs)
            rows.append({"out": output_digest(guarded_call(fn, inputs, spec.kwargs)), "inputs": before})
        out[name] = rows
    return out
