"""What the run has spent and found: finished records, token usage, the frontier, the summary.

The ledger is rebuilt on every open from the journal's finished records and the
lineage's accepted kernels, then kept by the loop: each finished attempt is
journaled (``finished``, after an accepted kernel's commit), joins the records
and the frontier, and ``summary.json`` is rewritten.  Its state is guarded by the
loop's condition (shared with the scheduler; re-entrant), which every method
takes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from tik_agent.agents.base import Usage
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord, Journal, RunSummary
from tik_agent.run.lineage import SEED_TAG, AcceptedKernel
from tik_agent.run.runconfig import RunConfig, utc_now
from tik_agent.search.budget import Gauge, Spend
from tik_agent.search.frontier import Frontier, Member
from tik_agent.search.sources import Sources, earlier
from tik_agent.search.tickets import Snapshot, Ticket, noise_of, outcome_counts, too_noisy
from tik_agent.search.throughput import NodeUse

# Outcomes that say the agent had nothing new to offer from a parent (see frontier exhaustion).
NOTHING_NEW = (Outcome.NO_CODE, Outcome.DUPLICATE)


@dataclass(frozen=True)
class RunFacts:
    """What the summary and the snapshot say of the run itself (fixed for a session)."""

    run_id: str
    seed: str
    agent: str
    model: str | None
    iterations_limit: int
    noise_margin: float
    environment: dict

    @classmethod
    def of(cls, config: RunConfig, seed: str, environment: dict) -> "RunFacts":
        return cls(config.run_id, seed, config.agent, config.model, config.limits.iterations,
                   config.search.noise_floor, environment)


class Ledger:
    def __init__(self, cond: threading.Condition, journal: Journal, run_path: Path, facts: RunFacts,
                 frontier: Frontier, usage: Usage):
        self._cond = cond
        self._journal = journal
        self._run_path = run_path
        self.facts = facts
        self.frontier = frontier
        self.usage = usage
        self.records: list[AttemptRecord] = []
        self.sources = Sources()
        self.since_improvement = 0

    def restore(self, root: str, kernels: Iterable[AcceptedKernel], records: Iterable[AttemptRecord],
                source_of) -> None:
        """The state of a reopened run: its lineage kernels (``root`` and the accepted ones) and
        finished ``records``; ``source_of(commit or attempt id, is_kernel)`` reads a source back."""
        members = [Member(root, SEED_TAG, 1.0)] + [
            Member(k.commit, k.attempt_id, k.speedup_vs_seed, noise_of(k)) for k in kernels]
        for member in members:
            self.frontier.add(member)
            self.sources.claim(source_of(member.commit, True), member.name)
        best = 1.0
        for r in records:
            self.records.append(r)
            source = source_of(r.attempt_id, False)
            if source is not None:
                self.sources.claim(source, r.attempt_id)
            self.frontier.note(r.parent_commit, r.outcome in NOTHING_NEW)
            improved = r.outcome is Outcome.ACCEPTED and (r.speedup or 0.0) > best
            best = max(best, r.speedup or 0.0) if improved else best
            self.since_improvement = 0 if improved else self.since_improvement + 1

    # ------------------------------------------------------------------ what the loop tells it

    def spent(self, attempt: str, parent_commit: str, usage: Usage) -> None:
        """A proposal's tokens: journaled (``proposed``) and added to the run's usage."""
        with self._cond:
            self._journal.append("proposed", attempt_id=attempt, parent_commit=parent_commit,
                                 input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                 cost_usd=usage.cost_usd, t=time.time())
            self.usage = self.usage + usage

    def is_best(self, speedup: float) -> bool:
        with self._cond:
            return speedup > self.frontier.best().speedup

    def first_with(self, source: str, owner: str, parent: str) -> str | None:
        """Claim ``source`` for ``owner``; None if it is new, else what is known of the attempt or
        kernel that had it first (``parent``: the name of ``owner``'s parent)."""
        with self._cond:
            same = self.sources.claim(source, owner)
            return None if same == owner else earlier(same, parent, self.records)

    def forget(self, owner: str) -> None:
        """An attempt redone from scratch: its source is not taken yet."""
        with self._cond:
            self.sources.forget(owner)

    def seen(self) -> tuple[list[AttemptRecord], frozenset[str]]:
        """The finished records and the keys of every source seen, for a briefing."""
        with self._cond:
            return list(self.records), self.sources.keys()

    def finished(self, record: AttemptRecord, now: Callable[[], "SummaryInputs"]) -> None:
        """Journal a finished attempt (an accepted one is already committed), keep it, rewrite the summary
        (``now()``: what the summary needs of the session, at this moment)."""
        with self._cond:
            self._journal.append("finished", record=record.to_dict(), t=record.finished_at)
            self.records.append(record)
            self.frontier.note(record.parent_commit, record.outcome in NOTHING_NEW)
            improved = record.commit is not None and record.speedup > self.frontier.best().speedup
            if record.commit is not None:
                self.frontier.add(Member(record.commit, record.attempt_id, record.speedup, record.noise))
            self.since_improvement = 0 if improved else self.since_improvement + 1
            self.summary(now()).save(self._run_path)
            self._cond.notify_all()

    # ------------------------------------------------------------------ views

    def spend(self, in_flight: int, elapsed_s: float) -> Spend:
        with self._cond:
            return Spend(attempts=len(self.records), in_flight=in_flight, elapsed_s=elapsed_s,
                         tokens=self.usage.total_tokens, cost_usd=self.usage.cost_usd or 0.0,
                         since_improvement=self.since_improvement)

    def accepted_count(self) -> int:
        return sum(r.outcome is Outcome.ACCEPTED for r in self.records)

    def summary(self, now: "SummaryInputs") -> RunSummary:
        facts = self.facts
        with self._cond:
            best = self.frontier.best()
            return RunSummary(
                run_id=facts.run_id, seed=facts.seed, agent=facts.agent, model=facts.model,
                iterations=len(self.records), iterations_limit=facts.iterations_limit,
                accepted=self.accepted_count(), best_speedup=best.speedup, best_commit=best.commit,
                best_attempt=best.name, input_tokens=self.usage.input_tokens, output_tokens=self.usage.output_tokens,
                cost_usd=self.usage.cost_usd, elapsed_s=round(now.elapsed_s, 1), stop_reason=now.stop_reason,
                outcomes=outcome_counts(self.records), environment=facts.environment, updated=utc_now(),
                executor=now.executor, nodes=[n.to_dict() for n in now.nodes], best_noise=best.noise,
                noise_margin=facts.noise_margin, too_noisy=too_noisy(self.records))

    def snapshot(self, now: "SummaryInputs", gauges_: list[Gauge], workers: int, in_flight: list[Ticket],
                 paused: str | None, recent: int) -> Snapshot:
        facts = self.facts
        with self._cond:
            return Snapshot(
                run_id=facts.run_id, seed=facts.seed, agent=facts.agent, model=facts.model, workers=workers,
                gauges=gauges_, best=self.frontier.best(), accepted=self.accepted_count(),
                outcomes=outcome_counts(self.records), in_flight=in_flight, recent=list(self.records[-recent:]),
                stop_reason=now.stop_reason, paused=paused, frontier=self.frontier.top(), executor=now.executor,
                nodes=now.nodes, noise_margin=facts.noise_margin, too_noisy=too_noisy(self.records))


@dataclass(frozen=True)
class SummaryInputs:
    """What the summary needs from the session at the moment it is written."""

    elapsed_s: float
    stop_reason: str | None
    executor: str
    nodes: list[NodeUse]

