"""The fixed cases of every evaluation, in the order they run: the parity grid, the
hidden shapes, the workload's invariance case, the batches above the grid
(:mod:`tik_agent.spec.cases`) and the declared domain's axes
(:mod:`tik_agent.spec.domain_cases`).  The cached reference holds their outputs;
an evaluation adds the cases it draws (:mod:`tik_agent.judge.plan`)."""

from __future__ import annotations

from tik_agent.spec.cases import (Case, above_grid_cases, hidden_cases, parity_cases, unique,
                                  workload_invariance_case)
from tik_agent.spec.domain_cases import domain_cases
from tik_agent.spec.schema import KernelSpec


def evaluation_cases(spec: KernelSpec, device: str) -> list[Case]:
    """The fixed cases of every evaluation (the cached reference holds their outputs)."""
    return unique(parity_cases(spec) + hidden_cases(spec) + [workload_invariance_case(spec, device)]
                  + above_grid_cases(spec, device) + domain_cases(spec, device))
