"""The parity grid and its inputs: which cases run, and what data they see.

Everything here is a pure function of the spec and a case's seed, so the
trusted parent, the reference worker and the candidate's sandbox all build
identical inputs without shipping tensors between processes.

Grid shape (cost matters: every case runs under the CPU interpreter):

* one *parity case* per (dtype, dims combination, regime, seed); the batch
  size walks round-robin through ``parity.batch_sizes`` so every size, odd
  ones included, meets every dtype;
* one *invariance case* per (dtype, dims combination) at the largest batch
  size, cycling through the regimes: each row is also run alone, and random
  sub-batches (shuffled rows, and a prefix view) are run and compared with
  the full batch;
* *above-grid cases*: batch sizes beyond the largest workload M (on the CPU
  at least 65, 128 and 257), the first at the largest dims, the others at the
  smallest so that they stay cheap,
  each a parity and an invariance case (a sample of rows run alone): a
  launcher that switches strategy for large batches meets them.

Cases drawn per evaluation (secret M values, sizes around the literals a
candidate compares with) are built here too, by :func:`extra_case`, but
chosen on the trusted side (:mod:`tik_agent.judge.plan`).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Mapping

from tik_agent.spec.schema import KernelSpec, WorkloadCell

# Scale of the "large" regime per dtype: big enough to exercise the exponent
# range, small enough that x*x summed over a row stays finite in fp32.
LARGE_SCALE = {"float32": 1e15, "bfloat16": 1e15, "float16": 1e4}
SPECIAL_FRACTION = 0.03


@dataclass(frozen=True)
class Case:
    """One parity case: the inputs are a pure function of these fields."""

    m: int
    dims: Mapping[str, int]
    dtype: str
    regime: str
    seed: int
    invariance: bool = False
    subbatches: int = 0
    hidden: bool = False  # shapes the agent never sees (held-out dims)
    rows_sample: int = 0  # rows run alone: 0 = every row, else this many (seeded sample)
    # Why the case exists (grid, hidden, above-grid, drawn, literal): reported, not part of the id.
    origin: str = field(default="grid", compare=False)

    @property
    def id(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        kind = ("hinv" if self.hidden else "inv") if self.invariance else "hid" if self.hidden else "par"
        rows = f":r{self.rows_sample}" if self.rows_sample else ""
        return f"{kind}:M={self.m},{dims}:{self.dtype}:{self.regime}:s{self.seed}{rows}"

    def to_dict(self) -> dict:
        return {
            "m": self.m, "dims": dict(self.dims), "dtype": self.dtype, "regime": self.regime,
            "seed": self.seed, "invariance": self.invariance, "subbatches": self.subbatches,
            "hidden": self.hidden, "rows_sample": self.rows_sample, "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "Case":
        return cls(int(d["m"]), dict(d["dims"]), d["dtype"], d["regime"], int(d["seed"]),
                   bool(d["invariance"]), int(d["subbatches"]), bool(d.get("hidden", False)),
                   int(d.get("rows_sample", 0)), str(d.get("origin", "grid")))


@dataclass(frozen=True)
class SubBatch:
    """Rows ``index`` of the full batch run as their own launch."""

    index: tuple[int, ...]
    prefix: bool = False  # run as a view of the full input instead of a copy


def dims_combinations(spec: KernelSpec) -> list[dict[str, int]]:
    names = sorted(spec.dims)
    return [dict(zip(names, values)) for values in itertools.product(*(spec.dims[n] for n in names))]


def parity_cases(spec: KernelSpec) -> list[Case]:
    grid = spec.parity
    cases = []
    combos = dims_combinations(spec)
    sizes = itertools.cycle(grid.batch_sizes)
    for dtype in grid.dtypes:
        for dims in combos:
            for regime in grid.regimes:
                for seed in grid.seeds:
                    cases.append(Case(next(sizes), dims, dtype, regime, seed))
    regimes = itertools.cycle(grid.regimes)
    largest = max(grid.batch_sizes)
    for dtype in grid.dtypes:
        for dims in combos:
            cases.append(Case(largest, dims, dtype, next(regimes), grid.seeds[0],
                              invariance=True, subbatches=grid.subbatches))
    return cases


def workload_case(cell: WorkloadCell, seed: int) -> Case:
    """A timing input for a workload cell (normal regime)."""
    return Case(cell.m, dict(cell.dims), cell.dtype, "normal", seed)


def case_seed(case: Case) -> int:
    """A 63-bit RNG seed derived from everything that identifies the case."""
    digest = hashlib.sha256(f"{case.id}|{case.seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def rows_alone(case: Case) -> list[int]:
    """The rows run on their own for an invariance case: all of them, or a
    seeded sample that always holds the first and the last row."""
    if not case.invariance:
        return []
    if not case.rows_sample or case.rows_sample >= case.m:
        return list(range(case.m))
    import torch

    gen = torch.Generator().manual_seed(case_seed(case) ^ 0x0A1F)
    middle = (torch.randperm(case.m - 2, generator=gen)[: max(0, case.rows_sample - 2)] + 1).tolist()
    return sorted({0, case.m - 1, *(int(i) for i in middle)})


def subbatches(case: Case) -> list[SubBatch]:
    """Random row subsets (shuffled) and one prefix, all seeded by the case."""
    import torch

    if not case.invariance or case.m < 2:
        return []
    gen = torch.Generator().manual_seed(case_seed(case) ^ 0x5EED)
    if case.rows_sample:
        # A large case: sub-batches as small as the rows-alone sample (cost is per row).
        size = min(case.rows_sample, case.m - 1)
        perm = torch.randperm(case.m, generator=gen)[:size]
        return [SubBatch(tuple(int(i) for i in perm)), SubBatch(tuple(range(size)), prefix=True)]
    out = []
    for _ in range(case.subbatches):
        size = int(torch.randint(1, case.m, (1,), generator=gen))
        perm = torch.randperm(case.m, generator=gen)[:size]
        out.append(SubBatch(tuple(int(i) for i in perm)))
    out.append(SubBatch(tuple(range((case.m + 1) // 2)), prefix=True))
    return out


def make_inputs(spec: KernelSpec, case: Case, device: str = "cpu") -> list:
    """The entry's positional inputs for ``case``, generated on the CPU and moved."""
    import torch

    if spec.layout == "sequences":
        from tik_agent.spec import sequences

        return sequences.make_inputs(spec, case, device)
    gen = torch.Generator().manual_seed(case_seed(case))
    tensors = []
    # Upstream gradients follow the inputs in the same stream: the forward
    # inputs of a case are the same with or without a backward entry.
    for inp in spec.checked_inputs:
        shape = inp.resolve_shape(case.m, case.dims)
        dtype_name = inp.resolve_dtype(case.dtype)
        dtype = getattr(torch, dtype_name)
        if not inp.is_float:
            high = case.dims[inp.high] if isinstance(inp.high, str) else inp.high
            t = torch.randint(0, high, shape, generator=gen, dtype=dtype)
        else:
            base = torch.randn(shape, generator=gen, dtype=torch.float32)
            if inp.batched:
                base = _apply_regime(base, case.regime, dtype_name, gen)
            t = base.to(dtype)
            if inp.batched and case.regime == "special":
                t = _inject_special(t, gen)
        tensors.append(t.to(device))
    return tensors


