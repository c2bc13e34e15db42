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
  the full batch.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
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

    @property
    def id(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        kind = ("hinv" if self.hidden else "inv") if self.invariance else "hid" if self.hidden else "par"
        return f"{kind}:M={self.m},{dims}:{self.dtype}:{self.regime}:s{self.seed}"

    def to_dict(self) -> dict:
        return {
            "m": self.m, "dims": dict(self.dims), "dtype": self.dtype, "regime": self.regime,
            "seed": self.seed, "invariance": self.invariance, "subbatches": self.subbatches,
            "hidden": self.hidden,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "Case":
        return cls(int(d["m"]), dict(d["dims"]), d["dtype"], d["regime"], int(d["seed"]),
                   bool(d["invariance"]), int(d["subbatches"]), bool(d.get("hidden", False)))


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


def subbatches(case: Case) -> list[SubBatch]:
    """Random row subsets (shuffled) and one prefix, all seeded by the case."""
    import torch

    if not case.invariance or case.m < 2:
        return []
    gen = torch.Generator().manual_seed(case_seed(case) ^ 0x5EED)
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
    return [Case(m, dims, dtype, spec.parity.regimes[i % len(spec.parity.regimes)], spec.parity.seeds[0], hidden=True)
            for i, dtype in enumerate(spec.parity.dtypes)]


def workload_invariance_case(spec: KernelSpec, device: str) -> Case:
    """Batch invariance at the largest timing shape of the device: the grid
    then spans batch sizes from 1 up to the largest workload batch."""
    cell = max(spec.workload_for(device), key=lambda c: (c.m, sorted(c.dims.items())))
    return Case(cell.m, dict(cell.dims), cell.dtype, "normal", spec.parity.seeds[0],
                invariance=True, subbatches=1, hidden=True)


def evaluation_cases(spec: KernelSpec, device: str) -> list[Case]:
    return parity_cases(spec) + hidden_cases(spec) + [workload_invariance_case(spec, device)]
