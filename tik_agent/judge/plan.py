"""What one evaluation does that the candidate cannot predict, drawn on the trusted side.

A secret per evaluation (``os.urandom``, never written where the worker can
read it) seeds every choice below:

* the number of warm-up rounds (``warmup`` or one more; on the CPU one fewer
  or ``warmup``);
* where, among the timing rounds of each cell, an extra untimed call of the
  candidate is made (a re-check whose position is unknown: before any round,
  between two, or after the last);
* the inputs of every call (their case seeds), for the candidate and for the
  kernels it is timed against: the worker gets seeds, never the secret;
* a few batch sizes the agent was never shown (one inside the grid's range,
  one above it), at random dims, dtype and regime; with a declared domain one
  more case at dimensions near powers of two, with keyword values, a layout and
  a dtype combination drawn from the domain;
* for the graph phase (cuda, or its CPU rehearsal): each cell's base seed, the
  fill seed of every replay round and the rounds whose outputs are digested
  (:data:`GRAPH_CHECKED` of them).

The worker digests the candidate's output of every call; the seed's digests on
the same inputs come from a separate reference worker
(:func:`tik_agent.judge.evaluate.evaluate`), never from the candidate's process.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field

from tik_agent.spec.cases import MAX_BATCH, Case, extra_case, fp32_first, largest_batch, unique
from tik_agent.spec.dims import dims_combinations, smallest_dims
from tik_agent.spec.domain_cases import drawn_domain_case
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

DRAWN_CASES = 2
GRAPH_CHECKED = 2


@dataclass(frozen=True)
class CallSlot:
    """One call of the candidate in a timing cell, as the judge names it."""

    index: int  # 1-based, in call order within the cell
    kind: str   # "warm-up", "timed" or "re-check"
    round: int | None = None

    def describe(self, cell: str) -> str:
        where = f", round {self.round + 1}" if self.round is not None else ""
        return f"{'timed call' if self.kind == 'timed' else self.kind + ' call'} {self.index} of cell {cell} ({self.kind}{where})"


@dataclass
class EvalPlan:
    rounds: int
    warmup: int
    recheck_at: dict[str, int]                # cell -> the round the extra re-check precedes (== rounds: after the last)
    seeds: dict[str, dict[str, list[int]]]    # cell -> kernel -> input seeds in call order
    extra_cases: list[Case] = field(default_factory=list)
    graph: dict[str, dict] | None = None      # cell -> {"base", "fill": [seed per round], "checked": [rounds]}

    def slots(self, cell: str) -> list[CallSlot]:
        """The candidate's calls in one cell, in the order the worker makes them."""
        kinds: list[tuple[str, int | None]] = [("warm-up", None)] * self.warmup
        for r in range(self.rounds + 1):
            if self.recheck_at[cell] == r:
                kinds.append(("re-check", None))
            if r < self.rounds:
                kinds.append(("timed", r))
        return [CallSlot(i + 1, kind, rnd) for i, (kind, rnd) in enumerate(kinds)]

    def to_request(self) -> dict:
        req = {"rounds": self.rounds, "warmup": self.warmup, "recheck_at": dict(self.recheck_at),
               "seeds": {c: {k: list(v) for k, v in s.items()} for c, s in self.seeds.items()}}
        if self.graph is not None:
            req["graph"] = {c: dict(g) for c, g in self.graph.items()}
        return req

    def candidate_seeds(self) -> dict[str, list[int]]:
        return {cell: list(s["candidate"]) for cell, s in self.seeds.items()}


def secret_rng() -> random.Random:
    return random.Random(int.from_bytes(os.urandom(32), "little"))


