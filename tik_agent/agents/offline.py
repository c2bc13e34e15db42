"""The offline agent: no network, no model, reproducible proposals.

It explores what is safe to explore without understanding the kernel:

* the spec's tunables: module-level constants the seed's author declared free
  to change without touching any row's reduction order.  A move sets one or two
  of them to another of their listed values;
* a short list of rewrites known to keep bits, each with its reason below.

Moves already tried from the same parent are skipped.  The rest are ranked by
what earlier verdicts taught: a tunable direction that was accepted (say,
``ROWS_PER_PROGRAM`` upwards) is preferred, one that was slower is avoided, and
a value that broke compilation or parity is penalised wherever it reappears.

A proposal depends only on the agent's seed, the context's ``rng_seed``,
``parent_id``, ``attempt_index`` and ``recent``: never on thread timing, so a
run with several proposals in flight is still reproducible.
"""

from __future__ import annotations

import ast
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from tik_agent import pyparse
from tik_agent.agents.base import AgentContext, AttemptFeedback, Proposal, Usage
from tik_agent.outcomes import Outcome
from tik_agent.agents.source_edits import (
    Edit,
    Slot,
    SourceIndex,
    apply_edits,
    constant_slots,
    launch_keyword_slots,
    launch_option_names,
    dot_kernels,
    looping_kernels,
)

log = logging.getLogger(__name__)

# Rewrites beyond the tunables, kept deliberately short.  Each must leave every
# output element's floating-point operations, types and order unchanged.
#
# num_stages: the software-pipelining depth of loads inside a kernel's loops.
#   It decides when data is fetched, never what is computed or in which order.
#   (num_warps is *not* listed: on a GPU the thread layout takes part in the
#   tree of a tl.sum, so it can change bits; it is explored only when the spec
#   lists it as a tunable, and the evaluator's parity check has the last word.)
NUM_STAGES_VALUES = (1, 2, 3, 4)

# Outcomes that say "this value is wrong", not merely "this value is slow".
_BROKEN = {Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR, Outcome.PARITY_FAILED, Outcome.INTEGRITY_FAILED,
           Outcome.REJECTED_STATIC, Outcome.CRASHED}
_SLOW = {Outcome.SLOWER, Outcome.NOT_FASTER, Outcome.UNCONFIRMED, Outcome.TIMEOUT}
TOP_K = 4  # concurrent proposals from one parent spread over this many best moves


@dataclass(frozen=True)
class Change:
    name: str
    old: object
    new: object
    launch_only: bool = False  # only sets a launch option (num_warps, num_stages, ...)
    unproven: bool = False     # not known to keep bits on this device

    def describe(self) -> str:
        old = "default" if self.old is None else repr(self.old)
        return f"set {self.name} = {self.new!r} (was {old})"


@dataclass(frozen=True)
class Move:
    changes: tuple[Change, ...]
    edits: tuple[Edit, ...]
    reason: str

    @property
    def key(self) -> frozenset[tuple[str, object]]:
        return frozenset((c.name, c.new) for c in self.changes)


class OfflineAgent:
    """Explores tunables and parity-safe rewrites; thread-safe (no shared mutable state)."""

    name = "offline"
    model: str | None = None

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, context: AgentContext) -> Proposal:
        prompt = f"offline agent: parent {context.parent_id}, attempt {context.attempt_index}"
        try:
            moves = candidate_moves(context.parent_source, context.tunables, context.unproven)
        except SyntaxError as err:
            error = f"offline agent: parent {context.parent_id} does not parse: line {err.lineno}: {err.msg}"
            return Proposal(None, "", Usage(0, 0, 0.0), prompt, "", error=error)
        history = History.from_feedback(context, [*context.tunables, *context.unproven, "num_stages"])
        fresh = [m for m in moves if m.key not in history.tried_here
                 and pyparse.source_key(apply_edits(context.parent_source, m.edits)) not in context.seen_sources]
        if not fresh:
            error = (f"offline agent: every move within two changes of parent {context.parent_id} was tried "
                     f"(or gives a source already tried in this run)")
            return Proposal(None, "", Usage(0, 0, 0.0), prompt, "", error=error, exhausted=True)

        # Rank with jitter fixed per (seed, parent): equal scores are ordered at
        # random, but identically for every call that sees the same parent.
        rng = random.Random(f"{self.seed}:{context.rng_seed}:{context.parent_id}")
        scored = sorted(
            ((history.score(m, context.is_interpreter) + 0.5 * rng.random(), i) for i, m in enumerate(fresh)),
            reverse=True,
        )
        # attempt_index minus the attempts already reported is the number of
        # proposals still in flight: 0 when run one at a time (take the best
        # move), and different for each of several calls made together (spread
        # them over the best few).  When the loop trims ``recent`` the offset
        # grows instead, which cycles through the best few: still reproducible.
        offset = context.attempt_index - len(context.recent)
        _, chosen = scored[offset % min(TOP_K, len(scored))]
        move = fresh[chosen]

        source = apply_edits(context.parent_source, move.edits)
        pyparse.parse(source)  # an edit of literals cannot break syntax; check anyway
        rationale = "; ".join(c.describe() for c in move.changes) + f". {move.reason}"
        log.debug("offline: attempt %d from %s: %s", context.attempt_index, context.parent_id, rationale)
        return Proposal(source, rationale, Usage(0, 0, 0.0), prompt, rationale)


