"""The agent seam: what the loop gives an agent, and what an agent gives back.

The loop builds an :class:`AgentContext` (the spec, the seed, the parent it wants
improved, the parent's timings, the outcomes of recent attempts, the device) and
calls :meth:`Agent.propose` on it, possibly from several threads at once.  The
agent answers with a :class:`Proposal`: candidate source (or ``None`` with an
``error`` when the reply held no usable code), the stated rationale, the
provider's token usage and cost, and the prompt/reply text for the journal.

Agents know nothing of the sandbox: verdicts reach them only as
:class:`AttemptFeedback` data.  An agent whose provider keeps failing raises
:class:`AgentUnavailable`, and the loop pauses and reports instead of spinning.

Secrets never belong in a proposal.  Backends never put them there, and every
text field of a :class:`Proposal` still goes through :func:`redact` on
construction as a second line of defence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tik_agent.errors import TikError
from tik_agent.outcomes import ATTEMPT_OUTCOMES, Outcome
from tik_agent.redaction import KEY_PATTERNS as _KEY_PATTERNS, REDACTED, redact  # noqa: F401  (re-exported)

class AgentUnavailable(TikError):
    """The provider failed after the SDK's own retries (or refused our credentials).

    ``transient`` is True for rate limits, server errors, time-outs and connection
    failures (waiting may help), False for configuration problems such as a
    rejected key or an unknown model (waiting will not help).
    """

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(redact(message))
        self.transient = transient


@dataclass(frozen=True)
class AttemptFeedback:
    """What the loop tells an agent about one earlier attempt.

    ``outcome`` is the attempt's own, in the one vocabulary (:mod:`tik_agent.outcomes`),
    never translated; a string value is accepted and turned into the :class:`Outcome`.
    ``compile_error`` holds the error text of a candidate that failed to compile or
    raised while running (``outcome`` says which).

    ``first_mismatch`` is the evaluator's first differing case, e.g.
    ``{"case": ..., "index": ..., "expected_bits": ..., "actual_bits": ..., "ulps": ...}``;
    it is rendered key by key, so extra keys are welcome.
    """

    attempt_id: str
    parent_id: str
    outcome: Outcome
    reason: str | None = None
    rationale: str | None = None
    speedup: float | None = None
    compile_error: str | None = None
    first_mismatch: Mapping[str, object] | None = None
    source_diff: str | None = None

    def __post_init__(self) -> None:
        try:
            outcome = Outcome(self.outcome)
        except ValueError:
            outcome = None
        if outcome not in ATTEMPT_OUTCOMES:
            raise ValueError(f"AttemptFeedback.outcome: {self.outcome!r} is not one of "
                             f"{sorted(o.value for o in ATTEMPT_OUTCOMES)}")
        object.__setattr__(self, "outcome", outcome)
        if not self.attempt_id:
            raise ValueError("AttemptFeedback.attempt_id: must not be empty")
        if self.speedup is not None and not (math.isfinite(self.speedup) and self.speedup > 0):
            raise ValueError(f"AttemptFeedback.speedup: {self.speedup!r} is not a positive number")


@dataclass(frozen=True)
class AgentContext:
    """Everything an agent may use to propose a candidate.

    ``recent`` is ordered oldest first; its last element is the newest attempt.
    ``timing_table`` has one mapping per workload cell with keys ``name``,
    ``shape``, ``seed_ms`` and ``parent_ms``.
    """

    spec_text: str
    entry: str
    seed_name: str
    tunables: Mapping[str, Sequence[object]]
    seed_source: str
    parent_id: str
    parent_source: str
    parent_speedup: float | None
    timing_table: Sequence[Mapping[str, object]]
    recent: Sequence[AttemptFeedback]
    device: str
    rng_seed: int
    attempt_index: int
    # pyparse.source_key of every source already proposed in the run (from any parent) and
    # of every lineage kernel: proposing one of these again wastes an attempt.
    seen_sources: frozenset[str] = frozenset()
    # Tunable values not known to keep bits on this device (a GPU's thread layout can
    # change a reduction's tree): worth a try, with the evaluator's parity check deciding.
    unproven: Mapping[str, Sequence[object]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.entry.isidentifier():
            raise ValueError(f"AgentContext.entry: {self.entry!r} is not a Python identifier")
        if not self.parent_source.strip():
            raise ValueError("AgentContext.parent_source: must not be empty")
        if not self.seed_source.strip():
            raise ValueError("AgentContext.seed_source: must not be empty")
        if self.attempt_index < 0:
            raise ValueError(f"AgentContext.attempt_index: {self.attempt_index} is negative")
        for name, values in self.tunables.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise ValueError(f"AgentContext.tunables[{name!r}]: must be a non-empty list")
        # Freeze the containers so that a context shared between threads stays put.
        object.__setattr__(self, "tunables", {k: tuple(v) for k, v in self.tunables.items()})
        object.__setattr__(self, "unproven", {k: tuple(v) for k, v in self.unproven.items()})
        object.__setattr__(self, "timing_table", tuple(self.timing_table))
        object.__setattr__(self, "recent", tuple(self.recent))
        object.__setattr__(self, "seen_sources", frozenset(self.seen_sources))

    @property
    def is_interpreter(self) -> bool:
        """True when timings come from the CPU Triton interpreter."""
        return "interpreter" in self.device.lower()

    def last_from_parent(self) -> AttemptFeedback | None:
        """The newest attempt made from this context's parent, if any."""
        for feedback in reversed(self.recent):
            if feedback.parent_id == self.parent_id:
                return feedback
        return None


