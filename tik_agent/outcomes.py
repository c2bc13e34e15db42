"""The one outcome vocabulary: what became of an evaluation or an attempt.

The judge's verdicts use the subset :data:`VERDICT_OUTCOMES` (``passed`` and the
ways a candidate fails); an attempt's record turns ``passed`` into ``accepted``,
``not_faster`` or ``unconfirmed`` and adds the outcomes of attempts that never
reached the judge (``no_code``, ``duplicate``).  The journal, ``record.json``,
``summary.json``'s ``outcomes``, the agents' feedback and the live view all speak
it; the values are what goes to disk, so they never change.

Imports nothing of the project: every part may use it.
"""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    # The judge's verdicts (an attempt's record never holds ``passed``).
    PASSED = "passed"                    # parity and integrity held, no cell regressed
    REJECTED_STATIC = "rejected_static"  # the source broke a static rule; nothing ran
    COMPILE_ERROR = "compile_error"      # did not import, or Triton refused it
    RUNTIME_ERROR = "runtime_error"      # raised while running a case
    PARITY_FAILED = "parity_failed"      # bits differ from the seed, or batch variant
    INTEGRITY_FAILED = "integrity_failed"  # no kernel ran, inputs changed, unwritten output, ...
    SLOWER = "slower"                    # a workload cell regressed beyond 1.05x of the seed
    TIMEOUT = "timeout"                  # killed at the wall-clock limit
    CRASHED = "crashed"                  # the worker died (signal, memory limit, ...)
    # An attempt's outcomes beyond the judge's.
    ACCEPTED = "accepted"                # promoted into the lineage
    NOT_FASTER = "not_faster"            # passed, but not faster than the parent beyond the noise
    UNCONFIRMED = "unconfirmed"          # the confirming re-time did not reproduce the gain
    NO_CODE = "no_code"                  # the agent gave no usable candidate
    DUPLICATE = "duplicate"              # a source already tried in the run (or a lineage kernel's)

    @property
    def passed(self) -> bool:
        return self is Outcome.PASSED

    @property
    def is_verdict(self) -> bool:
        """Whether the judge can give this outcome."""
        return self in VERDICT_OUTCOMES

    @property
    def is_error(self) -> bool:
        """The candidate did not run through: it failed to compile or raised while running."""
        return self in (Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR)


VERDICT_OUTCOMES: frozenset[Outcome] = frozenset({
    Outcome.PASSED, Outcome.REJECTED_STATIC, Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR, Outcome.PARITY_FAILED,
    Outcome.INTEGRITY_FAILED, Outcome.SLOWER, Outcome.TIMEOUT, Outcome.CRASHED})

# What an attempt's record may hold: every outcome but the judge's ``passed``.
ATTEMPT_OUTCOMES: frozenset[Outcome] = frozenset(Outcome) - {Outcome.PASSED}
