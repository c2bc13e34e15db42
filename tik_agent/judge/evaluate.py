"""The library call: (spec, candidate file) -> :class:`Verdict`.

Order of events, each a wall against a way evaluators get fooled:

1. static rules on the source (nothing runs if they fail);
2. the seed's outputs for every parity case, computed in a *separate* worker
   (or taken from a cache made the same way) and judged for the seed's own
   determinism and invariance on this device;
3. the candidate's worker: its parity outputs before any seed code is loaded,
   then interleaved timing against the seed (and the parent), then a re-run of
   every timing cell for a bit re-check at the timing shapes;
4. the trusted side judges bits, invariance, determinism, launches and input
   digests, then the timing rules.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tik_agent.bits import digest, first_mismatch, meta_difference
from tik_agent.spec.cases import Case, evaluation_cases, make_inputs
from tik_agent.errors import SpecError, UsageError
from tik_agent.sandbox.harness import CaseOutputs, as_outputs
from tik_agent.judge.parity import Check, CaseResult, judge_against, judge_self
from tik_agent.judge.records import Outcome, Verdict
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment
from tik_agent.sandbox.worker import OUTPUTS_FILE, RESULT_FILE, worker_argv
from tik_agent.spec.schema import KernelSpec
from tik_agent.judge.timing import CellTiming, paired_speedups, regressions, stats, weighted_noise, weighted_speedup

log = logging.getLogger(__name__)

INTEGRITY_CHECKS = {Check.OUTPUT, Check.LAUNCH, Check.INPUTS, Check.DETERMINISM}
# Executables Triton runs on a GPU to build kernels and its launcher.
CUDA_TOOLS = ("ptxas", "cuobjdump", "nvdisasm", "gcc", "cc", "clang", "ld", "ldconfig")


@dataclass(frozen=True)
class EvalOptions:
    device: str = "cpu"
    timeout_s: float = 900.0
    rounds: int = 5
    warmup: int = 1
    timing: bool = True
    memory_bytes: int | None = 16 * 1024**3
    keep_workdir: bool = False

    def __post_init__(self):
        if self.timeout_s <= 0:
            raise UsageError(f"--timeout: must be positive (got {self.timeout_s})")
        if self.rounds < 1:
            raise UsageError(f"--rounds: must be at least 1 (got {self.rounds})")


@dataclass
class Reference:
    """The seed's outputs for the evaluation cases on one device."""

    outputs: dict  # case id -> full output tensor
    environment: dict
    seed_sha256: str
    cases: list[Case] = field(default_factory=list)

    def save(self, path: Path) -> None:
        import torch

        tmp = path.with_suffix(".tmp")
        torch.save({"outputs": self.outputs, "environment": self.environment, "seed_sha256": self.seed_sha256,
                    "cases": [c.to_dict() for c in self.cases]}, tmp)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Reference":
        import torch

        d = torch.load(path, weights_only=True)
        return cls(d["outputs"], d["environment"], d["seed_sha256"], [Case.from_dict(c) for c in d["cases"]])


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _Sandbox:
    """A temporary directory laid out for one worker run."""

    def __init__(self, spec: KernelSpec, keep: bool):
        self.dir = Path(tempfile.mkdtemp(prefix="tik-eval-"))
        self.keep = keep
        spec_dir = self.dir / "spec"
        spec_dir.mkdir()
        for f in (spec.spec_path, spec.source, spec.reference):
            if f is not None:
                shutil.copy2(f, spec_dir / f.name)

    def add(self, name: str, source: Path) -> str:
        shutil.copy2(source, self.dir / name)
        return name

    def run(self, request: dict, options: EvalOptions):
        (self.dir / "request.json").write_text(json.dumps(request))
        extra = {}
        if options.device == "cpu":
            extra["TRITON_INTERPRET"] = "1"
        limits = SandboxLimits(
            wall_seconds=options.timeout_s,
            cpu_seconds=int(options.timeout_s * 2) + 60,
            memory_bytes=options.memory_bytes if options.device == "cpu" else None,
            file_bytes=4 * 1024**3,
            max_processes=4096,
        )
        return run_sandboxed(worker_argv("request.json"), self.dir, limits, scrubbed_environment(extra, workdir=self.dir))

    def result(self) -> dict | None:
        path = self.dir / RESULT_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def outputs(self) -> dict:
        import torch

        path = self.dir / OUTPUTS_FILE
        return torch.load(path, weights_only=True) if path.is_file() else {"cases": {}, "recheck": {}}

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _request(mode: str, kernel: str, device: str, cases: list[Case], **extra) -> dict:
    req = {"mode": mode, "spec_dir": "spec", "kernel": kernel, "device": device,
           "cases": [c.to_dict() for c in cases], "guard": True,
           "allow_subprocess": list(CUDA_TOOLS) if device == "cuda" else []}
    req.update(extra)
    return req


