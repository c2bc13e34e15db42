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
  odd-stride row view (``scripts/gpu_check_steps.py probes``; the check probes the
  seeds it copies, rmsnorm, logprobs and matmul).  attention's batch is its
  sequences: at most 4 here, where the check's sizes would be thousands.

Run one step as ``python -m tik_agent.backends.compile_rehearsal STEP OUT.json --target sm_90``;
:func:`run_steps` runs them all (``scripts/gpu_check_steps.py compile``).
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

from tik_agent.plaintext import plain

SEEDS = ("rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention")
PROBE_M = (1, 7, 64, 255, 1024, 4096)  # the batch sizes of the check's bit probes (scripts/gpu_check_steps.py)
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


def step_eval(name: str) -> None:
    """The candidate worker's launches in ``tik-agent eval`` of the seed against itself on a GPU."""
    from tik_agent.judge import configs
    from tik_agent.judge.evaluate import evaluation_cases
    from tik_agent.sandbox.harness import Runner
    from tik_agent.sandbox.survey import run_survey

    spec = _spec(name)
    entry = _entry(spec)
    runner = Runner(entry, spec, "cpu")
    for case in evaluation_cases(spec, "cuda"):
        runner.run_case(case)
    if configs.surveyed(spec):  # the sizes a node surveys (its byte cap), on tensors of this CPU
        configs.BYTE_CAP["cpu"] = configs.BYTE_CAP["cuda"]  # this process only: it replays a node
        run_survey(spec, entry, [dict(axis, device="cpu")
                                 for axis in configs.survey_plan(spec, "cuda", random.Random(0))])
    for cell in spec.workload_for("cuda"):
        fn, inputs = _cell(spec, cell, entry)
        fn(*inputs, **spec.kwargs)


def _cell(spec, cell, entry):
    """A timed cell's call and its inputs (unwritten where the layout allows: rows)."""
    from tik_agent.sandbox.timed import cell_call, cell_entry

    if spec.layout == "sequences":
        return cell_call(spec, cell, entry, 0, "cpu")
    fn, count = cell_entry(spec, cell, entry)
    return fn, _empty(spec, cell.m, cell.dims, cell.dtype)[:count]


def step_probes(name: str) -> None:
    """Each tunable value's variant at every probe size, as the check's probes call them."""
    spec = _spec(name)
    cell = max(spec.workload_for("cuda"), key=lambda c: c.m)
    source = spec.source.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dict.fromkeys(["float32", cell.dtype]):
            for tunable, values in {**spec.tunables, **EXTRA_PROBES.get(name, {})}.items():
                for value in values:
                    path = Path(tmp) / f"{name}_{tunable}_{value}.py"
                    path.write_text(re.sub(rf"^{tunable}\s*=\s*.+$", f"{tunable} = {value!r}", source,
                                           count=1, flags=re.M))
                    fn = _entry(spec, path, f"probe_{path.stem}")
                    for m in (max(PROBE_M),) + PROBE_M:
                        fn(*_empty(spec, m, cell.dims, dtype), **spec.kwargs)
                    fn(*_empty(spec, max(PROBE_M), cell.dims, dtype, odd_rows=True), **spec.kwargs)


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


def run_step(step: str, out: Path, capability: int) -> dict:
    from tik_agent.backends import compile_only

    compile_only.activate(capability)
    from tik_agent.sandbox import launches

    launches.install()  # after the compile-only wrapper: the harness's wrapper sits outside it
    report: dict = {"step": step}
    start = time.perf_counter()
    with compile_only.recording() as found:
        if step == "kernels":
            step_kernels(report)
        elif step.startswith("probes-") and step[len("probes-"):] in SEEDS:
            step_probes(step[len("probes-"):])
        elif step.startswith("eval-") and step[len("eval-"):] in SEEDS:
            step_eval(step[len("eval-"):])
        else:
            raise SystemExit(f"compile rehearsal: unknown step {step!r} (expected one of {', '.join(STEPS)})")
    slowest = sorted((launch for launch in found if launch.compiled_s), key=lambda launch: -launch.compiled_s)[:3]
    report.update(launches=len(found), variants=len({launch.variant for launch in found}),
                  compile_s=round(sum(launch.compiled_s for launch in found), 1),
                  wall_s=round(time.perf_counter() - start, 1),
                  slowest=[{"kernel": launch.kernel, "compile_s": launch.compiled_s, "grid": launch.grid,
                            "num_warps": launch.num_warps} for launch in slowest])
    out.write_text(json.dumps(report, indent=1))
    return report


