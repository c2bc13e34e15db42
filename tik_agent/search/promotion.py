"""The promotion rule, as pure functions of verdicts.

A candidate enters the lineage only if

1. parity and integrity passed and no workload cell is more than 1.05x slower
   than the seed (the evaluator's ``passed``);
2. its workload speedup over its parent exceeds a floor (the promotion margin,
   since a noise estimate from a few rounds can itself be small by luck) and the
   measured noise, and it was faster than the parent in every interleaved round
   (a neutral change wins all of five rounds one time in 32);
3. a second, independent evaluation (the confirming re-time) shows the same.

**Too noisy to rank.**  A verdict cannot rank a candidate against its parent
when its noise is larger than the promotion margin and the measured gain,
faster in every round, lies above the margin but within the noise: the
candidate may be faster by more than the margin, or the gain may be the noise.
Such a verdict decides nothing (:attr:`Decision.noisy`); the loop re-times the
candidate with more rounds, and only when the re-times allowed are spent does
the candidate become ``not_faster`` (or ``unconfirmed``), recorded as decided
under noise.  A gain within the margin, a round the candidate lost, and a gain
beyond the noise are decided as before whatever the noise.

When the parent is the seed the evaluator times the seed once
(:func:`seed_is_parent`): the figures against the parent are those against the seed.

Speedups are recorded from the confirming run, which was not selected for
being lucky.
"""

from __future__ import annotations

from dataclasses import dataclass

from tik_agent import figures
from tik_agent.outcomes import Outcome
from tik_agent.judge.records import Verdict


@dataclass(frozen=True)
class Decision:
    outcome: Outcome | None   # None: promising (confirm it), or too noisy to rank (re-time it)
    reason: str | None = None
    noisy: bool = False              # the verdict was too noisy to rank the candidate


def seed_is_parent(verdict: Verdict) -> Verdict:
    """The verdict of a candidate whose parent is the seed, timed against the seed only:
    its speedup over the parent is its speedup over the seed (one measurement)."""
    verdict.speedup_vs_parent, verdict.speedup_vs_parent_low = verdict.speedup, verdict.speedup_low
    return verdict


def _gain(verdict: Verdict, floor: float, parent: str) -> tuple[bool | None, str]:
    """True: faster beyond the noise; False: not faster; None: too noisy to rank."""
    gain, low = verdict.speedup_vs_parent, verdict.speedup_vs_parent_low
    if gain is None:
        return False, f"no timing against {parent}"
    noise = verdict.noise or 0.0
    threshold = max(noise, floor)
    figure = f"{figures.speedup(gain, verdict.noise)} {parent}"
    if gain - 1.0 <= floor:
        if 1.0 - gain > noise:
            return False, f"{figure}: slower, beyond the noise ({noise:.1%})"
        if gain - 1.0 > noise:
            return False, f"{figure}, within the {floor:.1%} promotion margin"
        return False, f"{figure}, within the noise ({threshold:.1%})"
    if low is not None and low <= 1.0:
        return False, f"{figure}, but not faster in every round (the slowest round's ratio: {low:.3f})"
    if gain - 1.0 <= noise:
        return None, f"too noisy to rank: {figure} lies above the {floor:.1%} margin but within the noise ({noise:.1%})"
    return True, f"{figure}, beyond the noise ({threshold:.1%})"


def screen(verdict: Verdict, floor: float, parent: str = "the parent") -> Decision:
    """After the first evaluation: rejected, worth a confirming re-time, or too noisy to rank.
    ``parent`` names the parent in the reason ("the seed" when it is)."""
    if not verdict.passed:
        return Decision(Outcome(verdict.outcome.value), verdict.reason)
    ok, why = _gain(verdict, floor, parent)
    if ok is None:
        return Decision(None, why, noisy=True)
    return Decision(None, why) if ok else Decision(Outcome.NOT_FASTER, why)


def confirm(verdict: Verdict, floor: float, parent: str = "the parent") -> Decision:
    """After the confirming evaluation: accepted, not confirmed, or too noisy to rank."""
    if not verdict.passed:
        return Decision(Outcome(verdict.outcome.value), f"confirming run: {verdict.reason}")
    ok, why = _gain(verdict, floor, parent)
    if ok is None:
        return Decision(None, f"confirming run: {why}", noisy=True)
    if ok:
        return Decision(Outcome.ACCEPTED, why)
    return Decision(Outcome.UNCONFIRMED, f"confirming run: {why}")


def unresolved(decision: Decision, confirming: bool, retimes: int) -> Decision:
    """A verdict still too noisy to rank after ``retimes`` re-times: not promoted, and says why."""
    outcome = Outcome.UNCONFIRMED if confirming else Outcome.NOT_FASTER
    return Decision(outcome, f"{decision.reason} after {retimes} re-time{'' if retimes == 1 else 's'}; "
                             f"not promoted", noisy=True)