def _sandbox_failure(proc, result: dict | None, timeout_s: float) -> Verdict | None:
    """A verdict for a worker that timed out, died or reported a load/run error."""
    tail = (proc.stderr or "")[-3000:]
    if proc.timed_out:
        return Verdict(Outcome.TIMEOUT, f"killed after the {timeout_s:g} s wall-clock limit", worker_log=tail)
    if result is None:
        how = f"signal {proc.signal}" if proc.signal else f"exit code {proc.returncode}"
        return Verdict(Outcome.CRASHED, f"the worker died ({how}) without a result", worker_log=tail)
    status = result.get("status")
    if status in ("compile_error", "runtime_error"):
        where = f" in case {result['case']}" if result.get("case") else ""
        return Verdict(Outcome(status), f"{status.replace('_', ' ')}{where}: {result.get('error', '')}",
                       environment=result.get("environment", {}), worker_log=tail)
    return None


def compute_reference(spec: KernelSpec, options: EvalOptions, cases: list[Case] | None = None) -> Reference:
    """Run the seed over the evaluation cases in a worker; check it against itself."""
    cases = cases if cases is not None else evaluation_cases(spec, options.device)
    box = _Sandbox(spec, options.keep_workdir)
    try:
        kernel = box.add("seed_kernel.py", spec.source)
        proc = box.run(_request("reference", kernel, options.device, cases), options)
        result = box.result()
        failure = _sandbox_failure(proc, result, options.timeout_s)
        if failure is not None:
            raise SpecError(f"{spec.source}: the seed itself failed on {options.device}: {failure.reason}")
        outputs = box.outputs()["cases"]
        for case in cases:
            out = CaseOutputs.from_payload(outputs[case.id])
            verdict = judge_self(spec, case, out, box.dir / kernel, digest(make_inputs(spec, case, "cpu")))
            if not verdict.passed:
                raise SpecError(f"{spec.source}: the seed fails its own checks on {options.device}: "
                                f"{case.id}: [{verdict.failed.value}] {verdict.message}")
        return Reference({cid: CaseOutputs.from_payload(p).full for cid, p in outputs.items()},
                         result.get("environment", {}), sha256_file(spec.source), cases)
    finally:
        box.close()


def evaluate(spec: KernelSpec, candidate: Path, options: EvalOptions, reference: Reference | None = None,
             parent: Path | None = None) -> Verdict:
    start = time.perf_counter()
    verdict = _evaluate(spec, Path(candidate), options, reference, parent)
    verdict.seconds = time.perf_counter() - start
    verdict.candidate_sha256 = sha256_file(candidate) if Path(candidate).is_file() else ""
    verdict.seed_sha256 = sha256_file(spec.source)
    return verdict


def _evaluate(spec, candidate: Path, options: EvalOptions, reference, parent) -> Verdict:
    from tik_agent.sandbox.static import check_source

    try:
        source = candidate.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{candidate}: cannot read the candidate: {exc}") from None
    violations = check_source(source, candidate.name)
    if violations:
        first = violations[0]
        return Verdict(Outcome.REJECTED_STATIC, f"{candidate.name}:{first.line}: [{first.rule}] {first.message}",
                       static_violations=[{"rule": v.rule, "line": v.line, "message": v.message} for v in violations])
    if reference is None:
        reference = compute_reference(spec, options)
    box = _Sandbox(spec, options.keep_workdir)
    try:
        kernel = box.add("candidate.py", candidate)
        extra = {"seed_kernel": box.add("seed_kernel.py", spec.source)}
        if parent is not None:
            extra["parent_kernel"] = box.add("parent_kernel.py", parent)
        if options.timing:
            extra["timing"] = {"rounds": options.rounds, "warmup": options.warmup}
        proc = box.run(_request("candidate", kernel, options.device, reference.cases, **extra), options)
        result = box.result()
        failure = _sandbox_failure(proc, result, options.timeout_s)
        if failure is not None:
            return failure
        return _judge(spec, options.device, reference, box.outputs(), result, box.dir / kernel)
    finally:
        box.close()


