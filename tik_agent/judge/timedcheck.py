"""Judge every call the candidate made while it was being timed.

The worker reports, for each call of each timing cell (warm-ups, timed calls,
re-checks, in the order of :meth:`tik_agent.judge.plan.EvalPlan.slots`), the
digest of the output, the digest of the inputs after the call and the Triton
launches.  The seed's digests on the same inputs come from a reference worker.
A candidate that behaves differently when it believes it is timed (counting
calls, watching the clock or the shape) is caught at the first call where it
does: its timed outputs then differ from what it produced elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tik_agent.judge.plan import EvalPlan
from tik_agent.outcomes import Outcome


@dataclass(frozen=True)
class TimedFailure:
    outcome: Outcome
    reason: str
    cell: str
    call: int


def judge_timed_calls(plan: EvalPlan, calls: dict, seed: dict, kernel_file: Path) -> TimedFailure | None:
    """The first timed-call failure, or None when every call matched the seed."""
    own = str(Path(kernel_file).resolve())
    for cell, cell_seed in seed.items():
        slots = plan.slots(cell)
        got = calls.get(cell, [])
        if len(got) != len(slots) or len(cell_seed) != len(slots):
            return TimedFailure(Outcome.INTEGRITY_FAILED, f"timing:{cell}: [calls] the worker reported {len(got)} "
                                f"calls, {len(slots)} were planned", cell, 0)
        differ = []
        for slot, call, ref in zip(slots, got, cell_seed):
            what = slot.describe(cell)
            launches = dict(call.get("launches", {}))
            foreign = sorted(f for f in launches if f != own)
            if foreign:
                return TimedFailure(Outcome.INTEGRITY_FAILED, f"timing:{cell}: [launch] {what} launched kernels "
                                    f"defined outside the kernel file: {foreign}", cell, slot.index)
            if launches.get(own, 0) == 0:
                return TimedFailure(Outcome.INTEGRITY_FAILED, f"timing:{cell}: [launch] {what} launched no Triton "
                                    "kernel from the kernel file", cell, slot.index)
            if call.get("inputs") != ref["inputs"]:
                return TimedFailure(Outcome.INTEGRITY_FAILED, f"timing:{cell}: [inputs] {what} changed its inputs",
                                    cell, slot.index)
            if call.get("out") != ref["out"]:
                differ.append(slot)
        if differ and len(differ) == len(slots):
            return TimedFailure(Outcome.PARITY_FAILED, f"timing:{cell}: [parity] all {len(slots)} calls at the "
                                "timing shape differ from the seed", cell, differ[0].index)
        if differ:
            first = differ[0]
            return TimedFailure(Outcome.INTEGRITY_FAILED, f"timing:{cell}: [timed-call] {first.describe(cell)} differs "
                                f"from the seed ({len(differ)} of {len(slots)} calls differ, the others match: "
                                "the kernel behaves differently from call to call)", cell, first.index)
    return None
