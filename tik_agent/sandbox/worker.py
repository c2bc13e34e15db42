"""The evaluation worker: runs inside the sandbox, in its own process.

Started by :func:`worker_argv`: an isolated interpreter (``-I``: no environment,
no user site, no current directory on the path) that imports *this* copy of
tik_agent, wherever it lives (an installed wheel, an editable checkout, a git
worktree), so that the worker always runs the parent's code.

Modes:

* ``reference``: load the seed, run every parity case, save the outputs;
  when the request lists timing inputs (``digests``), also digest the seed's
  output on each of them (the trusted half of the timed-call check); with a
  ``graph`` plan, choose each cell's calls per graph and digest the seed's
  outputs of the digested rounds (:func:`tik_agent.sandbox.graphs.reference`).
* ``candidate``: load the candidate, run every parity case *before* the seed
  is loaded (the seed's outputs never exist in this process, so freed memory
  cannot hand them to the candidate), save the outputs; with a ``survey``
  plan, after the gate, the configuration survey and a parity case on both
  sides of each change it finds (:mod:`tik_agent.judge.configs`); then, when timing is
  requested, load the seed (and the parent) and time them side by side with
  the candidate in interleaved rounds, keeping a digest of the candidate's
  output of every call (:mod:`tik_agent.sandbox.timed`); with a ``graph``
  plan, then the graph phase (:mod:`tik_agent.sandbox.graphs`), its calls per
  graph read from the gate the parent opens.

With timing requested, the candidate's worker saves its parity outputs, then
reports ``waiting`` and waits for the gate file before it loads the seed.  The
parent judges parity on those outputs before it opens the gate; when the gate
says ``"proceed": false`` (parity failed, a final verdict) the worker loads
nothing more and times nothing (:mod:`tik_agent.judge.gate`).

The request is deleted as soon as it is read (it holds the secret plan's
seeds).  The worker reports its phase (load, parity, timing, recheck, digests)
in ``progress`` so that the parent can apply a limit per phase.

The worker judges nothing: tensors go to ``outputs.pt`` and facts to
``result.json``; the trusted parent compares.  It imports only what
evaluation needs (no agents, lineage or CLI code).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

REQUEST_FILE = "request.json"
RESULT_FILE = "result.json"
OUTPUTS_FILE = "outputs.pt"
PROGRESS_FILE = "progress"
# The id of the parity case the worker is running: a worker that dies (a fault reading
# memory it does not own) leaves it behind, and the parent names the case if it is one
# it asked for.
CASE_FILE = "case"
# Created by the parent when the seed's worker is done and the candidate's parity is
# judged: {"proceed": bool, "graph_calls": {cell: calls}}; timing starts only then.
GATE_FILE = "gate"
# With ``"stream": n`` in the request, each of the first n parity cases' outputs are also saved
# on their own as the case finishes (``parity-0000.pt``, ...): the parent judges those cases,
# whose answers it already knows, while the worker runs, and stops it at the first that fails
# (:mod:`tik_agent.judge.stream`).  ``outputs.pt`` is still written whole and judged last.
STREAM_FILE = "parity-{:04d}.pt"
TRACE_LIMIT = 4000


def worker_argv(request: str) -> list[str]:
    """The command line that runs this module on ``request`` in a fresh interpreter."""
    import tik_agent

    root = str(Path(tik_agent.__file__).resolve().parents[1])
    # The cyclic collector is off while torch and Triton are imported (a seventh of their
    # import time here: every collection walks the objects the imports made so far) and back
    # on before anything is loaded from the sandbox directory (:func:`_run`).
    boot = (f"import gc; gc.disable(); import sys; sys.path.insert(0, {root!r}); "
            "from tik_agent.sandbox.worker import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-c", boot, request]


def _trim(text: str, limit: int = TRACE_LIMIT) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _classify(exc: BaseException) -> str:
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    if "HostComputeError" in names:  # raised by the harness's host-ops mode, judged as an integrity failure
        return "host_compute"
    return "compile_error" if names & {"CompilationError", "InterpreterError", "CompileTimeAssertionFailure"} else "runtime_error"


def main(argv: list[str]) -> int:
    request_path = Path(argv[0]).resolve()
    workdir = request_path.parent
    request = json.loads(request_path.read_text())
    request_path.unlink()
    result: dict = {"status": "ok"}
    try:
        _run(request, workdir, result)
    finally:
        (workdir / RESULT_FILE).write_text(json.dumps(result))
    return 0


def _progress(workdir: Path):
    def report(phase: str) -> None:
        tmp = workdir / (PROGRESS_FILE + ".tmp")
        tmp.write_text(phase + "\n")
        tmp.replace(workdir / PROGRESS_FILE)

    return report


class GateTimeout(RuntimeError):
    """The gate stayed shut past the worker's own wall limit: its parent is gone."""


def _wait_at_gate(workdir: Path, timing: dict, progress, wall_seconds: float | None = None) -> dict:
    """Block until the parent opens the gate; what it says (no gate requested: proceed).  Never
    past ``wall_seconds``: the parent kills a worker by then, so a gate still shut means the
    parent died (SIGKILL) and nothing else would ever end this worker."""
    if not timing.get("gate"):
        return {"proceed": True, "graph_calls": {}}
    import time

    progress("waiting")
    gate = workdir / timing["gate"]
    deadline = None if wall_seconds is None else time.monotonic() + float(wall_seconds)
    while not gate.exists():
        if deadline is not None and time.monotonic() > deadline:
            raise GateTimeout(f"the gate stayed shut for {wall_seconds:.0f} s: the evaluation that started "
                              f"this worker is gone")
        time.sleep(0.05)
    return json.loads(gate.read_text())


