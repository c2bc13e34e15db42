"""From what a candidate's worker left to a :class:`Verdict`: every case's outputs
against the seed's (bits, invariance, determinism, launches, inputs), then, when
parity held, the timing rules (speedup, regressions).

Parity is judged twice for a candidate that will be timed: at the gate, on the
outputs its worker saved before waiting there, and again after the worker exits
(:mod:`tik_agent.judge.gate`); both go through :func:`judge_parity`.
"""

from __future__ import annotations

from pathlib import Path

from tik_agent.bits import digest
from tik_agent.judge.bitcheck import Check
from tik_agent.judge.parity import CaseResult, judge_against, judge_self
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.judge.timing import CellTiming, paired_speedups, regressions, stats, weighted_noise, weighted_speedup
from tik_agent.sandbox.wire import CaseOutputs
from tik_agent.spec.cases import Case, make_inputs
from tik_agent.spec.schema import KernelSpec

INTEGRITY_CHECKS = {Check.OUTPUT, Check.LAUNCH, Check.INPUTS, Check.DETERMINISM}


def judge_outputs(spec, device: str, all_cases: list[Case], expected: dict, outputs: dict, result: dict,
                  kernel_file: Path) -> Verdict:
    """The verdict on what a worker left: parity of every case, then, when it held, the timing."""
    env = result.get("environment", {})
    cases, failed = judge_parity(spec, all_cases, expected, outputs, kernel_file)
    if failed is not None:
        failed.environment = env
        return failed
    return judge_timing(spec, device, cases, result.get("timing"), env)


def judge_parity(spec, all_cases: list[Case], expected: dict, outputs: dict,
                 kernel_file: Path) -> tuple[list[dict], Verdict | None]:
    """Every case's result as a record, and the verdict of the first failing one (None when all pass)."""
    results: list[CaseResult] = []
    for case in all_cases:
        out = _case_outputs(outputs, case.id)
        if out is None:  # an honest worker saves every case before it is judged
            results.append(CaseResult(case.id, Check.OUTPUT,
                                      "the worker saved no outputs of the harness's form for this case"))
            continue
        r = judge_self(spec, case, out, kernel_file, digest(make_inputs(spec, case, "cpu")))
        results.append(judge_against(case, out, expected[case.id], r, tuple(o.name for o in spec.checked_outputs)))
    # Each case's parameters travel with its result: a drawn case is in no grid to look up.
    cases = [dict(r.to_dict(), params=c.to_dict()) for r, c in zip(results, all_cases)]
    failed = next((r for r in results if not r.passed), None)
    if failed is None:
        return cases, None
    outcome = Outcome.INTEGRITY_FAILED if failed.failed in INTEGRITY_CHECKS else Outcome.PARITY_FAILED
    mm = dict(failed.mismatch.to_dict(), case=failed.case_id) if failed.mismatch else None
    return cases, Verdict(outcome, f"{failed.case_id}: [{failed.failed.value}] {failed.message}",
                          cases=cases, first_mismatch=mm)


def _case_outputs(outputs: dict, case_id: str) -> CaseOutputs | None:
    """One case's outputs from the worker's file; None when it is missing or not in the harness's form."""
    try:
        return CaseOutputs.from_payload(outputs["cases"][case_id])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def judge_timing(spec, device: str, cases: list[dict], timing: dict | None, env: dict) -> Verdict:
    """The verdict of a candidate whose parity held: its speedup, or SLOWER when a cell regressed."""
    if not timing:
        return Verdict(Outcome.PASSED, None, cases=cases, environment=env)
    if timing.get("graph"):  # the graph replays decide; the per-call samples were the checks' occasion
        timing = dict(timing, samples=timing["graph"]["samples"], timer=timing["graph"]["timer"],
                      cells=timing["graph"]["cells"])
    cells = _cells(spec, device, timing["samples"])
    verdict = Verdict(Outcome.PASSED, None, speedup=weighted_speedup(cells), noise=weighted_noise(cells),
                      timer=timing["timer"], cases=cases, timing=[c.to_dict() for c in cells], environment=env)
    details = timing.get("cells", {})
    for row in verdict.timing:  # the device timer's per-cell record: bytes, calls, launch overhead, clocks
        if row["name"] in details:
            row["device"] = details[row["name"]]
    if timing.get("ceilings"):
        verdict.ceilings = timing["ceilings"]
    weights = {c.name: c.weight for c in cells}
    verdict.speedup_low = min(paired_speedups(timing["samples"], weights, "seed"))
    if all(c.parent is not None for c in cells):
        verdict.speedup_vs_parent = weighted_speedup(cells, against="parent")
        verdict.speedup_vs_parent_low = min(paired_speedups(timing["samples"], weights, "parent"))
    slow = regressions(cells)
    if slow:
        worst = max(slow, key=lambda c: c.candidate.median_ms / c.seed.median_ms)
        verdict.outcome = Outcome.SLOWER
        verdict.reason = (f"cell {worst.name} is {worst.candidate.median_ms / worst.seed.median_ms:.2f}x slower "
                          f"than the seed (cap 1.05x, noise {worst.noise:.1%})")
    return verdict


def _cells(spec: KernelSpec, device: str, samples: dict) -> list[CellTiming]:
    cells = []
    for cell in spec.workload_for(device):
        s = samples[cell.name]
        shape = ", ".join([f"M={cell.m}"] + [f"{k}={v}" for k, v in cell.dims.items()]) + f", {cell.dtype}"
        shape += ", forward+backward" if cell.backward else ""
        ratios = tuple(a / b for a, b in zip(s["seed"], s["candidate"]))
        cells.append(CellTiming(cell.name, shape, cell.weight, stats(s["seed"]), stats(s["candidate"]),
                                stats(s["parent"]) if "parent" in s else None, ratios))
    return cells
