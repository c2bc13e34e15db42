"""The loop: choose a parent, propose, evaluate, promote, until a budget says stop.

``workers + 1`` attempt threads share ``workers`` evaluation slots, handed out by
an executor (:mod:`tik_agent.search.executor`: on cuda, one slot per GPU).  When
proposals are slow (an LLM's minute of thinking) the extra thread prepares the
next proposal while the slots evaluate; when they are quick (the offline
agent) an attempt takes its slot first, so that its parent and its feedback
reflect every earlier result.  Evaluation runs in sandboxed processes, so the
threads give real parallelism.

:class:`Optimizer` is the façade; the work is done by narrow pieces: the
:class:`~tik_agent.search.scheduler.Scheduler` (tickets, stops, pauses), the
attempt pipeline (:mod:`tik_agent.search.attempt` and
:mod:`tik_agent.search.evaluations`) and the
:class:`~tik_agent.search.ledger.Ledger` (records, usage, frontier, summary).

Crash safety comes from the order of writes: ``started`` is journaled before
anything else of an attempt exists; an accepted kernel is committed (and
tagged) before its ``finished`` line; ``summary.json`` follows the journal.
:mod:`tik_agent.run.rundir` reconciles the two after a kill.

Ctrl-C (or SIGTERM) sets the stop flag and has the executor kill the
evaluations in flight (local sandboxes, or those inside Ray actors); their
attempts are abandoned (left unfinished, so a resume redoes them), the summary
is written with ``stop_reason = "interrupted"`` within seconds.  A slot lost
mid-evaluation (a Ray actor or node that died) abandons its attempt the same
way, and this session redoes it under the same id on another slot.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from tik_agent.agents.base import Agent, AgentUnavailable, Usage
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import RunSummary
from tik_agent.run.rundir import PROBES_FILE, WARM_CACHE
from tik_agent.search import attempt
from tik_agent.search.briefing import Briefing
from tik_agent.search.budget import StopReason, gauges
from tik_agent.search.evaluations import Abandoned, Evaluations
from tik_agent.search.executor import LocalExecutor
from tik_agent.search.frontier import Frontier
from tik_agent.search.ledger import Ledger, RunFacts, SummaryInputs
from tik_agent.search.scheduler import Scheduler
from tik_agent.search.setup import Session
from tik_agent.search.slots import Executor, ExecutorFailed, Slot, SlotLost
from tik_agent.search.throughput import Throughput
from tik_agent.search.tickets import Snapshot, Ticket

log = logging.getLogger(__name__)

INTERRUPT_GRACE_S = 8.0      # how long Ctrl-C waits for threads before writing the summary


class Optimizer:
    def __init__(self, session: Session, agent: Agent, executor: Executor | None = None):
        run, cfg = session.run, session.run.config
        self.agent = agent
        if executor is None:
            warm = run.path / WARM_CACHE
            executor = LocalExecutor(cfg.device, cfg.workers, warm_cache=warm if warm.is_dir() else None)
        self.executor = executor
        self.throughput = Throughput(executor.placement())
        self._run_path, self._journal, self._store, self._lineage = run.path, run.journal, run.store, run.lineage
        self._seed_name, self._device = run.spec.name, cfg.device
        self._elapsed_before = run.state.elapsed_s
        self._session_start = time.time()
        self._cond = threading.Condition()     # re-entrant: shared by the scheduler and the ledger
        self._commit_lock = threading.Lock()   # git and the lineage; taken before _cond, never after
        self.ledger = Ledger(self._cond, run.journal, run.path, RunFacts.of(cfg, run.spec.name, run.environment),
                             Frontier(cfg.search.frontier_size, cfg.search.explore),
                             Usage(run.state.input_tokens, run.state.output_tokens, run.state.cost_usd))
        self.scheduler = Scheduler(self._cond, run.journal, self.ledger, cfg.limits, cfg.rng_seed, self.elapsed_s,
                                   run.state.indices, run.state.next_index, run.redo)
        self._evaluations = Evaluations(run.spec, session.reference, session.options, cfg.search, run.store,
                                        self.throughput, self.scheduler.interrupted)
        self._briefing = Briefing(run.spec, cfg.device, str(run.environment.get("device_name", cfg.device)),
                                  cfg.rng_seed, run.lineage, run.store, self._commit_lock, run.path / PROBES_FILE)
        self.ledger.restore(run.lineage.root_commit(), run.lineage.accepted(), run.state.finished.values(),
                            lambda name, kernel: self._briefing.kernel(name)[0] if kernel
                            else run.store.read(name, "candidate.py"))

    @property
    def frontier(self) -> Frontier:
        return self.ledger.frontier

    # ------------------------------------------------------------------ control

    def run(self) -> RunSummary:
        limits = self.scheduler.limits
        self._journal.append("session", t=self._session_start, pid=os.getpid(), workers=self.executor.slots,
                             iterations=limits.iterations, executor=self.executor.kind)
        threads = [threading.Thread(target=self._worker, name=f"attempt-{i}", daemon=True)
                   for i in range(self.executor.slots + 1)]
        for t in threads:
            t.start()
        try:
            deadline = None
            while any(t.is_alive() for t in threads):
                if self.scheduler.interrupted.is_set():
                    deadline = deadline or time.monotonic() + INTERRUPT_GRACE_S
                    if time.monotonic() > deadline:
                        log.warning("leaving %d attempt(s) unfinished; a resume redoes them",
                                    len(self.scheduler.in_flight))
                        break
                for t in threads:
                    t.join(timeout=0.1)
        except KeyboardInterrupt:
            self.interrupt()
            raise
        finally:
            summary = self._finish()
        return summary

    def interrupt(self) -> None:
        """Stop soon: no new attempts, in-flight evaluations killed and abandoned."""
        self.scheduler.interrupt()
        self.executor.cancel()

    def _finish(self) -> RunSummary:
        # Not while an accepted kernel is being committed: the summary must include it.
        with self._commit_lock, self._cond:
            summary = self.ledger.summary(self._now())
            summary.save(self._run_path)
            self._journal.append("stopped", reason=summary.stop_reason, t=time.time())
        return summary

    def elapsed_s(self) -> float:
        return self._elapsed_before + (time.time() - self._session_start)

    # ------------------------------------------------------------------ threads

    def _worker(self) -> None:
        scheduler = self.scheduler
        while (ticket := scheduler.take()) is not None:
            try:
                self._attempt(ticket)
            except Abandoned:
                log.debug("%s abandoned: the run was interrupted", ticket.attempt_id)
            except SlotLost as exc:
                self._slot_lost(ticket, exc)
            except ExecutorFailed as exc:
                log.error("%s; stopping (a resume redoes %s)", exc, ticket.attempt_id)
                scheduler.request_stop(StopReason.ERROR)
            except AgentUnavailable as exc:
                scheduler.agent_failed(ticket, exc)
            except OSError as exc:  # a full disk, a vanished directory: the machine's, not a bug
                log.debug("%s: OS error", ticket.attempt_id, exc_info=True)
                log.error("%s: %s; stopping (a resume redoes this attempt)", ticket.attempt_id, exc)
                scheduler.request_stop(StopReason.ERROR)
            except Exception:
                log.exception("%s: unexpected error; stopping (a resume redoes this attempt)", ticket.attempt_id)
                scheduler.request_stop(StopReason.ERROR)
            finally:
                scheduler.done(ticket)

    def _slot_lost(self, ticket: Ticket, exc: SlotLost) -> None:
        """No verdict came back: the attempt is redone under its id (its partial files set aside),
        so it is neither lost nor counted twice.  Interrupted, it is left for a resume."""
        aid = ticket.attempt_id
        if self.scheduler.interrupted.is_set():
            log.debug("%s abandoned: %s", aid, exc)
            return
        moved = self._store.set_aside(aid)
        with self._cond:
            self.ledger.forget(aid)
            self.scheduler.redo(aid)
        log.warning("%s: %s; the attempt is redone (its partial files are in %s)", aid, exc,
                    moved.name if moved else "nowhere: none were written")

    def _attempt(self, ticket: Ticket) -> None:
        """Parent, proposal, evaluation, promotion.  When proposals are quick (the offline
        agent) the evaluation slot is taken first, so that the parent and the feedback are
        chosen with every earlier result known; slow proposals (an LLM) overlap evaluations."""
        slot: Slot | None = None
        try:
            if not self.scheduler.slow_proposals():
                slot = self._acquire(ticket)
            self._evaluations.check()
            ticket.parent = self.scheduler.parent(ticket.index)
            if ticket.parent is None:  # everything exhausted meanwhile: let take() decide
                self.scheduler.redo(ticket.attempt_id)
                return
            ticket.enter("proposing")
            proposed = self._propose(ticket)
            if proposed is None:  # the agent has no move left from this parent: not an attempt
                return
            if proposed.candidate is None:
                return attempt.complete(self._store, self.ledger, proposed.record, self._now)
            slot = slot or self._acquire(ticket)
            record = proposed.record
            verdict = self._evaluations.judge(ticket, record, proposed.candidate, proposed.parent_file, slot)
            if record.outcome is Outcome.ACCEPTED:
                attempt.promote(self._store, self._lineage, self._commit_lock, self.ledger, ticket, record, verdict,
                                proposed.candidate, self._seed_name, self._device, self._now)
            else:
                attempt.complete(self._store, self.ledger, record, self._now)
        finally:
            # Released only once the result is known to the frontier and the journal,
            # so that the next attempt to take this slot sees it.
            if slot is not None:
                self.executor.release(slot)

    def _acquire(self, ticket: Ticket) -> Slot:
        ticket.enter("waiting")
        with self.scheduler.turn(ticket):
            slot = self.executor.acquire()
        ticket.slot = f"{slot.name}@{slot.node}"
        return slot

    def _propose(self, ticket: Ticket) -> attempt.Proposed | None:
        """Ask the agent; keep what it said.  None: the agent is out of moves from the parent,
        which is set aside and the attempt redone from another."""
        parent = ticket.parent
        records, seen = self.ledger.seen()
        context = self._briefing.context(parent, ticket.index, records, seen)
        proposal, propose_s = attempt.ask(self.agent, context)
        self._evaluations.check()
        with self._cond:
            self.scheduler.proposed(propose_s)
            self.ledger.spent(ticket.attempt_id, parent.commit, proposal.usage)
            if proposal.exhausted:  # its tokens count; as an attempt it is redone from another parent
                self.ledger.frontier.set_aside(parent.commit)
                self.scheduler.redo(ticket.attempt_id)
        if proposal.exhausted:
            log.info("%s set aside: %s", parent.name, proposal.error)
            return None
        proposed = attempt.keep(self._store, self.agent, ticket, context, proposal, propose_s)
        if proposed.candidate is None:
            return proposed
        return attempt.dedupe(proposed, proposal.source, self.ledger)

    # ------------------------------------------------------------------ views

    def _now(self) -> SummaryInputs:
        stop = self.scheduler.stop
        return SummaryInputs(self.elapsed_s(), stop.value if stop else None, self.executor.kind,
                             self.throughput.nodes(self.executor.placement(), time.time() - self._session_start))

    def snapshot(self, recent: int = 10) -> Snapshot:
        scheduler = self.scheduler
        with self._cond:
            return self.ledger.snapshot(
                self._now(), gauges(scheduler.limits, scheduler.spend()), self.executor.slots,
                [Ticket(**vars(t)) for t in scheduler.in_flight.values()], scheduler.paused(), recent)
