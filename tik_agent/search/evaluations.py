"""An attempt's evaluations and the promotion decision they lead to.

The first evaluation screens the candidate; a promising one is evaluated again
to confirm (:mod:`tik_agent.search.promotion`), in the same slot (one GPU): a
candidate's speedup over its parent is never measured across devices.  When the
parent is the seed, the evaluator is given no parent: the seed is timed once,
as the seed, and that one measurement is the figure against the parent too.

A verdict too noisy to rank the candidate decides nothing: the candidate is
re-timed with twice the rounds of the evaluation before, at most
``SearchSettings.noisy_retimes`` times per attempt (a warning line says so each
time).  When those are spent and the timing is still too noisy, the candidate
is not promoted, and its record says that the outcome was decided under noise.

Each evaluation's verdict is kept in the attempt's directory, in order:
``report.json`` (the first), ``report-2.json``, ... (its re-times),
``confirm.json``, ``confirm-2.json``, ...
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Callable

from tik_agent.judge.options import EvalOptions, Reference
from tik_agent.judge.records import Verdict
from tik_agent.run.journal import AttemptRecord, AttemptStore
from tik_agent.run.lineage import SEED_TAG
from tik_agent.run.runconfig import SearchSettings
from tik_agent.search import promotion
from tik_agent.search.slots import Slot, SlotLost
from tik_agent.search.promotion import Decision
from tik_agent.search.throughput import Throughput
from tik_agent.search.tickets import Ticket
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)


class Abandoned(Exception):
    """The run was interrupted while this attempt was in flight."""


class Evaluations:
    """Runs and judges the evaluations of attempts; shared by the loop's threads."""

    def __init__(self, spec: KernelSpec, reference: Reference, options: EvalOptions, search: SearchSettings,
                 store: AttemptStore, throughput: Throughput, interrupted: threading.Event):
        self._spec, self._reference, self._options, self._search = spec, reference, options, search
        self._store = store
        self.throughput = throughput
        self._interrupted = interrupted

    def check(self) -> None:
        if self._interrupted.is_set():
            raise Abandoned

    def judge(self, ticket: Ticket, record: AttemptRecord, candidate: Path, parent_file: Path,
              slot: Slot) -> Verdict:
        """Screen, re-time while too noisy, confirm; the outcome and figures go into ``record``."""
        parent = None if ticket.parent.name == SEED_TAG else parent_file
        self.check()
        ticket.enter("evaluating")
        e0 = time.time()
        verdict, decision, rounds = self._stage(ticket, record, slot, candidate, parent, "report",
                                                promotion.screen, self._options.rounds)
        if decision.outcome is None:
            ticket.enter("confirming")
            verdict, decision, _ = self._stage(ticket, record, slot, candidate, parent, "confirm",
                                               promotion.confirm, rounds)
        record.eval_s = time.time() - e0
        record.outcome, record.reason, record.noisy = decision.outcome, decision.reason, decision.noisy
        record.speedup, record.speedup_vs_parent, record.noise = verdict.speedup, verdict.speedup_vs_parent, verdict.noise
        record.cases_passed, record.cases_total = verdict.cases_passed, len(verdict.cases)
        return verdict

    def _stage(self, ticket: Ticket, record: AttemptRecord, slot: Slot, candidate: Path, parent: Path | None,
               name: str, rule: Callable[[Verdict, float, str], Decision], rounds: int) -> tuple[Verdict, Decision, int]:
        """One evaluation judged by ``rule``, re-timed with more rounds while it is too noisy to rank."""
        search, aid = self._search, ticket.attempt_id
        against = "the seed" if parent is None else "the parent"
        verdict = self._on(slot, candidate, parent, rounds)
        self._store.write_json(aid, f"{name}.json", verdict.to_dict())
        decision = rule(verdict, search.noise_floor, against)
        n = 1
        while decision.noisy:
            if record.retimes >= search.noisy_retimes:
                return verdict, promotion.unresolved(decision, name == "confirm", record.retimes), rounds
            record.retimes += 1
            rounds, n = rounds * 2, n + 1
            log.warning("%s: %s; re-timing with %d rounds (%d of %d)", aid, decision.reason, rounds,
                        record.retimes, search.noisy_retimes)
            ticket.enter("re-timing")
            verdict = self._on(slot, candidate, parent, rounds)
            self._store.write_json(aid, f"{name}-{n}.json", verdict.to_dict())
            decision = rule(verdict, search.noise_floor, against)
        return verdict, decision, rounds

    def _on(self, slot: Slot, candidate: Path, parent: Path | None, rounds: int) -> Verdict:
        """One evaluation in ``slot``, counted for the per-node throughput."""
        t0, options = time.time(), self._options
        options = options if rounds == options.rounds else dataclasses.replace(options, rounds=rounds)
        try:
            verdict = slot.evaluate(self._spec, candidate, options, reference=self._reference, parent=parent)
        except SlotLost:
            self.throughput.lost(slot.name, slot.node)
            raise
        except Exception:
            if self._interrupted.is_set():  # whatever a cancelled evaluation raises is the cancel's doing
                raise Abandoned from None
            raise
        if not self._interrupted.is_set():   # a killed evaluation is no throughput
            self.throughput.note(slot.name, slot.node, time.time() - t0)
        self.check()
        if parent is None and verdict.speedup is not None:
            promotion.seed_is_parent(verdict)
        return verdict
