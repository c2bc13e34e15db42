"""Judge what a kernel produced: bits, invariance, determinism, integrity.

Runs on the trusted side over tensors a harness produced (possibly in another
process).  Each case yields a :class:`CaseResult`; the first failing check of
the first failing case is what a user sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from tik_agent.bits import Mismatch, first_mismatch, meta_difference
from tik_agent.spec.cases import Case, rows_alone
from tik_agent.sandbox.harness import CaseOutputs
from tik_agent.spec.schema import KernelSpec, Tolerance, resolve_shape


class Check(str, Enum):
    OUTPUT = "output"            # a tensor of the declared shape and dtype came back
    LAUNCH = "launch"            # a Triton kernel from the kernel's own file ran
    INPUTS = "inputs"            # inputs are bit-identical after the call
    DETERMINISM = "determinism"  # two runs, same bits (also catches unwritten outputs)
    INVARIANCE = "invariance"    # rows alone and sub-batches match the full batch
    PARITY = "parity"            # same bits as the seed
    REFERENCE = "reference"      # close to the float64 reference (seed sanity)


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


class _Fail(Exception):
    def __init__(self, check: Check, message: str, mismatch: Mismatch | None = None):
        super().__init__(message)
        self.check, self.message, self.mismatch = check, message, mismatch


def expected_meta(spec: KernelSpec, case: Case, m: int) -> tuple[tuple[int, ...], str]:
    return resolve_shape(spec.output.shape, m, case.dims), spec.output.resolve_dtype(case.dtype)


def _check_output(spec: KernelSpec, case: Case, out, m: int, what: str) -> None:
    import torch

    shape, dtype = expected_meta(spec, case, m)
    if not isinstance(out, torch.Tensor):
        raise _Fail(Check.OUTPUT, f"{what}: returned {type(out).__name__}, expected a tensor")
    if tuple(out.shape) != shape or out.dtype != getattr(torch, dtype):
        raise _Fail(Check.OUTPUT, f"{what}: got {tuple(out.shape)} {out.dtype}, expected {shape} torch.{dtype}")


def _same_bits(check: Check, what: str, expected, actual) -> None:
    meta = meta_difference(expected, actual)
    if meta:
        raise _Fail(check, f"{what}: {meta}")
    mm = first_mismatch(expected, actual)
    if mm:
        raise _Fail(check, f"{what}: {mm.describe()}", mm)


def judge_self(spec: KernelSpec, case: Case, out: CaseOutputs, kernel_file: Path, inputs_digest: str) -> CaseResult:
    """Checks that need only the kernel's own outputs."""
    passed: list[str] = []
    try:
        _check_output(spec, case, out.full, case.m, "full batch")
        passed.append(Check.OUTPUT.value)
        own = str(Path(kernel_file).resolve())
        foreign = {f: n for f, n in out.launches.items() if f != own}
        if foreign:
            raise _Fail(Check.LAUNCH, f"launched kernels defined outside the kernel file: {sorted(foreign)}")
        if out.launches.get(own, 0) == 0:
            raise _Fail(Check.LAUNCH, "no Triton kernel from the kernel file was launched")
        passed.append(Check.LAUNCH.value)
        if out.inputs_digest_after != inputs_digest:
            raise _Fail(Check.INPUTS, "inputs changed during the call")
        passed.append(Check.INPUTS.value)
        if not (case.rows_sample and out.again is None):
            _check_output(spec, case, out.again, case.m, "second run")
            _same_bits(Check.DETERMINISM, "second run vs first", out.full, out.again)
            passed.append(Check.DETERMINISM.value)
        if case.invariance:
            _judge_invariance(spec, case, out)
            passed.append(Check.INVARIANCE.value)
    except _Fail as f:
        return CaseResult(case.id, f.check, f.message, f.mismatch, tuple(passed))
    return CaseResult(case.id, checks=tuple(passed))


def _judge_invariance(spec: KernelSpec, case: Case, out: CaseOutputs) -> None:
    import torch

    rows = rows_alone(case)
    _check_output(spec, case, out.rows, len(rows), "rows run alone")
    device = out.full.device
    expected = out.full if len(rows) == case.m else out.full.index_select(0, torch.tensor(rows, device=device))
    _same_bits(Check.INVARIANCE, "rows run alone vs full batch", expected, out.rows.contiguous())
    for sub, t in out.subs:
        kind = "prefix" if sub.prefix else "sub-batch"
        _check_output(spec, case, t, len(sub.index), f"{kind} of {len(sub.index)} rows")
        expected = out.full.index_select(0, torch.tensor(sub.index, dtype=torch.long, device=out.full.device))
        _same_bits(Check.INVARIANCE, f"{kind} rows {list(sub.index)[:8]} vs full batch", expected, t.contiguous())


def judge_against(case: Case, out: CaseOutputs, reference_full, prior: CaseResult) -> CaseResult:
    """Parity with the seed: same shape, dtype, strides and bits."""
    if not prior.passed:
        return prior
    try:
        _same_bits(Check.PARITY, "output vs seed", reference_full, out.full)
    except _Fail as f:
        return CaseResult(case.id, f.check, f.message, f.mismatch, prior.checks)
    return CaseResult(case.id, checks=prior.checks + (Check.PARITY.value,))


def judge_reference(case: Case, out: CaseOutputs, expected64, tolerance: Tolerance, prior: CaseResult) -> CaseResult:
    """Closeness to the float64 reference where the reference is finite."""
    import torch

    if not prior.passed:
        return prior
    got = out.full.detach().cpu().double()
    exp = expected64.detach().cpu().double().reshape(got.shape)
    finite = torch.isfinite(exp) & (exp.abs() < torch.finfo(out.full.dtype).max)
    err = (got - exp).abs()
    bound = tolerance.atol + tolerance.rtol * exp.abs()
    bad = finite & ~(err <= bound)
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0])
        msg = (f"float64 reference: index {i}: got {float(got.reshape(-1)[i])!r}, expected "
               f"{float(exp.reshape(-1)[i])!r} (rtol {tolerance.rtol}, atol {tolerance.atol}); "
               f"{int(bad.sum())} element(s) outside")
        return CaseResult(case.id, Check.REFERENCE, msg, None, prior.checks)
    return CaseResult(case.id, checks=prior.checks + (Check.REFERENCE.value,))
