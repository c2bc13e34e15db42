"""The loop: choose a parent, propose, evaluate, promote, until a budget says stop.

``workers + 1`` attempt threads share ``workers`` evaluation slots, handed out by
an executor (:mod:`tik_agent.search.executor`: on cuda, one slot per GPU).  When
proposals are slow (an LLM's minute of thinking) the extra thread prepares the
next proposal while the slots evaluate; when they are quick (the offline
agent) an attempt takes its slot first, so that its parent and its feedback
reflect every earlier result.  Evaluation runs in sandboxed processes, so the
threads give real parallelism.

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
from pathlib import Path

from tik_agent.agents.base import Agent, AgentUnavailable
from tik_agent.search.briefing import Briefing, source_diff
from tik_agent.search.budget import Spend, StopReason, gauges, stop_reason
from tik_agent.search.evaluations import Abandoned, Evaluations
from tik_agent.search.executor import LocalExecutor
from tik_agent.search.slots import Executor, ExecutorFailed, Slot, SlotLost
from tik_agent.search.frontier import Frontier, Member, attempt_rng
from tik_agent.search.sources import Sources, earlier
from tik_agent.search.throughput import Throughput
from tik_agent.run.journal import AttemptRecord, RunSummary, attempt_id
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import SEED_TAG
from tik_agent.judge.records import Verdict
from tik_agent.search.tickets import Snapshot, Ticket, commit_message, describe, noise_of, outcome_counts, too_noisy
from tik_agent.run.runconfig import utc_now
from tik_agent.run.rundir import WARM_CACHE, Session

log = logging.getLogger(__name__)

INTERRUPT_GRACE_S = 8.0      # how long Ctrl-C waits for threads before writing the summary
AGENT_RETRY_S = (15, 30, 60, 120, 240, 300)
SLOW_PROPOSAL_S = 1.0        # proposals slower than this (median) are made while others evaluate


# Outcomes that say the agent had nothing new to offer from a parent (see frontier exhaustion).
_NOTHING_NEW = (Outcome.NO_CODE, Outcome.DUPLICATE)


class Optimizer:
    def __init__(self, session: Session, agent: Agent, executor: Executor | None = None):
        self.s = session
        self.agent = agent
        cfg = session.config
        if executor is None:
            warm = session.path / WARM_CACHE
            executor = LocalExecutor(cfg.device, cfg.workers, warm_cache=warm if warm.is_dir() else None)
        self.executor = executor
        self.throughput = Throughput(executor.placement())
        self._cond = threading.Condition()
        self._commit_lock = threading.Lock()   # git and the lineage; taken before _cond, never after
        self._interrupted = threading.Event()
        self._evaluations = Evaluations(session, self.throughput, self._interrupted)
        self._stop: StopReason | None = None
        self._in_flight: dict[str, Ticket] = {}
        self._records: list[AttemptRecord] = list(session.state.finished.values())
        self._redo = list(session.redo)
        self._next_index = session.state.next_index
        self._usage = [session.state.input_tokens, session.state.output_tokens, session.state.cost_usd]
        self._agent_failures = 0
        self._propose_s: list[float] = []
        self._paused_until = 0.0
        self._session_start = time.time()
        self._briefing = Briefing(session, self._commit_lock)
        self.frontier = Frontier(cfg.search.frontier_size, cfg.search.explore)
        members = [Member(session.lineage.root_commit(), SEED_TAG, 1.0)] + [
            Member(k.commit, k.attempt_id, k.speedup_vs_seed, noise_of(k)) for k in session.lineage.accepted()]
        self._sources = Sources()
        for member in members:
            self.frontier.add(member)
            self._sources.claim(self._briefing.kernel(member.commit)[0], member.name)
        self._since_improvement = 0
        best = 1.0
        for r in self._records:
            source = session.store.read(r.attempt_id, "candidate.py")
            if source is not None:
                self._sources.claim(source, r.attempt_id)
            self.frontier.note(r.parent_commit, r.outcome in _NOTHING_NEW)
            improved = r.outcome is Outcome.ACCEPTED and (r.speedup or 0.0) > best
            best = max(best, r.speedup or 0.0) if improved else best
            self._since_improvement = 0 if improved else self._since_improvement + 1

    # ------------------------------------------------------------------ control

    def run(self) -> RunSummary:
        cfg = self.s.config
        self.s.journal.append("session", t=self._session_start, pid=os.getpid(), workers=self.executor.slots,
                              iterations=cfg.limits.iterations, executor=self.executor.kind)
        threads = [threading.Thread(target=self._worker, name=f"attempt-{i}", daemon=True)
                   for i in range(self.executor.slots + 1)]
        for t in threads:
            t.start()
        try:
            deadline = None
            while any(t.is_alive() for t in threads):
                if self._interrupted.is_set():
                    deadline = deadline or time.monotonic() + INTERRUPT_GRACE_S
                    if time.monotonic() > deadline:
                        log.warning("leaving %d attempt(s) unfinished; a resume redoes them", len(self._in_flight))
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
        with self._cond:
            self._stop = StopReason.INTERRUPTED
            self._interrupted.set()
            self._cond.notify_all()
        self.executor.cancel()

    def _request_stop(self, reason: StopReason) -> None:
        with self._cond:
            self._stop = self._stop or reason
            self._cond.notify_all()

    def _finish(self) -> RunSummary:
        # Not while an accepted kernel is being committed: the summary must include it.
        with self._commit_lock, self._cond:
            summary = self._summary()
            summary.save(self.s.path)
            self.s.journal.append("stopped", reason=summary.stop_reason, t=time.time())
        return summary

    # ------------------------------------------------------------------ scheduling

    def _spend(self) -> Spend:
        return Spend(attempts=len(self._records), in_flight=len(self._in_flight), elapsed_s=self.elapsed_s(),
                     tokens=self._usage[0] + self._usage[1], cost_usd=self._usage[2] or 0.0,
                     since_improvement=self._since_improvement)

    def elapsed_s(self) -> float:
        return self.s.state.elapsed_s + (time.time() - self._session_start)

    def _take(self) -> Ticket | None:
        with self._cond:
            while True:
                if self._stop is not None:
                    return None
                if time.time() < self._paused_until:
                    self._cond.wait(min(1.0, self._paused_until - time.time()))
                    continue
                reason = stop_reason(self.s.config.limits, self._spend())
                if reason is None:
                    index = self.s.state.indices[self._redo[0]] if self._redo else self._next_index
                    if self.frontier.choose(attempt_rng(self.s.config.rng_seed, index)) is None:
                        reason = StopReason.EXHAUSTED
                if reason is not None:
                    if not self._in_flight:  # nothing running could change the answer
                        if reason is StopReason.EXHAUSTED:
                            log.info("the search is exhausted: nothing new from any kernel of the frontier")
                        self._stop = reason
                        self._cond.notify_all()
                        return None
                    self._cond.wait(0.5)
                    continue
                if self._redo:
                    aid = self._redo.pop(0)
                else:
                    aid, self._next_index = attempt_id(index), index + 1
                    self.s.state.indices[aid] = index
                now = time.time()
                ticket = Ticket(aid, index, None, now, stage_started=now)
                self._in_flight[aid] = ticket
                self.s.journal.append("started", attempt_id=aid, index=index, t=ticket.started)
                return ticket

    def _worker(self) -> None:
        while (ticket := self._take()) is not None:
            try:
                self._attempt(ticket)
            except Abandoned:
                log.debug("%s abandoned: the run was interrupted", ticket.attempt_id)
            except SlotLost as exc:
                self._slot_lost(ticket, exc)
            except ExecutorFailed as exc:
                log.error("%s; stopping (a resume redoes %s)", exc, ticket.attempt_id)
                self._request_stop(StopReason.ERROR)
            except AgentUnavailable as exc:
                self._agent_failed(ticket, exc)
            except OSError as exc:  # a full disk, a vanished directory: the machine's, not a bug
                log.debug("%s: OS error", ticket.attempt_id, exc_info=True)
                log.error("%s: %s; stopping (a resume redoes this attempt)", ticket.attempt_id, exc)
                self._request_stop(StopReason.ERROR)
            except Exception:
                log.exception("%s: unexpected error; stopping (a resume redoes this attempt)", ticket.attempt_id)
                self._request_stop(StopReason.ERROR)
            finally:
                with self._cond:
                    if self._in_flight.get(ticket.attempt_id) is ticket:  # not its redo, taken meanwhile
                        del self._in_flight[ticket.attempt_id]
                    self._cond.notify_all()

    def _slot_lost(self, ticket: Ticket, exc: SlotLost) -> None:
        """No verdict came back: the attempt is redone under its id (its partial files set aside),
        so it is neither lost nor counted twice.  Interrupted, it is left for a resume."""
        aid = ticket.attempt_id
        if self._interrupted.is_set():
            log.debug("%s abandoned: %s", aid, exc)
            return
        moved = self.s.store.set_aside(aid)
        with self._cond:
            self._sources.forget(aid)
            self._redo.insert(0, aid)
            self._cond.notify_all()
        log.warning("%s: %s; the attempt is redone (its partial files are in %s)", aid, exc,
                    moved.name if moved else "nowhere: none were written")

    def _agent_failed(self, ticket: Ticket, exc: AgentUnavailable) -> None:
        with self._cond:
            self._agent_failures += 1
            n = self._agent_failures
            if not exc.transient or n > len(AGENT_RETRY_S):
                if self._stop is None:  # said once, however many threads met the failure
                    log.error("the agent is unavailable: %s; stopping (resume the run when it is back)", exc)
                self._stop = self._stop or StopReason.AGENT_UNAVAILABLE
            else:
                delay = AGENT_RETRY_S[n - 1]
                log.warning("the agent is unavailable (%s); pausing %d s before retrying %s", exc, delay,
                            ticket.attempt_id)
                self._paused_until = time.time() + delay
                self._redo.insert(0, ticket.attempt_id)
            self._cond.notify_all()

    # ------------------------------------------------------------------ one attempt

    def _attempt(self, ticket: Ticket) -> None:
        """Parent, proposal, evaluation, promotion.  When proposals are quick (the offline
        agent) the evaluation slot is taken first, so that the parent and the feedback are
        chosen with every earlier result known; slow proposals (an LLM) overlap evaluations."""
        slot: Slot | None = None
        try:
            if not self._slow_proposals():
                ticket.enter("waiting")
                slot = self.executor.acquire()
                ticket.slot = f"{slot.name}@{slot.node}"
            self._evaluations.check()
            with self._cond:
                ticket.parent = self.frontier.choose(attempt_rng(self.s.config.rng_seed, ticket.index))
                if ticket.parent is None:  # everything exhausted meanwhile: let _take decide
                    self._redo.insert(0, ticket.attempt_id)
                    return
            ticket.enter("proposing")
            record, candidate, parent_file = self._propose(ticket)
            if record is None:  # the agent has no move left from this parent: not an attempt
                return
            if candidate is None:
                return self._complete(ticket, record)
            if slot is None:
                ticket.enter("waiting")
                slot = self.executor.acquire()
                ticket.slot = f"{slot.name}@{slot.node}"
            verdict = self._evaluations.judge(ticket, record, candidate, parent_file, slot)
            if record.outcome is Outcome.ACCEPTED:
                self._promote(ticket, record, verdict, candidate)
            else:
                self._complete(ticket, record)
        finally:
            # Released only once the result is known to the frontier and the journal,
            # so that the next attempt to take this slot sees it.
            if slot is not None:
                self.executor.release(slot)

    def _slow_proposals(self) -> bool:
        with self._cond:
            recent = self._propose_s[-5:]
        return bool(recent) and sorted(recent)[len(recent) // 2] > SLOW_PROPOSAL_S

    def _propose(self, ticket: Ticket) -> tuple[AttemptRecord | None, Path | None, Path | None]:
        """Ask the agent; keep what it said.  No candidate path: nothing to evaluate.  No record:
        the agent is out of moves from the parent, which is set aside and the attempt redone."""
        s, aid, parent = self.s, ticket.attempt_id, ticket.parent
        with self._cond:
            records = list(self._records)
            seen = self._sources.keys()
        context = self._briefing.context(parent, ticket.index, records, seen)
        t0 = time.time()
        proposal = self.agent.propose(context)
        propose_s = time.time() - t0
        self._evaluations.check()
        usage = proposal.usage
        with self._cond:
            self._agent_failures = 0
            self._propose_s.append(propose_s)
            s.journal.append("proposed", attempt_id=aid, parent_commit=parent.commit, input_tokens=usage.input_tokens,
                             output_tokens=usage.output_tokens, cost_usd=usage.cost_usd, t=time.time())
            self._usage[0] += usage.input_tokens
            self._usage[1] += usage.output_tokens
            if usage.cost_usd is not None:
                self._usage[2] = (self._usage[2] or 0.0) + usage.cost_usd
            if proposal.exhausted:  # its tokens count; as an attempt it is redone from another parent
                self.frontier.set_aside(parent.commit)
                self._redo.insert(0, aid)
                self._cond.notify_all()
        if proposal.exhausted:
            log.info("%s set aside: %s", parent.name, proposal.error)
            return None, None, None
        s.store.write(aid, "prompt.md", proposal.prompt)
        s.store.write(aid, "reply.md", proposal.reply)
        s.store.write(aid, "rationale.txt", proposal.rationale)
        parent_file = s.store.write(aid, "parent.py", context.parent_source)
        record = AttemptRecord(
            attempt_id=aid, index=ticket.index, parent_commit=parent.commit, parent_id=parent.name,
            outcome=Outcome.NO_CODE, reason=proposal.error, rationale=proposal.rationale,
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=usage.cost_usd,
            agent=self.agent.name, model=self.agent.model, started_at=ticket.started, propose_s=propose_s)
        if not proposal.ok:
            return record, None, parent_file
        candidate = s.store.write(aid, "candidate.py", proposal.source)
        s.store.write(aid, "diff.patch", source_diff(context.parent_source, proposal.source, parent.name, aid))
        with self._cond:
            same = self._sources.claim(proposal.source, aid)
            if same != aid:
                record.outcome = Outcome.DUPLICATE
                record.reason = f"the same source as {earlier(same, parent.name, self._records)}: not evaluated again"
                return record, None, parent_file
        return record, candidate, parent_file

    def _promote(self, ticket: Ticket, record: AttemptRecord, verdict: Verdict, candidate: Path) -> None:
        """Commit (and tag) first, journal second: a kill in between is repaired on resume."""
        s, aid, parent = self.s, ticket.attempt_id, ticket.parent
        evaluation = s.store.write_json(aid, "evaluation.json", {
            **verdict.to_dict(), "kind": "variant", "attempt_id": aid, "parent_commit": parent.commit})
        ticket.enter("committing")
        with self._commit_lock:
            record.commit = s.lineage.commit_variant(aid, parent.commit, candidate, evaluation,
                                                     commit_message(record, verdict, self.s.spec.name, self.s.config.device))
            with self._cond:
                best = record.speedup > self.frontier.best().speedup
            if best:
                s.lineage.set_best(record.commit)
            self._complete(ticket, record)

    def _complete(self, ticket: Ticket, record: AttemptRecord) -> None:
        record.finished_at = time.time()
        self.s.store.write_json(record.attempt_id, "record.json", record.to_dict())
        with self._cond:
            self.s.journal.append("finished", record=record.to_dict(), t=record.finished_at)
            self._records.append(record)
            self.frontier.note(record.parent_commit, record.outcome in _NOTHING_NEW)
            improved = record.commit is not None and record.speedup > self.frontier.best().speedup
            if record.commit is not None:
                self.frontier.add(Member(record.commit, record.attempt_id, record.speedup, record.noise))
            self._since_improvement = 0 if improved else self._since_improvement + 1
            self._summary().save(self.s.path)
            self._cond.notify_all()
        log.info("%s", describe(record))

    # ------------------------------------------------------------------ views

    def _summary(self) -> RunSummary:
        cfg, best = self.s.config, self.frontier.best()
        return RunSummary(
            run_id=cfg.run_id, seed=self.s.spec.name, agent=cfg.agent, model=cfg.model,
            iterations=len(self._records), iterations_limit=cfg.limits.iterations,
            accepted=sum(r.outcome is Outcome.ACCEPTED for r in self._records),
            best_speedup=best.speedup, best_commit=best.commit, best_attempt=best.name,
            input_tokens=self._usage[0], output_tokens=self._usage[1], cost_usd=self._usage[2],
            elapsed_s=round(self.elapsed_s(), 1), stop_reason=self._stop.value if self._stop else None,
            outcomes=outcome_counts(self._records), environment=self.s.environment, updated=utc_now(),
            executor=self.executor.kind, nodes=[n.to_dict() for n in self._nodes()], best_noise=best.noise,
            noise_margin=cfg.search.noise_floor, too_noisy=too_noisy(self._records))

    def _nodes(self):
        return self.throughput.nodes(self.executor.placement(), time.time() - self._session_start)

    def snapshot(self, recent: int = 10) -> Snapshot:
        cfg = self.s.config
        with self._cond:
            paused = None
            if time.time() < self._paused_until:
                paused = f"agent unavailable, retrying in {self._paused_until - time.time():.0f} s"
            return Snapshot(
                run_id=cfg.run_id, seed=self.s.spec.name, agent=cfg.agent, model=cfg.model, workers=self.executor.slots,
                gauges=gauges(cfg.limits, self._spend()), best=self.frontier.best(),
                accepted=sum(r.outcome is Outcome.ACCEPTED for r in self._records),
                outcomes=outcome_counts(self._records), in_flight=[Ticket(**vars(t)) for t in self._in_flight.values()],
                recent=list(self._records[-recent:]), stop_reason=self._stop.value if self._stop else None,
                paused=paused, frontier=self.frontier.top(), executor=self.executor.kind, nodes=self._nodes(),
                noise_margin=cfg.search.noise_floor, too_noisy=too_noisy(self._records))
