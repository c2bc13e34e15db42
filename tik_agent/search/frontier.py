"""Parent selection: a small frontier of verified kernels, mostly exploiting the best.

The frontier is the ``size`` fastest kernels of the lineage (the seed included
until enough variants beat it).  Each attempt draws its parent with its own
RNG, seeded by the run's seed and the attempt's index, so a resumed run makes
the same choices: with probability ``1 - explore`` the best kernel, otherwise
another frontier member picked uniformly.  Pure greedy search stalls when the
best kernel's neighbourhood is exhausted; exploring from a runner-up makes a
branch in the lineage and can find what the best one cannot.

A member from which the agent repeatedly produced nothing new (no candidate,
or one already tried) is *exhausted* and no longer drawn, and so at once is a
member the agent says it has no move left from (the offline agent, when every
move from it was tried); when every member is, the search has nothing left to
try.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# Consecutive proposals without code from one parent before it is set aside.
EXHAUSTED_AFTER = 3


@dataclass(frozen=True)
class Member:
    commit: str
    name: str          # attempt id, or "seed"
    speedup: float     # against the seed
    noise: float | None = None   # the spread of that speedup (None: the seed, or not recorded)


@dataclass
class Frontier:
    size: int = 4
    explore: float = 0.25
    members: dict[str, Member] = field(default_factory=dict)
    no_code_streak: dict[str, int] = field(default_factory=dict)

    def add(self, member: Member) -> None:
        self.members[member.commit] = member

    def note(self, parent_commit: str, no_code: bool) -> None:
        """Record an attempt's result against its parent (for exhaustion)."""
        self.no_code_streak[parent_commit] = self.no_code_streak.get(parent_commit, 0) + 1 if no_code else 0

    def set_aside(self, commit: str) -> None:
        """The agent has nothing left from ``commit``: exhausted now."""
        self.no_code_streak[commit] = max(self.no_code_streak.get(commit, 0), EXHAUSTED_AFTER)

    def exhausted(self, commit: str) -> bool:
        return self.no_code_streak.get(commit, 0) >= EXHAUSTED_AFTER

    def ranked(self) -> list[Member]:
        """All kernels, fastest first (ties: the one added first)."""
        order = {c: i for i, c in enumerate(self.members)}
        return sorted(self.members.values(), key=lambda m: (-m.speedup, order[m.commit]))

    def best(self) -> Member:
        return self.ranked()[0]

    def top(self) -> list[Member]:
        """The frontier proper: the ``size`` fastest kernels still worth exploring."""
        return [m for m in self.ranked() if not self.exhausted(m.commit)][: self.size]

    def choose(self, rng: random.Random) -> Member | None:
        """A parent for the next attempt, or None when every kernel is exhausted."""
        top = self.top()
        if not top:
            return None
        if len(top) == 1 or rng.random() >= self.explore:
            return top[0]
        return rng.choice(top[1:])


def attempt_rng(run_seed: int, index: int) -> random.Random:
    """The RNG of one attempt: the same on every resume."""
    return random.Random(f"tik-agent:{run_seed}:{index}")
