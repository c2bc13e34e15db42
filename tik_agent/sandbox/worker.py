"""The evaluation worker: runs inside the sandbox, in its own process.

Started by :func:`worker_argv`: an isolated interpreter (``-I``: no environment,
no user site, no current directory on the path) that imports *this* copy of
tik_agent, wherever it lives (an installed wheel, an editable checkout, a git
worktree), so that the worker always runs the parent's code.

Modes:

* ``reference``: load the seed, run every parity case, save the outputs.
* ``candidate``: load the candidate, run every parity case *before* the seed
  is loaded (the seed's outputs never exist in this process, so freed memory
  cannot hand them to the candidate), save the outputs; then, when timing is
  requested, load the seed (and the parent), time them side by side with the
  candidate in interleaved rounds on fresh inputs, and finally run candidate
  then seed once more per workload cell so the trusted side can re-check the
  candidate's bits at the timing shapes.

The worker judges nothing: tensors go to ``outputs.pt`` and facts to
``result.json``; the trusted parent compares.  It imports only what
evaluation needs (no agents, lineage or CLI code).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

RESULT_FILE = "result.json"
OUTPUTS_FILE = "outputs.pt"
TRACE_LIMIT = 4000


def worker_argv(request: str) -> list[str]:
    """The command line that runs this module on ``request`` in a fresh interpreter."""
    import tik_agent

    root = str(Path(tik_agent.__file__).resolve().parents[1])
    boot = (f"import sys; sys.path.insert(0, {root!r}); "
            "from tik_agent.sandbox.worker import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-c", boot, request]


def _trim(text: str, limit: int = TRACE_LIMIT) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _classify(exc: BaseException) -> str:
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    return "compile_error" if names & {"CompilationError", "InterpreterError", "CompileTimeAssertionFailure"} else "runtime_error"


def main(argv: list[str]) -> int:
    request_path = Path(argv[0]).resolve()
    workdir = request_path.parent
    request = json.loads(request_path.read_text())
    result: dict = {"status": "ok"}
    try:
        _run(request, workdir, result)
    finally:
        (workdir / RESULT_FILE).write_text(json.dumps(result))
    return 0


def _run(request: dict, workdir: Path, result: dict) -> None:
    from tik_agent.backends import device as devices

    device = request["device"]
    devices.prepare(device)
    import torch  # noqa: F401  (imported before the guard: it loads native code)
    import triton  # noqa: F401

    from tik_agent.sandbox import launches
    from tik_agent.spec.cases import Case
    from tik_agent.sandbox.harness import KernelLoadError, Runner, load_entry
    from tik_agent.spec.schema import load_spec

    if device == "cuda":
        # CUDA's lazy start-up writes environment variables, which the guard
        # forbids once installed: start it now.
        torch.cuda.init()
    result["environment"] = devices.environment(device)
    spec = load_spec(workdir / request["spec_dir"])
    launches.install()
    if request.get("guard", True):
        from tik_agent.sandbox.guard import install_guard

        install_guard(workdir, allow_subprocess=tuple(request.get("allow_subprocess", ())))

    kernel = workdir / request["kernel"]
    try:
        entry = load_entry(kernel, spec, request["mode"])
    except KernelLoadError as exc:
        result.update(status="compile_error", error=_trim(str(exc)))
        return

    runner = Runner(entry, spec, device)
    outputs: dict = {"cases": {}, "recheck": {}}
    for raw in request["cases"]:
        case = Case.from_dict(raw)
        try:
            outputs["cases"][case.id] = runner.run_case(case).to_payload()
        except Exception as exc:  # the kernel's failure is the verdict, reported with its trace
            result.update(status=_classify(exc), case=case.id,
                          error=_trim(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            _save(outputs, workdir)
            return
    timing = request.get("timing")
    if timing:
        others = {"seed": load_entry(workdir / request["seed_kernel"], spec, "baseline")}
        if request.get("parent_kernel"):
            others["parent"] = load_entry(workdir / request["parent_kernel"], spec, "parent")
        try:
            result["timing"], outputs["recheck"] = _time(spec, device, entry, others, timing)
        except Exception as exc:
            result.update(status=_classify(exc), case="timing",
                          error=_trim(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    _save(outputs, workdir)


def _save(outputs: dict, workdir: Path) -> None:
    import torch

    torch.save(outputs, workdir / OUTPUTS_FILE)


def _time(spec, device, candidate, others, timing):
    """Interleaved rounds: each round times every kernel once per cell, in rotating order."""
    from tik_agent.backends.timers import timer_for
    from tik_agent.spec.cases import make_inputs, workload_case

    timer = timer_for(device)
    kernels = {"candidate": candidate, **others}
    names = list(kernels)
    kwargs = dict(spec.kwargs)
    samples = {cell.name: {n: [] for n in names} for cell in spec.workload_for(device)}
    serial = 0
    cell_kind = {cell.name: cell.backward for cell in spec.workload_for(device)}

    def fresh(cell):
        nonlocal serial
        serial += 1
        inputs = make_inputs(spec, workload_case(cell, 10_000 + serial), device)
        # An inference cell times the forward alone; a training cell the whole step.
        return inputs if cell.backward else inputs[: len(spec.inputs)]

    def step(fn, cell):
        return fn if cell_kind[cell.name] or not hasattr(fn, "forward") else fn.forward

    for _ in range(int(timing["warmup"])):
        for cell in spec.workload_for(device):
            for name in names:
                step(kernels[name], cell)(*fresh(cell), **kwargs)
    for r in range(int(timing["rounds"])):
        for cell in spec.workload_for(device):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                inputs = fresh(cell)
                fn = step(kernels[name], cell)
                ms, _ = timer.measure(lambda: fn(*inputs, **kwargs))
                samples[cell.name][name].append(ms)
    recheck = {}
    for cell in spec.workload_for(device):
        inputs = fresh(cell)
        # The candidate first: freed memory holds only outputs of *other* inputs,
        # so a candidate that returns stale memory cannot match the seed here.
        cand = step(candidate, cell)(*inputs, **kwargs)
        ref = step(others["seed"], cell)(*inputs, **kwargs)
        recheck[cell.name] = {"candidate": cand, "seed": ref}
    return {"timer": timer.name, "samples": samples}, recheck


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
