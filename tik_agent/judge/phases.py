"""A wall-clock limit per worker phase, derived from the seed's own times.

The worker writes its phase (load, parity, digests, waiting, survey, timing, recheck, graphs) into a
small ``progress`` file in its sandbox directory; :class:`PhaseWatch` is the
parent's watchdog over it (polled by
:func:`tik_agent.sandbox.process.run_sandboxed`).  The file is the candidate's
to write too, so nothing it says is trusted beyond this: phases only move
forward in the parent's eyes, each gets its own limit, and the sum of the
limits is the worker's hard wall-clock limit, so lying about the phase buys at
most the budget of the phases skipped.

The watch also reports progress (logger ``tik_agent.progress``, which the CLI
shows while a person waits for one evaluation or a seed's audit and quiets
during a run's loop): each phase the worker enters, and every
:data:`HEARTBEAT_S` seconds the phase it is in and for how long.

Default limits: a few times what the same phase cost the seed on this device,
never under a floor (start-up noise, a loaded machine).  The limits may arrive
while the worker already runs (the seed's worker runs beside it); until then a
phase has no limit of its own, only the worker's overall one.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tik_agent.judge.options import EvalOptions, Reference

PHASES = ("load", "parity", "digests", "waiting", "survey", "timing", "recheck", "graphs")
FLOOR_S = 60.0
FACTOR = 5.0
# Without a measurement (an old cached reference): the former flat default.
UNMEASURED_S = 900.0
HEARTBEAT_S = 30.0

progress_log = logging.getLogger("tik_agent.progress")


def derived_limit(seed_seconds: float | None) -> float:
    if seed_seconds is None:
        return UNMEASURED_S
    return max(FLOOR_S, FACTOR * seed_seconds)


def read_phase(path: Path) -> str | None:
    """The phase named in ``path``; never follows a link, never blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 64).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    return text if text in PHASES else None


@dataclass
class PhaseWatch:
    """Watchdog over a worker's progress file; records how long each phase took."""

    progress: Path
    limits: dict[str, float]          # phase -> seconds
    basis: str = "the seed's own times"
    phase: str = "load"
    started: dict[str, float] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    abort: str | None = None          # set from another thread: kill the worker with this reason
    label: str = "worker"             # who is watched, for progress lines ("the seed's worker")
    cases: str = ""                   # the parity cases the worker runs, for progress lines
    begun: float = field(init=False, default=0.0)
    reported: float = field(init=False, default=0.0)  # when the last progress line was written

    def __post_init__(self):
        self.started[self.phase] = self.begun = self.reported = time.monotonic()

    def total(self) -> float:
        return sum(self.limits.get(p, 0.0) for p in PHASES if p in self.limits)

    def _advance(self, now: float) -> None:
        seen = read_phase(self.progress)
        if seen is None or seen == self.phase or PHASES.index(seen) < PHASES.index(self.phase):
            return
        self.durations[self.phase] = now - self.started[self.phase]
        self.phase = seen
        self.started[seen] = self.reported = now
        progress_log.info("%s: %s phase, %.0f s in%s", self.label, seen, now - self.begun, self._cases())

    def _cases(self) -> str:
        return f"; {self.cases}" if self.phase == "parity" and self.cases else ""

    def _heartbeat(self, now: float) -> None:
        if now - self.reported >= HEARTBEAT_S:
            self.reported = now
            progress_log.info("%s: %s phase for %.0f s, %.0f s in all%s", self.label, self.phase,
                              now - self.started[self.phase], now - self.begun, self._cases())

    def __call__(self) -> str | None:
        if self.abort:
            return self.abort
        now = time.monotonic()
        self._advance(now)
        self._heartbeat(now)
        limit = self.limits.get(self.phase)
        if limit is not None and now - self.started[self.phase] > limit:
            return f"the {self.phase} phase ran past its {limit:g} s limit ({self.basis})"
        return None

    def finish(self) -> None:
        """Close the last phase (after the worker ended)."""
        now = time.monotonic()
        self._advance(now)
        self.durations.setdefault(self.phase, now - self.started[self.phase])


# The survey phase's limit is derived from this as if it were the seed's time (5x: 300 s): the
# seed's worker surveys nothing.  Measured at 5-15 s for the bundled seeds' launchers and their
# boundary cases on the CPU (tik_agent.judge.configs); with 128 rows a boundary side, the survey
# and 38 boundary cases added 15 s to an rmsnorm evaluation (docs/benchmarks.md).  A launcher
# with the most boundaries (12) at the widest rows could come near the limit on the CPU.
SURVEY_BASIS_S = 60.0


def phase_limits(options: EvalOptions, reference: Reference, seed_times: dict, kernels: int,
                  graph: dict | None = None) -> dict[str, float]:
    """Per-phase limits for the candidate's worker; none when ``--timeout`` fixes one."""
    if options.timeout_s is not None:
        return {}
    fixed = reference.phase_seconds
    parity = fixed.get("parity")
    # A cached reference may have been timed on a quieter machine: start-up (the
    # load phase) of this evaluation's seed worker against the reference's says
    # how much slower the machine is now.  A seed's worker forked from the warm
    # server records no load (its start measures nothing of the machine): then
    # there is no factor, and the load limit is the floor.
    then, now = fixed.get("load"), seed_times.get("load")
    slower = max(1.0, now / then) if then and now else 1.0
    limits = {"load": derived_limit(max(filter(None, (then, now)), default=0.0)),
              "parity": derived_limit(None if parity is None else parity * slower + seed_times.get("parity", 0.0))}
    limits["survey"] = derived_limit(SURVEY_BASIS_S)
    if options.timing:
        digests = seed_times.get("digests")
        limits["timing"] = derived_limit(None if digests is None else digests * kernels)
        limits["recheck"] = derived_limit(digests)
    if graph:
        # The seed's worker ran each cell's digested rounds (two calls per slot); the candidate's
        # captures and replays every kernel once per round, plus the eager overhead calls.
        seed_graphs = seed_times.get("graphs")
        rounds = max(len(g["fill"]) for g in graph.values())
        checked = max(1, min(len(g["checked"]) for g in graph.values()))
        limits["graphs"] = derived_limit(None if seed_graphs is None else seed_graphs * kernels * (rounds + 4) / checked)
    return limits
