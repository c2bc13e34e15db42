"""The GPU check's steps replayed in compile-only mode (:mod:`tik_agent.backends.compile_only`).

Each step of ``scripts/gpu-check.sh`` makes launches on the node; here the same
launches are made on CPU tensors, each one compiled for the target and none run,
in a process of its own with an empty Triton cache, as a sandboxed worker on a node
starts.  What a step reports: its launches, the distinct variants compiled, and the
seconds spent compiling them.

* ``kernels``: one call per workload cell of every seed (the training step where the
  cell has a backward), each kernel with its grid, warps, stages and what ptxas
  reports (registers, spill bytes, stack).
* ``eval-SEED``: what ``tik-agent eval`` of the seed against itself launches in the
  candidate's worker: every fixed evaluation case as the harness runs it (full batch,
  again, rows alone, sub-batches), the configuration survey's sizes, and the timed
  cells (not the few cases drawn per evaluation, nor the survey's boundary cases).
  The seed's worker compiles the same set again in its own cache.
* ``probes-SEED``: each tunable value of the seed, at each probe batch size and an
  odd-stride row view (``scripts/gpu_check_steps.py probes``).  attention's batch is its
  sequences: the probe's full launch of at most 4 and each launch of its invariance
  cases, as the check makes them (:func:`sequence_probe_inputs`).

A step may be a piece of one: ``probes-SEED:TUNABLE[=VALUE]`` and ``eval-SEED:PART`` (one of
:data:`EVAL_PARTS`).  A node's cache warming runs the pieces (:func:`warm_steps`) side by
side into one cache folder, a part of it per check step (``replay_runs.cache_part``).  Each step
reports its launches, variants, compile seconds and peak resident set.

Run one step as ``python -m tik_agent.backends.compile_rehearsal STEP OUT.json --target sm_90``;
:func:`tik_agent.backends.replay_runs.run_steps` runs them (``scripts/gpu_check_steps.py compile``, and
``warm`` on a node).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path


SEEDS = ("rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention")
PROBE_M = (1, 7, 64, 255, 1024, 4096)  # the batch sizes of the check's bit probes (scripts/gpu_check_steps.py)
# Sequences in a sequences-layout probe's full launch (attention's batch is its sequences; its
# inputs are whole paged caches at the cell's context, built for every launch).
SEQUENCES_MAX = 4
# Constants probed beside the tunables: part of the numerics under the interpreter (its
# ordered dot adds each BLOCK_K block to the accumulator), perhaps not on sm_90, where
# each k16 MMA piece accumulates straight into fp32.  matmul's BLOCK_M probes cross the
# switch from mma.sync (32) to wgmma (64 and 128 with 4 or 8 warps) on sm_90.
EXTRA_PROBES = {"matmul": {"BLOCK_K": [16, 32, 64]}}
STEPS = ("kernels",) + tuple(f"probes-{s}" for s in SEEDS) + tuple(f"eval-{s}" for s in SEEDS)


def _spec(name: str):
    from tik_agent.spec.schema import load_spec
    from tik_agent.spec.seeds import BUNDLED_DIR

    return load_spec(BUNDLED_DIR / name)


def _entry(spec, path: Path | None = None, role: str = "seed"):
    from tik_agent.sandbox.harness import load_entry

    return load_entry(path or spec.source, spec, role, prepare=as_on_a_gpu)


GPU_SUFFIX = "_GPU"


def as_on_a_gpu(module) -> None:
    """A launcher that distributes its work by the tensors' device (the interpreter pays
    per program, a GPU per register) takes its CPU branch on this replay's CPU tensors.
    By convention a seed names the value its launcher uses on a GPU ``NAME_GPU`` beside
    ``NAME``, the CPU's: the replay stands for a node, so each ``NAME`` takes its GPU value."""
    names = vars(module)
    for name in [n for n in names if n.endswith(GPU_SUFFIX) and n[:-len(GPU_SUFFIX)] in names]:
        names[name[:-len(GPU_SUFFIX)]] = names[name]


def step_kernels(report: dict) -> None:
    """Every workload cell of every seed, once, with ptxas's resources per kernel."""
    from tik_agent.backends import compile_only

    report["kernels"] = []
    for name in SEEDS:
        spec = _spec(name)
        entry = _entry(spec)
        for cell in spec.workload_for("cuda"):
            fn, inputs = _cell(spec, cell, entry)
            with compile_only.recording() as found:
                fn(*inputs, **spec.kwargs)
            del inputs
            for launch in found:
                report["kernels"].append({"seed": name, "cell": cell.name, "kernel": launch.kernel,
                                          **compile_only.resources(launch), "grid": launch.grid,
                                          "num_warps": launch.num_warps, "num_stages": launch.num_stages})


# An evaluation's launches in the order a worker makes them: its fixed cases (every other one
# to a part: a seed's largest case alone can take a minute), the survey, the timed cells.
EVAL_PARTS = ("cases=even", "cases=odd", "survey", "cells")


