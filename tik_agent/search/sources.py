"""Nothing is evaluated twice in a run: each source (compared by :func:`pyparse.source_key`,
without comments, blank lines or indentation width) and the attempt or kernel that had it first,
from any parent.  A repeat is a duplicate that names the earlier one and its outcome."""

from __future__ import annotations

from tik_agent import pyparse
from tik_agent.run.journal import AttemptRecord
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import SEED_TAG


class Sources:
    """Not thread-safe: the loop calls it under its own lock."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}

    def claim(self, source: str, owner: str) -> str:
        """Record ``owner`` for ``source`` unless it was seen; returns who had it first."""
        return self._first.setdefault(pyparse.source_key(source), owner)

    def keys(self) -> frozenset[str]:
        return frozenset(self._first)

    def forget(self, owner: str) -> None:
        """An attempt redone from scratch (its slot was lost): its source is not taken yet."""
        for key in [k for k, v in self._first.items() if v == owner]:
            del self._first[key]


def earlier(owner: str, parent: str, records: list[AttemptRecord]) -> str:
    """What is known of the attempt or kernel that had a source first."""
    if owner == parent:
        return f"its parent {parent}"
    if owner == SEED_TAG:
        return "the seed"
    done = next((r for r in records if r.attempt_id == owner), None)
    if done is None:
        return f"{owner} (still being evaluated)"
    text = f"{owner} from {done.parent_id}, {done.outcome.value}"
    if done.outcome is Outcome.ACCEPTED:
        text += f", {done.speedup:.3f}x the seed"
    return text
