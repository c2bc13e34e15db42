"""Per-slot and per-node counts of this session's evaluations, for the live view and summary.json.

The loop notes every evaluation a slot finished (and every slot lost in the
middle of one); :meth:`Throughput.nodes` groups them by node with the slots the
executor has now, and the evaluations per minute of the session's wall time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class SlotUse:
    slot: str
    node: str
    evaluations: int = 0
    busy_s: float = 0.0
    lost: int = 0


@dataclass(frozen=True)
class NodeUse:
    node: str
    slots: list[str]          # the node's live slots, and those that evaluated there this session
    evaluations: int
    busy_s: float
    lost: int
    per_min: float

    def to_dict(self) -> dict:
        return {"node": self.node, "slots": list(self.slots), "evaluations": self.evaluations,
                "busy_s": round(self.busy_s, 1), "lost": self.lost, "evaluations_per_min": round(self.per_min, 2)}


class Throughput:
    def __init__(self, placement: list[tuple[str, str]]):
        self._lock = threading.Lock()
        self._uses: dict[tuple[str, str], SlotUse] = {}
        for slot, node in placement:
            self._use(slot, node)

    def _use(self, slot: str, node: str) -> SlotUse:
        return self._uses.setdefault((slot, node), SlotUse(slot, node))

    def note(self, slot: str, node: str, seconds: float) -> None:
        with self._lock:
            use = self._use(slot, node)
            use.evaluations += 1
            use.busy_s += seconds

    def lost(self, slot: str, node: str) -> None:
        with self._lock:
            self._use(slot, node).lost += 1

    def nodes(self, placement: list[tuple[str, str]], wall_s: float) -> list[NodeUse]:
        with self._lock:
            for slot, node in placement:
                self._use(slot, node)
            uses = list(self._uses.values())
        out = []
        for node in dict.fromkeys(u.node for u in uses):
            mine = [u for u in uses if u.node == node]
            evaluations = sum(u.evaluations for u in mine)
            out.append(NodeUse(node, [u.slot for u in mine], evaluations, sum(u.busy_s for u in mine),
                               sum(u.lost for u in mine), 60.0 * evaluations / wall_s if wall_s > 0 else 0.0))
        return out
