"""Batch invariance where the small decoder never goes: the seed's own workload shapes.

The decoder's hidden size is small, so a kernel that switches a block size for
small batches (say ``BLOCK_N`` when ``M < 8``) gives its sampler and its
trainer the same bits there, and differs only at the hidden sizes a real
model has.  So each kernel that is not the bundled seed is also run, as the
judge runs a candidate's invariance cases, at the shapes its seed's spec says
it is used at on this device: every workload cell's dims at the largest batch
of the grid and the workload (a sample of its rows also runs alone, in a
shuffled sub-batch and as a prefix of the batch: a switch anywhere between
one row and the full batch meets both sides), in the cell's dtype and in
float32 at the largest dims, plus batch sizes on both sides of every integer
the file compares with (above the largest batch at the smallest cell's dims,
as the judge does: cost is per row).  Only invariance is judged (the kernel against
itself): a file is not required to have the seed's bits to be on-policy.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tik_agent.plaintext import plain
from tik_agent.spec.cases import MAX_BATCH, Case, extra_case, largest_batch, make_inputs, unique
from tik_agent.spec.fields import read_text
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger("tik_agent.progress")


@dataclass(frozen=True)
class ReachResult:
    """``passed`` is None when the kernel was not checked here (``reason`` says why)."""

    kind: str
    passed: bool | None
    cases: int = 0
    shapes: str = ""            # what the cases covered, e.g. "M=1,8,64; N=4096,2048; float32, bfloat16"
    failure: str | None = None  # the first failing case and why
    seconds: float = 0.0
    reason: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "passed": self.passed, "cases": self.cases, "shapes": self.shapes,
                "failure": self.failure, "seconds": round(self.seconds, 3), "reason": self.reason}


def reach_cases(spec: KernelSpec, source: str, device: str = "cpu") -> list[Case]:
    """Invariance cases at the device's workload dims (largest batch) and around the file's literals."""
    from tik_agent.judge.literals import batch_sizes_around, compared_literals
    from tik_agent.judge.plan import literal_sizes

    top = largest_batch(spec, device)
    seed = spec.parity.seeds[0]
    cells = sorted(spec.workload_for(device), key=lambda c: -_volume(c.dims))
    largest = dict(cells[0].dims)
    if spec.layout == "sequences":
        # A case is `top` whole sequences, each re-run in many launches under the interpreter:
        # the largest cell's head shape at the grid's smallest context, in float32.
        small = {n: min(v) for n, v in spec.dims.items()}
        heads = {n: largest[n] for n in largest if n not in (spec.sequences.context, spec.sequences.chunk,
                                                             spec.sequences.page)}
        cases = [extra_case(spec, top, {**small, **heads}, "float32", "normal", seed, origin="reach", hidden=False)]
    else:
        cases = [extra_case(spec, top, dict(c.dims), c.dtype, "normal", seed, origin="reach", hidden=False)
                 for c in cells]
        cases.insert(0, extra_case(spec, top, largest, "float32", "normal", seed, origin="reach", hidden=False))
    try:
        literals = compared_literals(source, "kernel.py")
    except SyntaxError:
        literals = []
    sizes = literal_sizes(spec, device, batch_sizes_around(literals))
    if any(m > MAX_BATCH[device] for m in sizes):
        log.warning("batch sizes above %d around the file's literals are not checked here", MAX_BATCH[device])
    for m in (m for m in sizes if m <= MAX_BATCH[device]):
        # Up to the largest batch at the largest dims; above it (cost is per row) at the smallest cell's.
        dims = cases[0].dims if spec.layout == "sequences" or m <= top else cells[-1].dims
        cases.append(extra_case(spec, m, dict(dims), "float32", "normal", seed, origin="literal", hidden=False))
    return unique(cases)


def check_reach(kind: str, spec: KernelSpec, path: Path, device: str = "cpu") -> ReachResult:
    """Run ``path`` (a kernel for ``spec``'s contract) over :func:`reach_cases`; stop at the first failure."""
    from tik_agent.bits import digest
    from tik_agent.judge.parity import judge_self
    from tik_agent.sandbox import launches
    from tik_agent.sandbox.harness import KernelLoadError, Runner, load_entry

    launches.install()
    cases = reach_cases(spec, read_text(Path(path)), device)   # a file that is not UTF-8: one line, exit 2
    shapes = describe(spec, cases)
    start = time.perf_counter()
    try:
        runner = Runner(load_entry(Path(path), spec, f"reach_{kind}"), spec, device)
    except KernelLoadError as exc:
        return ReachResult(kind, False, len(cases), shapes, f"load: {plain(str(exc))}", time.perf_counter() - start)
    for n, case in enumerate(cases, 1):
        log.info("%s: shape check %d/%d (%s), %.0f s", kind, n, len(cases), case.id, time.perf_counter() - start)
        try:
            out = runner.run_case(case)
        except Exception as exc:  # the user's kernel: its crash is this case's failure
            return ReachResult(kind, False, len(cases), shapes, f"{case.id}: the kernel raised "
                               f"{type(exc).__name__}: {plain(str(exc))[:300]}", time.perf_counter() - start)
        result = judge_self(spec, case, out, Path(path), digest(make_inputs(spec, case, "cpu")))
        if not result.passed:
            return ReachResult(kind, False, len(cases), shapes, f"{case.id}: [{result.failed.value}] {result.message}",
                               time.perf_counter() - start)
    return ReachResult(kind, True, len(cases), shapes, None, time.perf_counter() - start)


def describe(spec: KernelSpec, cases: list[Case]) -> str:
    """The batch sizes launched, the dims and the dtypes the cases cover, in one short line."""
    from tik_agent.spec.cases import rows_alone, subbatches

    names = sorted({n for c in cases for n in c.dims})
    dims = "; ".join(f"{n}={','.join(str(v) for v in sorted({c.dims[n] for c in cases}, reverse=True))}"
                     for n in names if len({c.dims[n] for c in cases}) > 1 or n in ("N", "V", "K"))
    dtypes = ", ".join(dict.fromkeys(sorted((c.dtype for c in cases), key=lambda d: d != "float32")))
    if spec.layout == "sequences":
        sizes = f"{max(c.m for c in cases)} sequences, each alone and in sub-batches"
    else:
        launched = {c.m for c in cases} | {1 for c in cases if rows_alone(c)}
        launched |= {len(sub.index) for c in cases for sub in subbatches(c)}
        sizes = "M=" + ",".join(str(m) for m in sorted(launched))
    return sizes + (f"; {dims}" if dims else "") + f"; {dtypes}"


def _volume(dims) -> int:
    out = 1
    for v in dims.values():
        out *= v
    return out
