"""The ``[dims]`` table's sizes as the parity grid crosses them: every combination, and the smallest."""

from __future__ import annotations

import itertools

from tik_agent.spec.schema import KernelSpec


def dims_combinations(spec: KernelSpec) -> list[dict[str, int]]:
    names = sorted(spec.dims)
    return [dict(zip(names, values)) for values in itertools.product(*(spec.dims[n] for n in names))]


def smallest_dims(spec: KernelSpec) -> dict[str, int]:
    return {name: min(values) for name, values in spec.dims.items()}