def _apply_regime(base, regime: str, dtype_name: str, gen):
    if regime == "zero":
        return base * 0.0  # keeps the sign: negative draws become -0.0
    if regime == "large":
        return base * LARGE_SCALE[dtype_name]
    return base


def _inject_special(t, gen):
    """Replace a few entries by NaN, +-inf, -0.0, subnormals and the largest finite."""
    import torch

    info = torch.finfo(t.dtype)
    specials = torch.tensor(
        [float("nan"), float("inf"), float("-inf"), -0.0, info.smallest_normal / 4,
         -info.smallest_normal / 2, info.max, -info.max],
        dtype=t.dtype,
    )
    flat = t.reshape(-1).clone()
    count = max(1, int(flat.numel() * SPECIAL_FRACTION))
    # Distinct positions: index_put with duplicate indices has no defined winner.
    where = torch.randperm(flat.numel(), generator=gen)[:count]
    which = torch.randint(0, len(specials), (count,), generator=gen)
    flat[where] = specials[which]
    return flat.view(t.shape)


def hidden_cases(spec: KernelSpec) -> list[Case]:
    """Shapes the agent never sees: dims between or beyond the spec's, odd batch.

    A candidate that special-cases the published dims (shape overfitting)
    meets these in every evaluation without having been told them.
    """
    dims = {}
    for name, values in spec.dims.items():
        lo, hi = min(values), max(values)
        dims[name] = ((lo + hi) // 2) | 1 if hi - lo > 2 else hi + 13
    if spec.layout == "sequences":  # head shapes must stay valid: only lengths and pages are held out
        from tik_agent.spec import sequences

        dims = sequences.hidden_dims(spec, dims_combinations(spec)[0])
    m = max(b for b in spec.parity.batch_sizes) + 2
    m |= 1
    return [Case(m, dims, dtype, spec.parity.regimes[i % len(spec.parity.regimes)], spec.parity.seeds[0], hidden=True,
                 origin="hidden")
            for i, dtype in enumerate(spec.parity.dtypes)]


def workload_invariance_case(spec: KernelSpec, device: str) -> Case:
    """Batch invariance at the largest timing shape of the device: the grid
    then spans batch sizes from 1 up to the largest workload batch."""
    cell = max(spec.workload_for(device), key=lambda c: (c.m, sorted(c.dims.items())))
    return Case(cell.m, dict(cell.dims), cell.dtype, "normal", spec.parity.seeds[0],
                invariance=True, subbatches=1, hidden=True, origin="hidden")


# Batch sizes every CPU evaluation covers above its workload (the floor).
CPU_ABOVE_GRID = (65, 128, 257)
# Rows of a large case that also run alone: a sample, so a big batch stays cheap.
ABOVE_GRID_ROWS = 8
# Largest batch a case may have on each device: the interpreter pays per row.
MAX_BATCH = {"cpu": 8193, "cuda": 1 << 17}


def largest_batch(spec: KernelSpec, device: str) -> int:
    """The largest M the fixed grid and the device's workload use."""
    return max([*spec.parity.batch_sizes, *(c.m for c in spec.workload_for(device))])


def smallest_dims(spec: KernelSpec) -> dict[str, int]:
    return {name: min(values) for name, values in spec.dims.items()}


def fp32_first(spec: KernelSpec) -> list[str]:
    """The grid's dtypes, float32 first: bf16 outputs hide reduction-order changes."""
    dtypes = list(spec.parity.dtypes)
    return sorted(dtypes, key=lambda d: d != "float32")


def above_grid_sizes(spec: KernelSpec, device: str) -> list[int]:
    """Row seeds on the CPU meet 65, 128 and 257 rows; otherwise L+1, 2L and 4L+1 for the
    largest batch L.  In the sequences layout a batch entry is a whole sequence whose
    invariance case re-runs every token in about 20 launches: under the interpreter
    one size above the largest batch (L+1) is what an evaluation can afford (257
    attention sequences would cost hours); on a GPU the relative rule holds."""
    top = largest_batch(spec, device)
    if spec.layout == "sequences" and device == "cpu":
        sizes = {top + 1}
    elif device == "cpu" and top < CPU_ABOVE_GRID[0]:
        sizes = set(CPU_ABOVE_GRID)
    else:
        sizes = {top + 1, 2 * top, 4 * top + 1}
    return sorted(m for m in sizes if top < m <= MAX_BATCH.get(device, MAX_BATCH["cuda"]))


def above_grid_cases(spec: KernelSpec, device: str) -> list[Case]:
    """Parity and invariance above the largest workload batch, at the smallest dims,
    in float32 (where reduction-order changes show; other dtypes meet large
    batches in the drawn cases)."""
    dtype = fp32_first(spec)[0]
    largest = {name: max(values) for name, values in spec.dims.items()}
    # The first size at the largest dims: a chunk switch shows only where a row
    # spans more than one chunk; the larger sizes at the smallest dims (cost).
    return [extra_case(spec, m, largest if i == 0 else smallest_dims(spec), dtype, "normal", spec.parity.seeds[0],
                       origin="above-grid", hidden=False)
            for i, m in enumerate(above_grid_sizes(spec, device))]


def extra_case(spec: KernelSpec, m: int, dims: Mapping[str, int], dtype: str, regime: str, seed: int,
               origin: str, hidden: bool = True) -> Case:
    """An invariance case at batch ``m``; above ``ABOVE_GRID_ROWS`` rows a *large* case:
    one full batch (no second run: parity with the seed catches unwritten
    output there), a sample of rows alone and two small sub-batches."""
    return Case(m, dict(dims), dtype, regime, seed, invariance=True, subbatches=1, hidden=hidden,
                rows_sample=ABOVE_GRID_ROWS if m > ABOVE_GRID_ROWS else 0, origin=origin)


def evaluation_cases(spec: KernelSpec, device: str) -> list[Case]:
    """The fixed cases of every evaluation (the cached reference holds their outputs)."""
    return unique(parity_cases(spec) + hidden_cases(spec) + [workload_invariance_case(spec, device)]
                  + above_grid_cases(spec, device))


def unique(cases: list[Case]) -> list[Case]:
    """Cases with distinct ids, first occurrence kept (outputs are keyed by id)."""
    seen: set[str] = set()
    out = []
    for case in cases:
        if case.id not in seen:
            seen.add(case.id)
            out.append(case)
    return out


# Cases an evaluation (or a check-seed) adds to the fixed grid: sizes around literals, drawn sizes.
PER_EVALUATION = ("literal", "drawn")


def count_text(origins, adds: str = "this evaluation adds") -> str:
    """What a count of cases counts, from their origins: '61 fixed parity cases', or
    '66 parity cases (61 fixed + 5 this evaluation adds)'."""
    origins = list(origins)
    extra = sum(1 for o in origins if o in PER_EVALUATION)
    fixed = len(origins) - extra
    if not extra:
        return f"{fixed} fixed parity cases"
    return f"{len(origins)} parity cases ({fixed} fixed + {extra} {adds})"


def describe(cases: list[Case]) -> str:
    """How many cases and why, e.g. '97 cases: 90 grid, 3 hidden, 3 above-grid (M=65,128,257), 1 drawn'."""
    groups: dict[str, list[int]] = {}
    for case in cases:
        groups.setdefault(case.origin, []).append(case.m)
    parts = []
    for origin, ms in groups.items():
        shown = f" (M={','.join(str(m) for m in sorted(set(ms)))})" if origin in ("above-grid", "literal") else ""
        parts.append(f"{len(ms)} {origin}{shown}")
    return f"{len(cases)} cases: " + ", ".join(parts)
