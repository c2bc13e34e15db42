"""The promotion rule, as pure functions of verdicts.

A candidate enters the lineage only if

1. parity and integrity passed and no workload cell is more than 1.05x slower
   than the seed (the evaluator's ``passed``);
2. its workload speedup over its parent exceeds the measured noise (and a
   floor, since a noise estimate from a few rounds can itself be small by luck),
   and it was faster than the parent in every interleaved round (a neutral
   change wins all of five rounds one time in 32);
3. a second, independent evaluation (the confirming re-time) shows the same.

Speedups are recorded from the confirming run, which was not selected for
being lucky.
"""

from __future__ import annotations

from dataclasses import dataclass

from tik_agent.run.journal import AttemptOutcome
from tik_agent.judge.records import Verdict


@dataclass(frozen=True)
class Decision:
    outcome: AttemptOutcome | None   # None: promising, confirm it
    reason: str | None = None


def _gain(verdict: Verdict, floor: float) -> tuple[bool, str]:
    if verdict.speedup_vs_parent is None:
        return False, "no timing against the parent"
    threshold = max(verdict.noise or 0.0, floor)
    low = verdict.speedup_vs_parent_low
    if verdict.speedup_vs_parent - 1.0 <= threshold:
        return False, f"{verdict.speedup_vs_parent:.3f}x the parent, within the noise ({threshold:.1%})"
    if low is not None and low <= 1.0:
        return False, (f"{verdict.speedup_vs_parent:.3f}x the parent, but not faster in every round "
                       f"(slowest round {low:.3f}x)")
    return True, f"{verdict.speedup_vs_parent:.3f}x the parent, beyond the noise ({threshold:.1%})"


def screen(verdict: Verdict, floor: float) -> Decision:
    """After the first evaluation: rejected, or worth a confirming re-time."""
    if not verdict.passed:
        return Decision(AttemptOutcome(verdict.outcome.value), verdict.reason)
    ok, why = _gain(verdict, floor)
    return Decision(None, why) if ok else Decision(AttemptOutcome.NOT_FASTER, why)


def confirm(verdict: Verdict, floor: float) -> Decision:
    """After the confirming evaluation: accepted or not."""
    if not verdict.passed:
        return Decision(AttemptOutcome(verdict.outcome.value), f"confirming run: {verdict.reason}")
    ok, why = _gain(verdict, floor)
    if ok:
        return Decision(AttemptOutcome.ACCEPTED, why)
    return Decision(AttemptOutcome.UNCONFIRMED, f"confirming run: {why}")