def draw_plan(spec: KernelSpec, device: str, rounds: int, warmup: int, kernels: list[str],
              rng: random.Random | None = None, graph_rounds: int | None = None) -> EvalPlan:
    """Warm-ups, re-check positions and input seeds for the timing phase; with ``graph_rounds``
    also the graph phase's seeds (that many replay rounds per cell)."""
    rng = rng or secret_rng()
    cells = [c.name for c in spec.workload_for(device)]
    # One more warm-up or not; on the CPU one fewer or not (the interpreter compiles
    # nothing on a first call, and each warm-up costs a call of every kernel and a digest).
    low = max(0, warmup - 1) if device == "cpu" else warmup
    drawn_warmup = rng.randint(low, low + 1)
    recheck_at = {cell: rng.randint(0, rounds) for cell in cells}
    seeds: dict[str, dict[str, list[int]]] = {}
    for cell in cells:
        per_kernel = {}
        for name in kernels:
            calls = drawn_warmup + rounds + (1 if name == "candidate" else 0)
            per_kernel[name] = [rng.getrandbits(62) for _ in range(calls)]
        seeds[cell] = per_kernel
    graph = None
    if graph_rounds:
        graph = {cell: {"base": rng.getrandbits(62), "fill": [rng.getrandbits(62) for _ in range(graph_rounds)],
                        "checked": sorted(rng.sample(range(graph_rounds), min(GRAPH_CHECKED, graph_rounds)))}
                 for cell in cells}
    return EvalPlan(rounds, drawn_warmup, recheck_at, seeds, graph=graph)


def drawn_cases(spec: KernelSpec, device: str, rng: random.Random | None = None) -> list[Case]:
    """Batch sizes the agent never sees: one inside the grid's range (random dims), one
    above it (up to twice the largest batch, at the smallest dims: cost is per row and chunk)."""
    rng = rng or secret_rng()
    top = largest_batch(spec, device)
    grid = set(spec.parity.batch_sizes)
    inside = [m for m in range(2, top + 1) if m not in grid] or list(range(1, top + 1))
    above_hi = min(2 * top, MAX_BATCH.get(device, MAX_BATCH["cuda"]))
    if spec.layout == "sequences" and device == "cpu":  # a batch entry is a whole sequence (see above_grid_sizes)
        above_hi = top + 1
    sizes = [rng.choice(inside), rng.randint(top + 1, max(top + 1, above_hi))]
    combos = dims_combinations(spec)
    cases = []
    for i, m in enumerate(sizes[:DRAWN_CASES]):
        dims = rng.choice(combos) if i == 0 else smallest_dims(spec)  # the large batch: cost is per row and chunk
        cases.append(extra_case(spec, m, dims, rng.choice(fp32_first(spec)), rng.choice(spec.parity.regimes),
                                rng.getrandbits(31), origin="drawn"))
    return cases


def literal_sizes(spec: KernelSpec, device: str, sizes: list[int]) -> list[int]:
    """The sizes around literals this device runs.  In the sequences layout on the CPU a
    batch entry is a whole sequence (see :func:`~tik_agent.spec.cases.above_grid_sizes`):
    sizes above the largest batch + 1 are left to a GPU evaluation, as the above-grid
    ones are (the attention seed itself compares head dims with 64 and 128, and 129
    sequences cost minutes a case under the interpreter).  No CPU timing shape reaches
    them, so a switch there cannot buy a CPU speedup."""
    if spec.layout != "sequences" or device != "cpu":
        return sizes
    cap = largest_batch(spec, device) + 1
    skipped = [m for m in sizes if m > cap]
    if skipped:
        log.info("sequences layout on the CPU: literal batch sizes %s are above %d and left to a GPU evaluation",
                 skipped, cap)
    return [m for m in sizes if m <= cap]


def literal_cases(spec: KernelSpec, sizes: list[int]) -> list[Case]:
    """float32 invariance cases at the smallest dims, one per batch size around a literal."""
    dtype = fp32_first(spec)[0]
    return unique([extra_case(spec, m, smallest_dims(spec), dtype, "normal", spec.parity.seeds[0],
                              origin="literal", hidden=False) for m in sizes])


def per_evaluation_cases(spec: KernelSpec, device: str, around: list[int],
                         rng: random.Random | None = None) -> list[Case]:
    """The cases one evaluation adds to the fixed grid: around the literals, and drawn (with
    a declared domain, one more at dimensions near powers of two, its keywords, layout and
    dtypes drawn too)."""
    rng = rng or secret_rng()
    drawn = drawn_cases(spec, device, rng)
    if spec.domain is not None and spec.domain.declared:
        drawn.append(drawn_domain_case(spec, device, rng))
    return unique(literal_cases(spec, literal_sizes(spec, device, around)) + drawn)