def run_steps(out: Path, target: str, jobs: int, steps: list[str] | None = None) -> tuple[bool, str]:
    """Each step in a process of its own with an empty Triton cache, ``jobs`` at a time;
    ``out/compile.json`` is rewritten as each step finishes.  Whether every step passed and
    its kernels table is whole, and the tables for ``summary.md``."""
    import shutil
    import subprocess
    from concurrent.futures import ThreadPoolExecutor, as_completed

    steps = list(steps or STEPS)
    report: dict = {"target": target, "steps": [], "kernels": []}
    work = Path(tempfile.mkdtemp(prefix="compile-"))

    def one(step: str) -> dict:
        result, log = work / f"{step}.json", work / f"{step}.log"
        env = dict(os.environ, TRITON_CACHE_DIR=str(work / f"cache-{step}"))
        env.pop("TRITON_INTERPRET", None)
        start = time.monotonic()
        with log.open("w") as f:
            done = subprocess.run([sys.executable, "-m", __name__, step, str(result), "--target", target], env=env,
                                  stdout=f, stderr=subprocess.STDOUT)
        row = json.loads(result.read_text()) if done.returncode == 0 and result.exists() else {"step": step}
        row.update(exit=done.returncode, process_s=round(time.monotonic() - start, 1))
        if done.returncode:
            row["error"] = log.read_text()[-400:]
        return row

    try:
        with ThreadPoolExecutor(jobs) as pool:
            for done in as_completed([pool.submit(one, step) for step in steps]):
                row = done.result()
                report["kernels"] += row.pop("kernels", [])
                report["steps"].append(row)
                (out / "compile.json").write_text(json.dumps(report, indent=1))
                print(f"compile {row['step']}: exit {row['exit']}, {row.get('variants', '-')} variants, "
                      f"{row.get('compile_s', '-')} s compiling, {row['process_s']} s", flush=True)
                if row.get("error"):  # the step's own last lines: a failed step says why in the log
                    tail = [line for line in row["error"].splitlines() if line.strip()][-3:]
                    print("\n".join(f"  {plain(line)}" for line in tail), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"## compile-only rehearsal for {target} ({jobs} at a time, each step with an empty cache)", "",
             "| step | launches | variants compiled | compile s | step s | exit |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    report["steps"].sort(key=lambda r: steps.index(r["step"]))
    lines += [f"| {r['step']} | {r.get('launches', '-')} | {r.get('variants', '-')} | {r.get('compile_s', '-')} | "
              f"{r['process_s']} | {r['exit']} |" for r in report["steps"]]
    lines += ["", "| seed | cell | kernel | registers | spill bytes | grid | warps | stages | load bytes |",
              "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | --- |"]
    lines += [f"| {k['seed']} | {k['cell']} | {k['kernel']} | {k['registers']} | {k['spill_bytes']} | "
              f"{'x'.join(map(str, k['grid']))} | {k['num_warps']} | {k['num_stages']} | "
              f"{', '.join(map(str, k.get('load_bytes', []))) or '-'} |" for k in report["kernels"]]
    keys = {"seed", "cell", "kernel", "registers", "spill_bytes", "grid", "num_warps", "num_stages"}
    malformed = [k for k in report["kernels"] if not keys <= set(k) or not isinstance(k["grid"], list)]
    whole = not malformed and ("kernels" not in steps or bool(report["kernels"]))
    if not whole:
        lines.append(f"\nThe kernels table lacks {sorted(keys)} in {len(malformed)} rows, or is empty.")
    return whole and all(r["exit"] == 0 for r in report["steps"]), "\n".join(lines)


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