def _judge(spec, device: str, reference: Reference, outputs: dict, result: dict, kernel_file: Path) -> Verdict:
    env = result.get("environment", {})
    results: list[CaseResult] = []
    for case in reference.cases:
        out = CaseOutputs.from_payload(outputs["cases"][case.id])
        r = judge_self(spec, case, out, kernel_file, digest(make_inputs(spec, case, "cpu")))
        results.append(judge_against(case, out, reference.outputs[case.id], r, tuple(o.name for o in spec.checked_outputs)))
    cases = [r.to_dict() for r in results]
    failed = next((r for r in results if not r.passed), None)
    if failed is not None:
        outcome = Outcome.INTEGRITY_FAILED if failed.failed in INTEGRITY_CHECKS else Outcome.PARITY_FAILED
        mm = dict(failed.mismatch.to_dict(), case=failed.case_id) if failed.mismatch else None
        return Verdict(outcome, f"{failed.case_id}: [{failed.failed.value}] {failed.message}",
                       cases=cases, first_mismatch=mm, environment=env)
    timing = result.get("timing")
    if not timing:
        return Verdict(Outcome.PASSED, None, cases=cases, environment=env)
    for cell in spec.workload_for(device):
        pair = outputs["recheck"][cell.name]
        problem, mm = _recheck(pair["seed"], pair["candidate"])
        if problem or mm:
            text = problem or mm.describe()
            return Verdict(Outcome.PARITY_FAILED, f"timing cell {cell.name} re-check after timing: {text}",
                           cases=cases, first_mismatch=dict(mm.to_dict(), case=f"timing:{cell.name}") if mm else None,
                           environment=env)
    cells = _cells(spec, device, timing["samples"])
    verdict = Verdict(Outcome.PASSED, None, speedup=weighted_speedup(cells), noise=weighted_noise(cells),
                      timer=timing["timer"], cases=cases, timing=[c.to_dict() for c in cells], environment=env)
    if all(c.parent is not None for c in cells):
        verdict.speedup_vs_parent = weighted_speedup(cells, against="parent")
        weights = {c.name: c.weight for c in cells}
        verdict.speedup_vs_parent_low = min(paired_speedups(timing["samples"], weights, "parent"))
    slow = regressions(cells)
    if slow:
        worst = max(slow, key=lambda c: c.candidate.median_ms / c.seed.median_ms)
        verdict.outcome = Outcome.SLOWER
        verdict.reason = (f"cell {worst.name} is {worst.candidate.median_ms / worst.seed.median_ms:.2f}x slower "
                          f"than the seed (cap 1.05x, noise {worst.noise:.1%})")
    return verdict


def _recheck(seed_out, candidate_out):
    """(meta problem, first mismatch) over every output of a timing cell's re-check."""
    seed_outs, cand_outs = as_outputs(seed_out), as_outputs(candidate_out)
    if len(cand_outs) != len(seed_outs):
        return f"{len(cand_outs)} outputs, expected {len(seed_outs)}", None
    for expected, actual in zip(seed_outs, cand_outs):
        problem = meta_difference(expected, actual)
        mm = None if problem else first_mismatch(expected, actual)
        if problem or mm:
            return problem, mm
    return None, None


def _cells(spec: KernelSpec, device: str, samples: dict) -> list[CellTiming]:
    cells = []
    for cell in spec.workload_for(device):
        s = samples[cell.name]
        shape = ", ".join([f"M={cell.m}"] + [f"{k}={v}" for k, v in cell.dims.items()]) + f", {cell.dtype}"
        ratios = tuple(a / b for a, b in zip(s["seed"], s["candidate"]))
        cells.append(CellTiming(cell.name, shape, cell.weight, stats(s["seed"]), stats(s["candidate"]),
                                stats(s["parent"]) if "parent" in s else None, ratios))
    return cells
