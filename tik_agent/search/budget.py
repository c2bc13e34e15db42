"""Stop conditions: every budget a run has, and why it stopped.

A budget is checked before each attempt starts: an attempt already running
is allowed to finish (so a token or time budget can be overrun by what the
attempts in flight spend).  ``iterations`` counts attempts over the whole
run, across resumes; ``patience`` is the number of finished attempts since
the best kernel last improved.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tik_agent.run.runconfig import Limits


class StopReason(str, Enum):
    ITERATIONS = "iterations"
    TIME = "time"
    TOKENS = "tokens"
    COST = "cost"
    PATIENCE = "patience"
    EXHAUSTED = "exhausted"                  # no kernel left to explore from
    INTERRUPTED = "interrupted"              # Ctrl-C
    AGENT_UNAVAILABLE = "agent_unavailable"  # the provider kept failing
    ERROR = "error"                          # a bug or an I/O failure; see the log


@dataclass(frozen=True)
class Spend:
    attempts: int          # finished attempts, the whole run
    in_flight: int
    elapsed_s: float       # the whole run, all sessions
    tokens: int
    cost_usd: float
    since_improvement: int


@dataclass(frozen=True)
class Gauge:
    name: str
    used: float
    limit: float | None
    unit: str = ""

    @property
    def fraction(self) -> float | None:
        return None if not self.limit else min(1.0, self.used / self.limit)


def stop_reason(limits: Limits, spend: Spend) -> StopReason | None:
    """Why no further attempt may start, or None if one may."""
    if spend.attempts + spend.in_flight >= limits.iterations:
        return StopReason.ITERATIONS
    if limits.time_s is not None and spend.elapsed_s >= limits.time_s:
        return StopReason.TIME
    if limits.max_tokens is not None and spend.tokens >= limits.max_tokens:
        return StopReason.TOKENS
    if limits.max_cost_usd is not None and spend.cost_usd >= limits.max_cost_usd:
        return StopReason.COST
    if limits.patience is not None and spend.since_improvement >= limits.patience:
        return StopReason.PATIENCE
    return None


def gauges(limits: Limits, spend: Spend) -> list[Gauge]:
    """Progress against every budget, for the live view (limitless ones included)."""
    return [
        Gauge("attempts", spend.attempts, limits.iterations),
        Gauge("time", spend.elapsed_s, limits.time_s, "s"),
        Gauge("tokens", spend.tokens, limits.max_tokens),
        Gauge("cost", spend.cost_usd, limits.max_cost_usd, "$"),
        Gauge("patience", spend.since_improvement, limits.patience),
    ]