def step_eval(name: str, part: str | None = None) -> None:
    """The candidate worker's launches in ``tik-agent eval`` of the seed against itself on a GPU;
    ``part``: one of :data:`EVAL_PARTS` (the warm step runs them side by side)."""
    from tik_agent.judge import configs
    from tik_agent.judge.evaluate import evaluation_cases
    from tik_agent.sandbox.harness import Runner
    from tik_agent.sandbox.survey import run_survey

    if part not in (None, *EVAL_PARTS):
        raise SystemExit(f"compile rehearsal: no part {part!r} of an evaluation (expected {', '.join(EVAL_PARTS)})")
    spec = _spec(name)
    entry = _entry(spec)
    if part is None or part.startswith("cases"):
        runner = Runner(entry, spec, "cpu")
        for i, case in enumerate(evaluation_cases(spec, "cuda")):
            if part is None or i % 2 == (part == "cases=odd"):
                runner.run_case(case)
    if part in (None, "survey") and configs.surveyed(spec):  # a node's sizes (its byte cap), on CPU tensors
        configs.BYTE_CAP["cpu"] = configs.BYTE_CAP["cuda"]  # this process only: it replays a node
        run_survey(spec, entry, [dict(axis, device="cpu")
                                 for axis in configs.survey_plan(spec, "cuda", random.Random(0))])
    if part in (None, "cells"):
        for cell in spec.workload_for("cuda"):
            fn, inputs = _cell(spec, cell, entry)
            fn(*inputs, **spec.kwargs)


def warm_steps() -> list[str]:
    """The steps of a node's cache warming (``gpu_check_steps.py warm``): every step of the
    replay, a seed's probes one tunable value a process and an evaluation one part a process,
    so that no one process holds the others up (matmul's probes alone compile for five
    minutes of one core, and its NUM_WARPS values for two and a half)."""
    out = ["kernels"]
    out += [piece for seed in SEEDS for piece in probe_steps(seed)]
    out += [f"eval-{seed}:{part}" for seed in SEEDS for part in EVAL_PARTS]
    return out


def _cell(spec, cell, entry):
    """A timed cell's call and its inputs (unwritten where the layout allows: rows)."""
    from tik_agent.sandbox.timed import cell_call, cell_entry

    if spec.layout == "sequences":
        return cell_call(spec, cell, entry, 0, "cpu")
    fn, count = cell_entry(spec, cell, entry)
    return fn, _empty(spec, cell.m, cell.dims, cell.dtype)[:count]


def step_probes(name: str, only: str | None = None) -> None:
    """Each tunable value's variant at every probe size, as the check's probes call them, and the
    seed's own kernel on the same inputs; ``only``: one tunable's values (``NUM_WARPS``), or one
    value (``NUM_WARPS=8``): the warm step runs the pieces of a seed's probes side by side."""
    spec = _spec(name)
    cell = max(spec.workload_for("cuda"), key=lambda c: c.m)
    source = spec.source.read_text()
    probed = {**spec.tunables, **EXTRA_PROBES.get(name, {})}
    if only is not None:
        tunable, _, value = only.partition("=")
        values = [v for v in probed.get(tunable, []) if not value or str(v) == value]
        if not values:
            raise SystemExit(f"compile rehearsal: {name} probes no {only!r} (it probes {', '.join(probed)})")
        probed = {tunable: values}
    # The seed's own kernel: once per seed (the first piece has it); in every piece it would be
    # compiled again by each process, as the probes themselves compile it once.
    seed_too = only is None or f"probes-{name}:{only}" == probe_steps(name)[0]
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dict.fromkeys(["float32", cell.dtype]):
            if seed_too:
                _probe_calls(spec, _entry(spec), cell, dtype)
            for tunable, values in probed.items():
                for value in values:
                    path = Path(tmp) / f"{name}_{tunable}_{value}.py"
                    path.write_text(re.sub(rf"^{tunable}\s*=\s*.+$", f"{tunable} = {value!r}", source,
                                           count=1, flags=re.M))
                    _probe_calls(spec, _entry(spec, path, f"probe_{path.stem}"), cell, dtype)


def _probe_calls(spec, fn, cell, dtype: str) -> None:
    if spec.layout == "sequences":  # the probe's own launches: full, then each invariance one
        _, full, launches = sequence_probe_inputs(spec, dict(cell.dims), dtype, "cpu")
        for inputs in (full, *launches.values()):
            fn(*inputs, **spec.kwargs)
        return
    for m in (max(PROBE_M),) + PROBE_M:
        fn(*_empty(spec, m, cell.dims, dtype), **spec.kwargs)
    fn(*_empty(spec, max(PROBE_M), cell.dims, dtype, odd_rows=True), **spec.kwargs)