@dataclass(frozen=True)
class Usage:
    """Tokens as the provider reported them, and their cost in USD.

    ``cost_usd`` is None when the price is unknown (model missing from the price
    table, or the provider reported no usage).  Adding two usages sums the tokens;
    the cost is the sum of the known costs, and stays None only when neither side
    is known.  ``priced`` records whether every part of a sum had a known cost, so
    a total built partly from unknown prices can be shown as a lower bound.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    priced: bool = field(default=True)

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Usage.{name}: {value!r} is not a non-negative integer")
        if self.cost_usd is not None and not (math.isfinite(self.cost_usd) and self.cost_usd >= 0):
            raise ValueError(f"Usage.cost_usd: {self.cost_usd!r} is not a non-negative number")
        if self.cost_usd is None and self.priced and (self.input_tokens or self.output_tokens):
            object.__setattr__(self, "priced", False)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        if self.cost_usd is None and other.cost_usd is None:
            cost = None
        else:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            cost,
            priced=self.priced and other.priced,
        )


@dataclass(frozen=True)
class Proposal:
    """One candidate from an agent.

    ``source`` None means a failed proposal (the loop records it as ``no_code``);
    ``error`` then says why.  ``exhausted`` (with no source) says more: the agent
    knows it has no move left from this parent, so the loop sets the parent
    aside without spending an attempt on it.  ``prompt`` and ``reply`` are what
    was sent and received, for the journal; all text fields are redacted on
    construction.
    """

    source: str | None
    rationale: str
    usage: Usage
    prompt: str
    reply: str
    error: str | None = None
    exhausted: bool = False

    def __post_init__(self) -> None:
        if self.source is None and not self.error:
            raise ValueError("Proposal.error: required when source is None")
        if self.exhausted and self.source is not None:
            raise ValueError("Proposal.exhausted: an exhausted proposal has no source")
        if self.source is not None and not self.source.strip():
            raise ValueError("Proposal.source: empty source; use None with an error instead")
        for name in ("source", "rationale", "prompt", "reply", "error"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, redact(value))

    @property
    def ok(self) -> bool:
        return self.source is not None


@runtime_checkable
class Agent(Protocol):
    """A source of candidates.  Implementations must be safe to call from several threads."""

    name: str
    model: str | None

    def propose(self, context: AgentContext) -> Proposal: ...
