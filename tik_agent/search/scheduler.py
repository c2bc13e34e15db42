"""Which attempt runs next, and when the loop stops.

The scheduler hands out tickets (an attempt id and its index; a redo first, under
its old id), journals ``started`` before anything else of an attempt exists, and
answers ``None`` once a stop rule holds (a budget, an exhausted frontier, an
error, an unavailable agent, Ctrl-C).  A budget or an exhausted frontier stops
the loop only when nothing is in flight, since a running attempt could change
the answer.  An agent that fails transiently pauses every thread, with a
growing delay (:data:`AGENT_RETRY_S`), and its attempt is redone.

Its state shares the loop's condition with the ledger (re-entrant): ``take``
reads the ledger's spend and frontier under it.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager

from tik_agent.agents.base import AgentUnavailable
from tik_agent.run.journal import Journal, attempt_id
from tik_agent.run.runconfig import Limits
from tik_agent.search.budget import StopReason, stop_reason
from tik_agent.search.frontier import Member, attempt_rng
from tik_agent.search.ledger import Ledger
from tik_agent.search.tickets import Ticket

log = logging.getLogger(__name__)

AGENT_RETRY_S = (15, 30, 60, 120, 240, 300)
SLOW_PROPOSAL_S = 1.0        # proposals slower than this (median) are made while others evaluate


class Scheduler:
    def __init__(self, cond: threading.Condition, journal: Journal, ledger: Ledger, limits: Limits, rng_seed: int,
                 elapsed_s, indices: dict[str, int], next_index: int, redo: list[str]):
        self._cond = cond
        self._journal = journal
        self._ledger = ledger
        self.limits = limits
        self._rng_seed = rng_seed
        self._elapsed_s = elapsed_s        # the whole run's running time, a callable
        self._indices = indices            # attempt id -> index, as journaled
        self._next_index = next_index
        self._redo = list(redo)
        self.interrupted = threading.Event()
        self.stop: StopReason | None = None
        self.in_flight: dict[str, Ticket] = {}
        self._agent_failures = 0
        self._propose_s: list[float] = []
        self._paused_until = 0.0
        self._queued: list[int] = []       # indices of the attempts waiting for a slot

    # ------------------------------------------------------------------ tickets

    def parent(self, index: int) -> Member | None:
        """The parent of attempt ``index`` (its own RNG: the same on a resume), None if all are exhausted."""
        with self._cond:
            return self._ledger.frontier.choose(attempt_rng(self._rng_seed, index))

    def spend(self):
        return self._ledger.spend(len(self.in_flight), self._elapsed_s())

    def take(self) -> Ticket | None:
        """The next attempt (``started`` journaled), or None: stop."""
        with self._cond:
            while True:
                if self.stop is not None:
                    return None
                if time.time() < self._paused_until:
                    self._cond.wait(min(1.0, self._paused_until - time.time()))
                    continue
                reason = stop_reason(self.limits, self.spend())
                if reason is None:
                    index = self._indices[self._redo[0]] if self._redo else self._next_index
                    if self.parent(index) is None:
                        reason = StopReason.EXHAUSTED
                if reason is not None:
                    if not self.in_flight:  # nothing running could change the answer
                        if reason is StopReason.EXHAUSTED:
                            log.info("the search is exhausted: nothing new from any kernel of the frontier")
                        self.stop = reason
                        self._cond.notify_all()
                        return None
                    self._cond.wait(0.5)
                    continue
                if self._redo:
                    aid = self._redo.pop(0)
                else:
                    aid, self._next_index = attempt_id(index), index + 1
                    self._indices[aid] = index
                now = time.time()
                ticket = Ticket(aid, index, None, now, stage_started=now)
                self.in_flight[aid] = ticket
                self._journal.append("started", attempt_id=aid, index=index, t=ticket.started)
                return ticket

    @contextmanager
    def turn(self, ticket: Ticket):
        """Slots go to waiting attempts in the order of their index.  A thread that has just
        released a slot would otherwise take it straight back for its next attempt, ahead
        of an earlier one already waiting, and draw that attempt's parent without the
        earlier verdict (seen under load: a0003 drawn from the seed beside a0002's accept)."""
        with self._cond:
            self._queued.append(ticket.index)
            while min(self._queued) != ticket.index and self.stop is None:
                self._cond.wait(0.5)
        try:
            yield
        finally:
            with self._cond:
                self._queued.remove(ticket.index)
                self._cond.notify_all()

    def done(self, ticket: Ticket) -> None:
        with self._cond:
            if self.in_flight.get(ticket.attempt_id) is ticket:  # not its redo, taken meanwhile
                del self.in_flight[ticket.attempt_id]
            self._cond.notify_all()

    def redo(self, attempt: str) -> None:
        """Run ``attempt`` again next, under its id."""
        with self._cond:
            self._redo.insert(0, attempt)
            self._cond.notify_all()

    # ------------------------------------------------------------------ stops

    def request_stop(self, reason: StopReason) -> None:
        with self._cond:
            self.stop = self.stop or reason
            self._cond.notify_all()

    def interrupt(self) -> None:
        """No new attempts; the ones in flight are abandoned."""
        with self._cond:
            self.stop = StopReason.INTERRUPTED
            self.interrupted.set()
            self._cond.notify_all()

    # ------------------------------------------------------------------ the agent

    def proposed(self, seconds: float) -> None:
        """The agent answered (in ``seconds``): its failures are forgotten."""
        with self._cond:
            self._agent_failures = 0
            self._propose_s.append(seconds)

    def slow_proposals(self) -> bool:
        with self._cond:
            recent = self._propose_s[-5:]
        return bool(recent) and sorted(recent)[len(recent) // 2] > SLOW_PROPOSAL_S

    def agent_failed(self, ticket: Ticket, exc: AgentUnavailable) -> None:
        with self._cond:
            self._agent_failures += 1
            n = self._agent_failures
            if not exc.transient or n > len(AGENT_RETRY_S):
                if self.stop is None:  # said once, however many threads met the failure
                    log.error("the agent is unavailable: %s; stopping (resume the run when it is back)", exc)
                self.stop = self.stop or StopReason.AGENT_UNAVAILABLE
            else:
                delay = AGENT_RETRY_S[n - 1]
                log.warning("the agent is unavailable (%s); pausing %d s before retrying %s", exc, delay,
                            ticket.attempt_id)
                self._paused_until = time.time() + delay
                self._redo.insert(0, ticket.attempt_id)
            self._cond.notify_all()

    def paused(self) -> str | None:
        with self._cond:
            if time.time() < self._paused_until:
                return f"agent unavailable, retrying in {self._paused_until - time.time():.0f} s"
            return None
