"""Where a case puts an input's values in memory: the row layout's inputs and the
sequences layout's are both laid out here (:func:`place`), in the classes of
:mod:`tik_agent.spec.views`."""

from __future__ import annotations

from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.views import HUGE, lay_out


def place(spec: KernelSpec, case, name: str, t):
    """Input ``name``'s values in the case's layout: its class when the input's domain
    declares it (an upstream gradient takes every class: autograd hands gradients over
    as they come), or the huge form the case names for this input."""
    if not case.layout:
        return t
    kind, _, target = case.layout.partition(":")
    if kind in HUGE:
        return lay_out(t, kind) if target == name else t
    declared = spec.domain.layouts_of(name) if spec.domain else ("contiguous",)
    is_input = any(i.name == name for i in spec.inputs)
    return lay_out(t, kind) if kind in declared or not is_input else t