def candidate_moves(source: str, tunables: Mapping[str, Sequence[object]],
                    unproven: Mapping[str, Sequence[object]] | None = None) -> list[Move]:
    """Every single and paired tunable change, and the num_stages rewrite where it applies.

    ``unproven`` values (not known to keep bits on this device) make moves too, marked so
    that the ranking tries them after the known-safe ones."""
    unproven = unproven or {}
    names = {**{k: list(v) for k, v in tunables.items()}}
    for k, v in unproven.items():
        names.setdefault(k, []).extend(x for x in v if x not in names[k])
    index = SourceIndex(source)
    slots = constant_slots(index, names)
    launch_only = launch_option_names(index, names)
    singles: list[tuple[Change, Edit]] = []
    for name, values in names.items():
        slot = slots.get(name)
        if slot is None:
            log.debug("offline: tunable %s has no literal module-level assignment in the parent", name)
            continue
        for value in values:
            if value != slot.value:
                doubt = value in unproven.get(name, ()) and value not in tunables.get(name, ())
                singles.append((Change(name, slot.value, value, name in launch_only, doubt), Edit(slot, value)))

    def why(changes) -> str:
        if any(c.unproven for c in changes):
            return ("Not known to keep bits on this device (the thread layout can change a reduction's tree); "
                    "the parity check decides.")
        return "Tunables listed in the spec leave each row's reduction order alone."

    moves = [Move((c,), (e,), why((c,))) for c, e in singles]
    for (c1, e1), (c2, e2) in combinations(singles, 2):
        if c1.name != c2.name:
            moves.append(Move((c1, c2), (e1, e2), why((c1, c2))))
    moves.extend(_num_stages_moves(index))
    return moves


def _num_stages_moves(index: SourceIndex) -> list[Move]:
    # Only loops that feed a tl.dot have loads to pipeline: for rmsnorm and logprobs the
    # compiled code is the same at every num_stages, so proposing it wastes evaluations.
    slots = launch_keyword_slots(index, looping_kernels(index) & dot_kernels(index), "num_stages")
    if not slots:
        return []
    current = {s.value for s in slots}
    old = current.pop() if len(current) == 1 else None
    why = (
        "num_stages only sets how far ahead the loop's loads are pipelined; "
        "the arithmetic and its order are untouched."
    )
    return [
        Move((Change("num_stages", old, v, launch_only=True),), tuple(Edit(s, v) for s in slots), why)
        for v in NUM_STAGES_VALUES
        if v != old
    ]


_VALUE = r"(?P<new>-?[\w.]+|'[^']*'|\"[^\"]*\")"


@dataclass(frozen=True)
class History:
    """What ``recent`` says about moves: tried from this parent, broken values, good directions."""

    tried_here: frozenset[frozenset[tuple[str, object]]]
    broken: Counter
    direction: Counter

    @classmethod
    def from_feedback(cls, context: AgentContext, names: Iterable[str]) -> History:
        names = sorted(names, key=len, reverse=True)
        tried, broken, direction = set(), Counter(), Counter()
        for feedback in context.recent:
            changes = changes_in(feedback, names)
            if feedback.parent_id == context.parent_id and changes:
                tried.add(frozenset((c.name, c.new) for c in changes))
            for change in changes:
                if feedback.outcome in _BROKEN:
                    broken[(change.name, change.new)] += 1
                sign = _sign(change)
                if sign and feedback.outcome is Outcome.ACCEPTED:
                    direction[(change.name, sign)] += 1 + math.log(max(feedback.speedup or 1.0, 1.0))
                elif sign and feedback.outcome in _SLOW:
                    direction[(change.name, sign)] -= 1
        return cls(frozenset(tried), broken, direction)

    def score(self, move: Move, interpreter: bool) -> float:
        total = -0.3 * (len(move.changes) - 1)  # one idea at a time first
        for change in move.changes:
            total -= 2.0 * self.broken[(change.name, change.new)]
            total += self.direction[(change.name, _sign(change))]
            if change.launch_only and interpreter:
                total -= 1.5  # the interpreter ignores launch options: no speedup to find there
            if change.unproven:
                total -= 1.0  # known-safe values first; a probe on this device would settle it
        return total


def changes_in(feedback: AttemptFeedback, names: Sequence[str]) -> list[Change]:
    """The literal settings of ``names`` that an attempt made, read from its diff or rationale."""
    if not names:
        return []
    pattern = re.compile(rf"\b(?P<name>{'|'.join(map(re.escape, names))})\s*(?::[^=\n]*)?=\s*{_VALUE}")
    if feedback.source_diff:
        lines = feedback.source_diff.splitlines()
        added = [ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
        removed = [ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---")]
        old = {m["name"]: _literal(m["new"], None) for line in removed for m in pattern.finditer(line)}
        new = {m["name"]: _literal(m["new"]) for line in added for m in pattern.finditer(line)}
    elif feedback.rationale:
        was = re.compile(rf"{pattern.pattern}\s*\(was (?P<old>[^)]*)\)")
        found = list(was.finditer(feedback.rationale))
        old = {m["name"]: _literal(m["old"], None) for m in found}
        new = {m["name"]: _literal(m["new"]) for m in found}
    else:
        return []
    return [
        Change(name, old.get(name), value)
        for name, value in new.items()
        if value is not _UNREADABLE and old.get(name) != value
    ]


_UNREADABLE = object()


def _literal(text: str, unreadable: object = _UNREADABLE) -> object:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return unreadable


def _sign(change: Change) -> int:
    old, new = change.old, change.new
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        return (new > old) - (new < old)
    return 0
