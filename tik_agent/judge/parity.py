"""Judge what a kernel produced: bits, invariance, determinism, integrity.

Runs on the trusted side over tensors a harness produced (possibly in another
process).  Each case yields a :class:`CaseResult`; the first failing check of
the first failing case is what a user sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tik_agent.bits import Mismatch
from tik_agent.judge.bitcheck import CaseFailure, Check, check_output, same_bits
from tik_agent.judge.sequence_checks import judge_probes
from tik_agent.sandbox.wire import CaseOutputs, as_outputs
from tik_agent.spec.backward import is_batched
from tik_agent.spec.cases import Case, rows_alone
from tik_agent.spec.schema import KernelSpec, Tolerance


@dataclass(frozen=True)
class CaseResult:
    case_id: str
    failed: Check | None = None
    message: str | None = None
    mismatch: Mismatch | None = None
    checks: tuple[str, ...] = field(default_factory=tuple)  # checks that ran and passed

    @property
    def passed(self) -> bool:
        return self.failed is None

    def to_dict(self) -> dict:
        return {
            "case": self.case_id, "passed": self.passed,
            "failed": self.failed.value if self.failed else None, "message": self.message,
            "mismatch": self.mismatch.to_dict() if self.mismatch else None, "checks": list(self.checks),
        }


def judge_self(spec: KernelSpec, case: Case, out: CaseOutputs, kernel_file: Path, inputs_digest: str) -> CaseResult:
    """Checks that need only the kernel's own outputs."""
    passed: list[str] = []
    try:
        check_output(spec, case, out.full, case.m, "full batch")
        passed.append(Check.OUTPUT.value)
        own = str(Path(kernel_file).resolve())
        foreign = {f: n for f, n in out.launches.items() if f != own}
        if foreign:
            raise CaseFailure(Check.LAUNCH, f"launched kernels defined outside the kernel file: {sorted(foreign)}")
        if out.launches.get(own, 0) == 0:
            raise CaseFailure(Check.LAUNCH, "no Triton kernel from the kernel file was launched")
        passed.append(Check.LAUNCH.value)
        if out.inputs_digest_after != inputs_digest:
            raise CaseFailure(Check.INPUTS, "inputs changed during the call")
        passed.append(Check.INPUTS.value)
        if not (case.runs_once and out.again is None):
            check_output(spec, case, out.again, case.m, "second run")
            same_bits(Check.DETERMINISM, "second run vs first", out.full, out.again, _names(spec))
            passed.append(Check.DETERMINISM.value)
        if case.invariance and spec.layout == "sequences":
            judge_probes(spec, case, out)
            passed.append(Check.INVARIANCE.value)
        elif case.invariance:
            _judge_invariance(spec, case, out)
            passed.append(Check.INVARIANCE.value)
    except CaseFailure as f:
        return CaseResult(case.id, f.check, f.message, f.mismatch, tuple(passed))
    return CaseResult(case.id, checks=tuple(passed))


def _judge_invariance(spec: KernelSpec, case: Case, out: CaseOutputs) -> None:
    import torch

    # Only per-row outputs can be invariant; a reduction over the batch (a
    # weight gradient) is held to the seed's bits at every batch size instead.
    keep = [n for n, o in enumerate(spec.checked_outputs) if is_batched(o)]
    names = tuple(_names(spec)[n] for n in keep)

    def rowwise(outputs) -> tuple:
        outputs = as_outputs(outputs)
        return tuple(_dense(outputs[n]) for n in keep)

    rows = rows_alone(case)
    check_output(spec, case, out.rows, len(rows), "rows run alone")
    full = rowwise(out.full)
    if len(rows) != case.m:  # a large batch runs a sample of its rows alone
        index = torch.tensor(rows, device=full[0].device)
        full = tuple(t.index_select(0, index) for t in full)
    same_bits(Check.INVARIANCE, "rows run alone vs full batch", full, rowwise(out.rows), names)
    for sub, t in out.subs:
        kind = "prefix" if sub.prefix else "sub-batch (rows of a wider buffer)"
        check_output(spec, case, t, len(sub.index), f"{kind} of {len(sub.index)} rows")
        full = rowwise(out.full)
        index = torch.tensor(sub.index, dtype=torch.long, device=full[0].device)
        expected = tuple(f.index_select(0, index) for f in full)
        same_bits(Check.INVARIANCE, f"{kind} rows {list(sub.index)[:8]} vs full batch", expected, rowwise(t), names)


def _dense(t):
    """``t``'s values with the standard strides of its shape: ``contiguous()`` keeps the
    row stride of a one-row view of a wider buffer (it already counts as contiguous), and
    an honest kernel's output may follow its input's strides there."""
    return t.new_empty(t.shape).copy_(t) if hasattr(t, "new_empty") else t


def _names(spec: KernelSpec) -> tuple[str, ...]:
    return tuple(o.name for o in spec.checked_outputs)


def judge_against(case: Case, out: CaseOutputs, reference_full, prior: CaseResult,
                  names: tuple[str, ...] = ()) -> CaseResult:
    """Parity with the seed: same shape, dtype, strides and bits (of every output)."""
    if not prior.passed:
        return prior
    try:
        same_bits(Check.PARITY, "output vs seed", reference_full, out.full, names)
    except CaseFailure as f:
        return CaseResult(case.id, f.check, f.message, f.mismatch, prior.checks)
    return CaseResult(case.id, checks=prior.checks + (Check.PARITY.value,))


def judge_reference(case: Case, out: CaseOutputs, expected64, tolerance: Tolerance, prior: CaseResult) -> CaseResult:
    """Closeness to the float64 reference where the reference is finite."""
    import torch

    if not prior.passed:
        return prior
    outputs, expected = as_outputs(out.full), as_outputs(expected64)
    for n, (actual, reference) in enumerate(zip(outputs, expected)):
        got = actual.detach().cpu().double()
        exp = reference.detach().cpu().double().reshape(got.shape)
        finite = torch.isfinite(exp) & (exp.abs() < torch.finfo(actual.dtype).max)
        err = (got - exp).abs()
        bound = tolerance.atol + tolerance.rtol * exp.abs()
        bad = finite & ~(err <= bound)
        if bool(bad.any()):
            i = int(bad.reshape(-1).nonzero()[0])
            which = f" output {n}" if len(outputs) > 1 else ""
            msg = (f"float64 reference{which}: index {i}: got {float(got.reshape(-1)[i])!r}, expected "
                   f"{float(exp.reshape(-1)[i])!r} (rtol {tolerance.rtol}, atol {tolerance.atol}); "
                   f"{int(bad.sum())} element(s) outside")
            return CaseResult(case.id, Check.REFERENCE, msg, None, prior.checks)
    return CaseResult(case.id, checks=prior.checks + (Check.REFERENCE.value,))