def probe_steps(name: str) -> list[str]:
    """``probes-SEED:TUNABLE=VALUE`` for each value the check probes: one seed's probes in pieces."""
    spec = _spec(name)
    return [f"probes-{name}:{tunable}={value}"
            for tunable, values in {**spec.tunables, **EXTRA_PROBES.get(name, {})}.items() for value in values]


def sequence_probe_inputs(spec, dims: dict, dtype: str, device: str) -> tuple:
    """A sequences-layout probe (``scripts/gpu_check_probes.py``): its case of up to
    :data:`SEQUENCES_MAX` sequences, the inputs of its full launch, and those of each launch
    its invariance cases make (each sequence alone, in other company, decoded token by token,
    chunked), by label."""
    from tik_agent.spec.cases import Case
    from tik_agent.spec.sequences import build_launch, case_launch, probe_launches

    case = Case(min(max(PROBE_M), SEQUENCES_MAX), dims, dtype, "normal", 0, invariance=True)
    launches = {launch.label: build_launch(spec, case, launch, device) for launch in probe_launches(spec, case)}
    return case, build_launch(spec, case, case_launch(spec, case), device), launches


def _empty(spec, m: int, dims: dict, dtype: str, odd_rows: bool = False) -> list:
    """Unwritten inputs of a case's shapes (compile-only: nothing reads them)."""
    from tik_agent.spec.cases import Case, make_inputs

    if spec.layout == "sequences":  # a batch of sequences: at most the largest the workload runs
        return make_inputs(spec, Case(min(m, 4), dims, dtype, "normal", 0), "cpu")
    import torch

    out = []
    case = Case(m, dims, dtype, "normal", 0)
    for inp in spec.checked_inputs:
        shape = inp.resolve_shape(m, dims)
        dt = getattr(torch, case.dtype_of(inp.name, inp.dtype))
        if odd_rows and inp.batched and len(shape) == 2 and dt.is_floating_point:
            out.append(torch.empty(shape[0], shape[1] + 1, dtype=dt)[:, : shape[1]])
        else:
            out.append(torch.empty(shape, dtype=dt))
    return out


# Set by replay_runs for a node's warm cache: build each variant's C launcher too.
LAUNCHERS_ENV = "TIK_AGENT_WARM_LAUNCHERS"


def run_step(step: str, out: Path, capability: int) -> dict:
    from tik_agent.backends import compile_only

    compile_only.activate(capability, launchers=os.environ.get(LAUNCHERS_ENV) == "1")
    from tik_agent.sandbox import launches

    launches.install()  # after the compile-only wrapper: the harness's wrapper sits outside it
    report: dict = {"step": step}
    start = time.perf_counter()
    with compile_only.recording() as found:
        if step == "kernels":
            step_kernels(report)
        elif step.startswith("probes-") and step[len("probes-"):].partition(":")[0] in SEEDS:
            seed, _, tunable = step[len("probes-"):].partition(":")
            step_probes(seed, tunable or None)
        elif step.startswith("eval-") and step[len("eval-"):].partition(":")[0] in SEEDS:
            seed, _, part = step[len("eval-"):].partition(":")
            step_eval(seed, part or None)
        else:
            raise SystemExit(f"compile rehearsal: unknown step {step!r} (expected one of {', '.join(STEPS)})")
    slowest = sorted((launch for launch in found if launch.compiled_s), key=lambda launch: -launch.compiled_s)[:3]
    report.update(launches=len(found), variants=len({launch.variant for launch in found}),
                  compile_s=round(sum(launch.compiled_s for launch in found), 1),
                  wall_s=round(time.perf_counter() - start, 1), peak_rss_mib=peak_rss_mib(),
                  **compile_only.launcher_report(),
                  slowest=[{"kernel": launch.kernel, "compile_s": launch.compiled_s, "grid": launch.grid,
                            "num_warps": launch.num_warps} for launch in slowest])
    out.write_text(json.dumps(report, indent=1))
    return report


def peak_rss_mib() -> float | None:
    """This process's peak resident set (Linux's VmHWM), MiB; None where there is none.  In a
    replay the launchers' outputs are host allocations the harness poisons (writes), so a step
    holds on the host what a worker holds on the device for the same cases."""
    try:
        with open("/proc/self/status") as f:
            return round(next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024, 1)
    except (OSError, StopIteration, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    from tik_agent.backends.compile_only import target_capability

    p = argparse.ArgumentParser(prog="compile_rehearsal", description=__doc__.splitlines()[0])
    p.add_argument("step", help=", ".join(STEPS))
    p.add_argument("out", type=Path, help="the step's JSON report")
    p.add_argument("--target", default="sm_90")
    args = p.parse_args(argv)
    capability = target_capability(args.target)
    if "TRITON_CACHE_DIR" not in os.environ:  # an empty cache, as a worker on a node starts with
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tik-compile-")
    run_step(args.step, args.out, capability)
    return 0


if __name__ == "__main__":
    sys.exit(main())
