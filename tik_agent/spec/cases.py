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
chosen on the trusted side (:mod:`tik_agent.judge.plan`).  The cases of a
declared domain's axes are :mod:`tik_agent.spec.domain_cases`; the fixed grid
as a whole is :func:`tik_agent.spec.grid.evaluation_cases`.  A case's inputs may
take a layout class, other dtypes for some inputs, and integer special values
(:func:`make_inputs`, :func:`tik_agent.spec.input_layout.place`); its call, keyword values
(:func:`case_kwargs`).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Mapping

Scalar = int | float | bool | str

from tik_agent.spec import sequences
from tik_agent.spec.dims import dims_combinations, smallest_dims
from tik_agent.spec.input_layout import place
from tik_agent.spec.regimes import apply_regime, inject_special
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.workload import WorkloadCell



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
    # Why the case exists (grid, hidden, above-grid, drawn, literal, domain): reported, not part of the id.
    origin: str = field(default="grid", compare=False)
    # The domain's axes (tik_agent.spec.domain_cases); the defaults are the contiguous,
    # one-dtype, spec-keyword cases every grid had before, and leave their ids alone.
    layout: str = ""  # a layout class of tik_agent.spec.views, or "huge-rows:<input>" / "huge-columns:<input>"
    dtypes: Mapping[str, str] = field(default_factory=dict)    # inputs in another dtype than the case's
    kwargs: Mapping[str, Scalar] = field(default_factory=dict)  # keywords other than the spec's values
    special: bool = False  # integer inputs hold their declared special values in some rows
    # The full batch runs once (no determinism run): a domain case about one axis, where
    # parity with the seed already rejects unwritten (poisoned) elements.  Not in the id.
    once: bool = field(default=False, compare=False)
    # The sequences layout: every sequence with context L and min(Q, L) new tokens (the
    # configuration survey's points, :func:`tik_agent.spec.sequences.lengths`), not drawn lengths.
    uniform: bool = False
    spare: int = 0  # a uniform case: cache blocks past the usual spare ones (spec.sequences.SPARE)
    pad: int = 0    # a uniform case: block-table columns past the usual one (spec.sequences.PAD)

    @property
    def runs_once(self) -> bool:
        """A large case, or one marked ``once``: no second run of the full batch."""
        return bool(self.rows_sample) or self.once

    @property
    def id(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        kind = ("hinv" if self.hidden else "inv") if self.invariance else "hid" if self.hidden else "par"
        rows = f":r{self.rows_sample}" if self.rows_sample else ""
        return f"{kind}:M={self.m},{dims}:{self.dtype}:{self.regime}:s{self.seed}{rows}{self._domain_id()}"

    def _domain_id(self) -> str:
        parts = [f":{self.layout}"] if self.layout else []
        parts += [f":{k}={v}" for k, v in sorted(self.dtypes.items())]
        parts += [f":{k}={v!r}" for k, v in sorted(self.kwargs.items())]
        geometry = (f":spare{self.spare}" if self.spare else "") + (f":pad{self.pad}" if self.pad else "")
        return "".join(parts) + (":special" if self.special else "") + (":uniform" if self.uniform else "") + geometry

    def to_dict(self) -> dict:
        return {
            "m": self.m, "dims": dict(self.dims), "dtype": self.dtype, "regime": self.regime,
            "seed": self.seed, "invariance": self.invariance, "subbatches": self.subbatches,
            "hidden": self.hidden, "rows_sample": self.rows_sample, "origin": self.origin,
            "layout": self.layout, "dtypes": dict(self.dtypes), "kwargs": dict(self.kwargs), "special": self.special,
            "once": self.once, "uniform": self.uniform, "spare": self.spare, "pad": self.pad,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "Case":
        return cls(int(d["m"]), dict(d["dims"]), d["dtype"], d["regime"], int(d["seed"]),
                   bool(d["invariance"]), int(d["subbatches"]), bool(d.get("hidden", False)),
                   int(d.get("rows_sample", 0)), str(d.get("origin", "grid")), str(d.get("layout", "")),
                   dict(d.get("dtypes", {})), dict(d.get("kwargs", {})), bool(d.get("special", False)),
                   bool(d.get("once", False)), bool(d.get("uniform", False)), int(d.get("spare", 0)),
                   int(d.get("pad", 0)))

    def dtype_of(self, name: str, declared: str) -> str:
        """The dtype of an input (or of the gradient of one) named ``name`` in this case."""
        return self.dtypes.get(name) or (self.dtype if declared == "float" else declared)


@dataclass(frozen=True)
class SubBatch:
    """Rows ``index`` of the full batch run as their own launch."""

    index: tuple[int, ...]
    prefix: bool = False  # run as a view of the full input instead of a copy


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


def make_inputs(spec: KernelSpec, case: Case, device: str = "cpu", *, on_device: bool = False) -> list:
    """The entry's positional inputs for ``case``, generated on the CPU and moved, then
    laid out as the case says (on the device: a move would make them contiguous).

    ``on_device`` draws a rows-layout case on ``device`` itself, from a generator of that
    device: a GPU draws a 2048 x 152064 logits tensor in milliseconds, one CPU thread in
    seconds.  The values are then the device's own stream, not the CPU's, so this is for
    inputs that only workers on the same device draw and compare (the timed calls and the
    graph phase's slots), never for parity cases.  On the CPU both ways draw the same bits."""
    import torch

    if spec.layout == "sequences":
        return sequences.make_inputs(spec, case, device)
    where = device if on_device else "cpu"
    gen = torch.Generator(device=where).manual_seed(case_seed(case))
    tensors = []
    # Upstream gradients follow the inputs in the same stream: the forward
    # inputs of a case are the same with or without a backward entry.
    for inp in spec.checked_inputs:
        shape = inp.resolve_shape(case.m, case.dims)
        dtype_name = case.dtype_of(inp.name, inp.dtype)
        dtype = getattr(torch, dtype_name)
        if not inp.is_float:
            values = spec.domain.values.get(inp.name) if spec.domain else None
            high = case.dims[inp.high] if isinstance(inp.high, str) else inp.high
            t = torch.randint(values.low if values else 0, high, shape, generator=gen, dtype=dtype, device=where)
            if case.special and values is not None and values.specials:
                t = _with_specials(t, [s.value for s in values.specials], gen)
        else:
            base = torch.randn(shape, generator=gen, dtype=torch.float32, device=where)
            if inp.batched:
                base = apply_regime(base, case.regime, dtype_name, gen)
            t = base.to(dtype)
            if inp.batched and case.regime == "special":
                t = inject_special(t, gen)
        tensors.append(place(spec, case, inp.name, t.to(device)))
    return tensors


# Share of the rows (at least one) whose integer inputs hold a special value in a `special` case.
SPECIAL_ROWS = 4


def _with_specials(t, specials: list[int], gen):
    """``t`` with one in :data:`SPECIAL_ROWS` of its elements (at least one, seeded) set to
    the special values in turn (an ignore index where a trainer pads)."""
    import torch

    flat = t.reshape(-1).clone()
    count = max(1, flat.numel() // SPECIAL_ROWS)
    where = torch.randperm(flat.numel(), generator=gen, device=gen.device)[:count]
    flat[where] = torch.tensor(specials, dtype=t.dtype, device=t.device).repeat(-(-count // len(specials)))[:count]
    return flat.view(t.shape)


def case_kwargs(spec: KernelSpec, case: Case) -> dict:
    """The keyword arguments of a judged call of ``case``: the spec's, with the case's values."""
    return {**spec.kwargs, **case.kwargs}


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
