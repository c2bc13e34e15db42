"""``tik-agent check-seed``: is a seed correct, deterministic and batch invariant?

The seed is the user's own trusted code, so it runs in this process.  It runs
the cases ``optimize``'s audit of the seed runs, with the same checks: the
fixed grid (parity, hidden shapes, the workload invariance case, batch sizes
above the largest workload M), the sizes around every literal the seed
compares with, and batch sizes drawn for this check (as each evaluation draws
its own).  Correctness is also judged against the seed's float64 reference
(when it has one) on the regimes where a reference is meaningful.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from tik_agent.backends import device as devices
from tik_agent.sandbox import launches
from tik_agent.bits import digest
from tik_agent.spec.cases import Case, case_kwargs, describe, make_inputs, unique
from tik_agent.spec.grid import evaluation_cases
from tik_agent.errors import SpecError
from tik_agent.judge.bitcheck import Check
from tik_agent.judge.parity import CaseResult, judge_reference, judge_self
from tik_agent.sandbox.wire import as_outputs
from tik_agent.spec.schema import KernelSpec, Tolerance

log = logging.getLogger(__name__)
progress = logging.getLogger("tik_agent.progress")
PROGRESS_S = 10.0  # at most one progress line this often (and one for the first case)

# Regimes where a float64 reference is meaningful.  With NaN/inf entries the
# special values differ by convention (which NaN, inf - inf), and in the large
# regime cancellation makes a relative tolerance on the output meaningless
# (matmul): those regimes are checked on bits only (determinism, invariance).
REFERENCE_REGIMES = ("normal", "zero")


@dataclass
class SeedReport:
    spec: KernelSpec
    device: str
    results: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0
    reference_used: bool = False
    planned: list[Case] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C: the results so far, the rest not run

    @property
    def cases_text(self) -> str:
        """How many cases, and why each group is there."""
        return describe(self.planned)

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(r.passed for r in self.results)

    @property
    def first_failure(self) -> CaseResult | None:
        return next((r for r in self.results if not r.passed), None)

    def to_dict(self) -> dict:
        failure = self.first_failure
        return {"seed": self.spec.name, "device": self.device, "passed": self.passed,
                "interrupted": self.interrupted, "planned_cases": len(self.planned), "cases_run": len(self.results),
                "planned": self.cases_text, "seconds": round(self.seconds, 3), "reference_used": self.reference_used,
                "checks_passed": self.counts_by_check(),
                "first_failure": failure.to_dict() if failure is not None else None,
                "results": [r.to_dict() for r in self.results]}

    def counts_by_check(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.results:
            for c in r.checks:
                counts[c] = counts.get(c, 0) + 1
        return counts


def load_reference(spec: KernelSpec) -> Callable | None:
    if spec.reference is None:
        return None
    mod_spec = importlib.util.spec_from_file_location(f"_tik_reference_{spec.name}", spec.reference)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: report which and why
        raise SpecError(f"{spec.reference}: import failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, "reference", None)
    if not callable(fn):
        raise SpecError(f"{spec.reference}: defines no function 'reference'")
    return fn


def audit_cases(spec: KernelSpec, device: str) -> list[Case]:
    """The cases an evaluation of the seed runs (its drawn sizes drawn afresh)."""
    from tik_agent.judge.literals import batch_sizes_around, compared_literals, untestable_literal
    from tik_agent.judge.plan import per_evaluation_cases

    literals = compared_literals(spec.source.read_text(), spec.source.name)
    problem = untestable_literal(literals, device)
    if problem is not None:
        raise SpecError(f"{spec.source}:{problem[0]}: {problem[1]}")
    return unique(evaluation_cases(spec, device) + per_evaluation_cases(spec, device, batch_sizes_around(literals)))


def check_seed(spec: KernelSpec, device: str, cases: list[Case] | None = None, stop_at_first: bool = True) -> SeedReport:
    from tik_agent.sandbox.harness import Runner, load_seed_entry

    devices.prepare(device)
    launches.install()
    entry = load_seed_entry(spec)
    reference = load_reference(spec)
    runner = Runner(entry, spec, device)
    planned = cases if cases is not None else audit_cases(spec, device)
    report = SeedReport(spec, device, reference_used=reference is not None, planned=planned)
    start = reported = time.perf_counter()
    try:
        for n, case in enumerate(planned, 1):
            now = time.perf_counter()
            if n == 1 or now - reported >= PROGRESS_S:
                reported = now
                progress.info("%s: case %d/%d, %.0f s", spec.name, n, len(planned), now - start)
            result = _check_case(spec, case, runner, reference, device)
            report.results.append(result)
            log.debug("%s: %s", case.id, "ok" if result.passed else result.message)
            if not result.passed and stop_at_first:
                break
    except KeyboardInterrupt:
        report.interrupted = True
    report.seconds = time.perf_counter() - start
    return report


def _check_case(spec: KernelSpec, case: Case, runner, reference, device: str) -> CaseResult:
    # The expected input digest and the reference's inputs: one CPU copy of
    # what the runner regenerates on the device.
    cpu_inputs = make_inputs(spec, case, "cpu")
    expected_digest = digest(cpu_inputs)
    try:
        out = runner.run_case(case)
    except Exception as exc:  # a crash of the kernel is this case's failure
        return _crash(case, exc)
    result = judge_self(spec, case, out, spec.source, expected_digest)
    # Special integer values have the seed's defined result (in words in the domain), not the reference's.
    if reference is not None and case.regime in REFERENCE_REGIMES and not case.special:
        n = len(spec.outputs)
        expected = reference(*cpu_inputs[: len(spec.inputs)], **case_kwargs(spec, case))
        if spec.backward is None:
            return judge_reference(case, out, expected, spec.tolerances[case.dtype], result)
        outputs = as_outputs(out.full)
        result = judge_reference(case, replace(out, full=outputs[:n]), expected, spec.tolerances[case.dtype], result)
        grads = reference_gradients(spec, reference, cpu_inputs, case_kwargs(spec, case))
        rtol, atol = spec.backward.tolerances.get(case.dtype, (spec.tolerances[case.dtype].rtol,
                                                               spec.tolerances[case.dtype].atol))
        result = judge_reference(case, replace(out, full=outputs[n:]), grads, Tolerance(rtol, atol), result)
        result = replace(result, checks=tuple(dict.fromkeys(result.checks)))
    return result


def reference_gradients(spec: KernelSpec, reference: Callable, cpu_inputs: list, kwargs: dict | None = None) -> tuple:
    """float64 gradients of the reference by autograd, for the backward's sanity check."""
    import torch

    n = len(spec.inputs)
    leaves = [t.double().requires_grad_() if i.name in spec.backward.wrt else t
              for i, t in zip(spec.inputs, cpu_inputs[:n])]
    outs = as_outputs(reference(*leaves, **(dict(spec.kwargs) if kwargs is None else kwargs)))
    wrt = [t for i, t in zip(spec.inputs, leaves) if i.name in spec.backward.wrt]
    grads = torch.autograd.grad(outs, wrt, [g.double() for g in cpu_inputs[n:]], allow_unused=True)
    order = [i.name for i in spec.inputs if i.name in spec.backward.wrt]
    by_name = {name: torch.zeros_like(t) if g is None else g for name, t, g in zip(order, wrt, grads)}
    return tuple(by_name[name] for name in spec.backward.wrt)


def _crash(case: Case, exc: Exception) -> CaseResult:
    return CaseResult(case.id, Check.OUTPUT, f"the kernel raised {type(exc).__name__}: {str(exc)[:500]}")
