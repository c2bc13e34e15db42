"""Which data each kernel's graph replays on, so that no answer is within the candidate's reach.

The graph phase (:mod:`tik_agent.sandbox.graphs`) replays the candidate's, the
seed's and the parent's graphs in alternating rounds, all in the candidate's
process, where a kernel body can turn a pointer into an integer and read any
buffer the process holds.  Had every kernel of a round replayed on the same
data, the seed's outputs would hold the exact answer while the candidate ran in
every round the seed went first.  So, for one workload cell:

* every kernel has input slots of its own (separate allocations of the same
  shapes) and its graph's own outputs;
* the candidate's replay of round r runs on that round's data (``fill[r]``,
  drawn by the trusted plan).  Every other kernel replays only on data the
  candidate has already replayed on: the oldest round it has not had yet, or,
  when there is none (it goes before the candidate in this round's order), the
  data of its own last replay again.  While the candidate computes ``fill[r]``,
  nothing in the process holds anyone's answer for it: not an output, not a
  temporary in a graph's memory pool, not an allocator block freed a moment ago;
* timing stays fair: each kernel replays the rounds' data in the same order, on
  allocations of the same shapes, every replay after a refill of its own
  inputs; the others trail the candidate by at most two rounds, and repeat a
  round where they would otherwise overtake it;
* the candidate's outputs of a round are kept (a copy of its own answer) until
  the seed has replayed the same data, then compared in bits; after the last
  round the seed replays, untimed, the rounds it has not had;
* in the rounds the plan digests, the candidate's outputs (and its inputs,
  unchanged or not) and the seed's outputs on the same data are digested for
  the parent, who compares both with the digests of the seed's own worker
  (:mod:`tik_agent.judge.graphcheck`): the seed that is timed here is checked
  too, not only trusted.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Sequence

from tik_agent.backends.graph_sets import InputSlots, same_bits
from tik_agent.backends.graph_timer import tensor_bytes
from tik_agent.bits import output_digest

CANDIDATE, SEED = "candidate", "seed"


def _kept(out):
    """A copy of one call's output (a tensor, or a tuple or list of them) that later replays leave alone."""
    if isinstance(out, (tuple, list)):
        return type(out)(_kept(o) for o in out)
    return out.clone() if hasattr(out, "clone") else out


class CellRounds:
    """The hooks of :func:`~tik_agent.backends.graph_timer.measure_cell` for one cell: what each
    replay runs on, and what is checked after it."""

    def __init__(self, slots: dict[str, InputSlots], fill: Sequence[int], checked: Iterable[int]):
        self.slots = slots
        self.fill = list(fill)
        self.checked = set(checked)
        self.pending = {k: deque() for k in slots if k != CANDIDATE}  # rounds the candidate had and k has not
        self.last: dict[str, int | None] = {k: None for k in slots}    # the round each kernel's slots hold
        self.fresh: dict[str, int | None] = {k: None for k in slots}   # this replay's round, None for a repeat
        self.kept: dict[int, list] = {}        # round -> the candidate's outputs, until the seed had that round
        self.digests: dict[str, dict] = {}     # the digested rounds: what the parent compares
        self.mismatch: list[int] | None = None  # the first [round, call] where the candidate differs from the seed
        self.out_bytes = 0

    def before(self, kernel: str, r: int) -> None:
        if kernel == CANDIDATE:
            data, fresh = r, r
        elif self.pending[kernel]:
            data = fresh = self.pending[kernel].popleft()
        else:
            data, fresh = self.last[kernel], None
        self._load(kernel, data)
        self.fresh[kernel] = fresh

    def _load(self, kernel: str, data: int | None) -> None:
        if data is None:  # before the candidate's first replay (no order puts another kernel there)
            self.slots[kernel].reset()
        else:
            self.slots[kernel].fill(self.fill[data])
        self.last[kernel] = data

    def after_replay(self, kernel: str, r: int, outputs: list) -> None:
        data = self.fresh[kernel]
        if data is None:
            return
        if kernel == CANDIDATE:
            self._candidate_replayed(data, outputs)
        elif kernel == SEED:
            self._seed_replayed(data, outputs)

    def _candidate_replayed(self, r: int, outputs: list) -> None:
        if r in self.checked:  # before the next refill can hide a write
            self.digests[str(r)] = {"inputs_changed": self.slots[CANDIDATE].changed(self.fill[r]),
                                    "out": [output_digest(o) for o in outputs]}
        if SEED in self.pending:
            self.kept[r] = [_kept(o) for o in outputs]
        for queue in self.pending.values():
            queue.append(r)

    def _seed_replayed(self, r: int, outputs: list) -> None:
        if not self.out_bytes:
            self.out_bytes = tensor_bytes(outputs[0]) if outputs else 0
        mine = self.kept.pop(r)
        if self.mismatch is None:
            bad = next((j for j, (a, b) in enumerate(zip(mine, outputs)) if not same_bits(a, b)), None)
            if bad is not None:
                self.mismatch = [r, bad]
        if r in self.checked:
            self.digests[str(r)]["seed_out"] = [output_digest(o) for o in outputs]

    def finish(self, replay: Callable[[str], list]) -> None:
        """After the last round, untimed: the seed replays the rounds the candidate had and it has not."""
        queue = self.pending.get(SEED, deque())
        while queue:
            data = queue.popleft()
            self._load(SEED, data)
            self._seed_replayed(data, replay(SEED))