def _run(request: dict, workdir: Path, result: dict) -> None:
    from tik_agent.backends import device as devices

    progress = _progress(workdir)
    progress("load")
    device = request["device"]
    devices.prepare(device)
    import torch  # noqa: F401  (imported before the guard: it loads native code)
    import triton  # noqa: F401

    from tik_agent.sandbox import launches
    from tik_agent.spec.cases import Case
    from tik_agent.sandbox.harness import KernelLoadError, Runner, load_entry
    from tik_agent.sandbox.timed import seed_digests, time_kernels
    from tik_agent.spec.schema import load_spec

    if device == "cuda":
        # CUDA's lazy start-up writes environment variables, which the guard
        # forbids once installed: start it now.  NVML (clocks) likewise loads a
        # library the guard would refuse: by its absolute path, now.
        torch.cuda.init()
        from tik_agent.backends import nvml

        nvml.preload()
    result["environment"] = devices.environment(device)
    import gc

    gc.enable()  # off since the boot line (worker_argv): the imports are done
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
    outputs: dict = {"cases": {}}
    progress("parity")
    streamed = int(request.get("stream") or 0)   # the first cases, whose answers the parent knows
    for index, raw in enumerate(request["cases"]):
        case = Case.from_dict(raw)
        (workdir / CASE_FILE).write_text(case.id)
        try:
            outputs["cases"][case.id] = runner.run_case(case).to_payload()
        except Exception as exc:  # the kernel's failure is the verdict, reported with its trace
            result.update(status=_classify(exc), case=case.id,
                          error=_trim(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            _save(outputs, workdir)
            return
        if index < streamed:
            try:
                _save({"cases": {case.id: outputs["cases"][case.id]}}, workdir, STREAM_FILE.format(index))
            except OSError:  # the stream only saves time: outputs.pt is what is judged
                streamed = 0
    # Saved before the gate: the parent judges parity on this file while the worker waits there.
    _save(outputs, workdir)
    if request.get("digests"):
        progress("digests")
        result["digests"] = seed_digests(spec, device, entry, request["digests"])
    if request.get("graph"):
        from tik_agent.sandbox.graphs import PHASE_GRAPHS, reference

        progress(PHASE_GRAPHS)
        result["graph"] = reference(spec, device, entry, request["graph"])
    timing = request.get("timing")
    gate = {"proceed": True, "graph_calls": {}}
    if timing:
        try:
            gate = _wait_at_gate(workdir, timing, progress, request.get("wall_seconds"))
        except Exception as exc:
            result.update(status=_classify(exc), case="timing",
                          error=_trim(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            return
        if gate["proceed"] is not True:  # parity failed: the verdict is given, timing would be thrown away
            return
    if request.get("survey"):
        progress("survey")
        try:
            if not _survey(request["survey"], spec, entry, runner, outputs, workdir, result):
                return  # refused: timing would be thrown away
        except Exception as exc:
            result.update(status=_classify(exc), case="survey",
                          error=_trim(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            return
    if timing:
        try:
            kernels = {"candidate": entry, "seed": load_entry(workdir / request["seed_kernel"], spec, "baseline")}
            if request.get("parent_kernel"):
                kernels["parent"] = load_entry(workdir / request["parent_kernel"], spec, "parent")
            result["timing"] = time_kernels(spec, device, kernels, timing, progress)
            if timing.get("graph"):
                from tik_agent.sandbox.graphs import graph_phase

                result["timing"]["graph"] = graph_phase(spec, device, kernels, timing["graph"], gate["graph_calls"],
                                                        progress)
            if device == "cuda" and timing.get("ceilings"):  # eval only: the device's copy and matmul ceilings
                from tik_agent.backends.device_timing import measure_ceilings

                result["timing"]["ceilings"] = measure_ceilings()
        except Exception as exc:
            result.update(status=_classify(exc), case="timing",
                          error=_trim(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def _survey(plan: dict, spec, entry, runner, outputs: dict, workdir: Path, result: dict) -> bool:
    """The configuration survey (:mod:`tik_agent.sandbox.survey`), then parity cases on both
    sides of every change it found; False when the analysis refuses the launcher."""
    from tik_agent.judge.config_cases import boundary_cases, survey_findings
    from tik_agent.sandbox.survey import run_survey

    record = run_survey(spec, entry, plan["axes"], plan.get("joint") or [], plan["seed"])
    result["survey"] = record
    found = survey_findings(plan, record)
    if found.refusal is not None:
        return False
    for case in boundary_cases(spec, plan["axes"], found, plan["seed"]):
        if case.id in outputs["cases"]:
            continue
        (workdir / CASE_FILE).write_text(case.id)
        outputs["cases"][case.id] = runner.run_case(case).to_payload()
    _save(outputs, workdir)
    return True


def _save(outputs: dict, workdir: Path, name: str = OUTPUTS_FILE) -> None:
    """Written whole, then renamed: the parent may read it while the worker waits at the gate."""
    import torch

    tmp = workdir / (name + ".tmp")
    torch.save(outputs, tmp)
    tmp.replace(workdir / name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
