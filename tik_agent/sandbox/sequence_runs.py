"""Run one case of the ``sequences`` layout: the full launch and, for invariance
cases, every probe launch of :func:`tik_agent.spec.sequences.probe_launches`.

Like the row harness it produces raw outputs only; the trusted side rebuilds
the same launch plan from the case and judges the bits
(:mod:`tik_agent.judge.sequence_checks`).
"""

from __future__ import annotations

from tik_agent.bits import digest
from tik_agent.sandbox import launches
from tik_agent.sandbox.wire import CaseOutputs
from tik_agent.spec.sequences import build_launch, case_launch, probe_launches


def run_sequence_case(runner, case) -> CaseOutputs:
    """``runner`` is the :class:`~tik_agent.sandbox.harness.Runner` calling the entry."""
    spec = runner.spec
    inputs = build_launch(spec, case, case_launch(spec, case), runner.device)
    probes = {}
    with launches.recording() as rec:
        full = runner.call(case, inputs, 0)
        again = None if case.runs_once else runner.call(case, inputs, 1)
        if case.invariance:
            for n, launch in enumerate(probe_launches(spec, case)):
                probe_inputs = build_launch(spec, case, launch, runner.device)
                probes[launch.label] = runner.call(case, probe_inputs, n % 2)
    return CaseOutputs(full, again, None, [], dict(rec), digest(inputs), probes)
