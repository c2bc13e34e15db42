"""One attempt, step by step: propose, dedupe, (evaluate: :mod:`tik_agent.search.evaluations`), promote.

Plain functions, each given only what it needs.  The order of writes is the
loop's crash safety: the proposal's tokens are journaled (``proposed``) as soon
as the agent answers; an accepted kernel is committed and tagged before its
``finished`` line (:func:`promote`, then :func:`complete`); ``summary.json``
follows the journal.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tik_agent.agents.base import Agent, AgentContext, Proposal
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord, AttemptStore
from tik_agent.run.lineage import LineageWriter
from tik_agent.search.briefing import source_diff
from tik_agent.search.ledger import Ledger
from tik_agent.search.tickets import Ticket, commit_message, describe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposed:
    """What an agent's answer left: the attempt's record and, when there is one to
    evaluate, its candidate file."""

    record: AttemptRecord
    candidate: Path | None   # None: nothing to evaluate (no code, or a duplicate)
    parent_file: Path


def ask(agent: Agent, context: AgentContext) -> tuple[Proposal, float]:
    """The agent's proposal and how long it took."""
    t0 = time.time()
    proposal = agent.propose(context)
    return proposal, time.time() - t0


def keep(store: AttemptStore, agent: Agent, ticket: Ticket, context: AgentContext, proposal: Proposal,
         propose_s: float) -> Proposed:
    """Keep what the agent said in the attempt's directory; the record starts as ``no_code``."""
    aid, parent, usage = ticket.attempt_id, ticket.parent, proposal.usage
    store.write(aid, "prompt.md", proposal.prompt)
    store.write(aid, "reply.md", proposal.reply)
    store.write(aid, "rationale.txt", proposal.rationale)
    parent_file = store.write(aid, "parent.py", context.parent_source)
    record = AttemptRecord(
        attempt_id=aid, index=ticket.index, parent_commit=parent.commit, parent_id=parent.name,
        outcome=Outcome.NO_CODE, reason=proposal.error, rationale=proposal.rationale,
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=usage.cost_usd,
        agent=agent.name, model=agent.model, started_at=ticket.started, propose_s=propose_s)
    if not proposal.ok:
        return Proposed(record, None, parent_file)
    candidate = store.write(aid, "candidate.py", proposal.source)
    store.write(aid, "diff.patch", source_diff(context.parent_source, proposal.source, parent.name, aid))
    return Proposed(record, candidate, parent_file)


def dedupe(proposed: Proposed, source: str, ledger: Ledger) -> Proposed:
    """A source already tried in the run (or a lineage kernel's) is a duplicate, not evaluated again."""
    record = proposed.record
    earlier = ledger.first_with(source, record.attempt_id, record.parent_id)
    if earlier is None:
        return proposed
    record.outcome = Outcome.DUPLICATE
    record.reason = f"the same source as {earlier}: not evaluated again"
    return Proposed(record, None, proposed.parent_file)


def promote(store: AttemptStore, lineage: LineageWriter, commit_lock: threading.Lock, ledger: Ledger,
            ticket: Ticket, record: AttemptRecord, verdict: Verdict, candidate: Path, seed_name: str,
            device: str, now) -> None:
    """Commit (and tag) first, journal second: a kill in between is repaired on resume."""
    aid, parent = ticket.attempt_id, ticket.parent
    evaluation = store.write_json(aid, "evaluation.json", {
        **verdict.to_dict(), "kind": "variant", "attempt_id": aid, "parent_commit": parent.commit})
    ticket.enter("committing")
    with commit_lock:
        record.commit = lineage.commit_variant(aid, parent.commit, candidate, evaluation,
                                               commit_message(record, verdict, seed_name, device))
        if ledger.is_best(record.speedup):
            lineage.set_best(record.commit)
        complete(store, ledger, record, now)


def complete(store: AttemptStore, ledger: Ledger, record: AttemptRecord, now) -> None:
    """The attempt's ``record.json``, then its ``finished`` line, the ledger and the summary
    (``now()`` gives what the summary needs of the session at that moment)."""
    record.finished_at = time.time()
    store.write_json(record.attempt_id, "record.json", record.to_dict())
    ledger.finished(record, now)
    log.info("%s", describe(record))
