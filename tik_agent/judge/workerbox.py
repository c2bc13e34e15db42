"""One sandboxed worker run: a temporary directory laid out for the worker, the
sandboxed process, and the one door through which what it hands back enters the
trusted side (scrubbed of the parent's secrets, made plain text, capped).

A file the worker left that cannot be read is :class:`UnreadableWorkerFile`, whose
message names the file and the error's type only: a parser's message quotes what
it could not parse, which is the worker's text, and that has not been through the
door."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
from contextlib import nullcontext
from pathlib import Path

from tik_agent.judge import stale_boxes
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.phases import PhaseWatch
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.redaction import scrub_text, scrub_worker_data
from tik_agent.sandbox import forkserver, hostops
from tik_agent.sandbox.confine import EXIT_CONFINE_FAILED
from tik_agent.sandbox.process import SandboxLimits, SandboxResult, open_worker_file, run_sandboxed, scrubbed_environment
from tik_agent.sandbox.worker import CASE_FILE, OUTPUTS_FILE, PROGRESS_FILE, REQUEST_FILE, RESULT_FILE, worker_argv
from tik_agent.spec.cases import count_text
from tik_agent.spec.schema import KernelSpec

RESULT_LIMIT_BYTES = 16 * 1024**2


class UnreadableWorkerFile(ValueError):
    """A worker's file that exists but cannot be parsed (torn, forged or nested too deep)."""
# scrubbed_environment(workdir=...) points TRITON_CACHE_DIR here
TRITON_CACHE = "triton-cache"


class WorkerBox:
    """A temporary directory laid out for one worker run."""

    def __init__(self, spec: KernelSpec, keep: bool):
        stale_boxes.sweep_once()  # what a killed evaluation left behind (its requests hold secrets)
        self.dir = Path(tempfile.mkdtemp(prefix=stale_boxes.prefix(keep)))
        self.keep = keep
        self.forked = False  # whether the last run's worker forked from the warm server
        spec_dir = self.dir / "spec"
        spec_dir.mkdir()
        for f in (spec.spec_path, spec.source, spec.reference):
            if f is not None:
                shutil.copy2(f, spec_dir / f.name)

    def add(self, name: str, source: Path) -> str:
        shutil.copy2(source, self.dir / name)
        return name

    def watch(self, limits: dict[str, float], basis: str = "") -> PhaseWatch:
        return PhaseWatch(self.dir / PROGRESS_FILE, limits, basis)

    def run(self, request: dict, options: EvalOptions, watch: PhaseWatch, wall: float):
        """The worker on ``request``.  The seed's (``reference`` mode: the user's own kernel, no
        candidate code) forks from the warm server where it runs (:mod:`tik_agent.sandbox.forkserver`);
        every other worker starts a fresh interpreter in the operating system's sandbox."""
        # The worker's own limit: it never waits at the gate longer, so a worker whose parent
        # died (a killed run: bwrap's --die-with-parent did not take it down) exits by itself.
        request = {**request, "wall_seconds": wall}
        (self.dir / REQUEST_FILE).write_text(json.dumps(request))
        trusted = request.get("mode") == "reference"
        watch.label = "the seed's worker" if trusted else "the candidate's worker"
        watch.cases = count_text(c.get("origin", "grid") for c in request.get("cases", []))
        extra = {}
        if options.device == "cpu":
            extra["TRITON_INTERPRET"] = "1"
        if options.cuda_device is not None:
            extra["CUDA_VISIBLE_DEVICES"] = options.cuda_device
        cache = self.dir / TRITON_CACHE
        if options.warm_cache is not None and Path(options.warm_cache).is_dir():
            # A fresh copy per evaluation: whatever a candidate writes into its cache
            # dies with its sandbox and never reaches the seed's binaries elsewhere.
            shutil.copytree(options.warm_cache, cache, dirs_exist_ok=True)
        limits = SandboxLimits(
            wall_seconds=wall,
            cpu_seconds=int(wall * 2) + 60,
            memory_bytes=options.memory_bytes if options.device == "cpu" else None,
            file_bytes=4 * 1024**3,
            max_processes=4096,
        )
        env = scrubbed_environment(extra, workdir=self.dir)
        self.forked = trusted and forkserver.enabled(options.device)
        proc = forkserver.run_trusted(self.dir, limits, env, watchdog=watch) if self.forked else None
        if proc is None:
            self.forked = False
            (self.dir / REQUEST_FILE).write_text(json.dumps(request))  # a failed fork's worker took it
            # New entries only: a kernel the warm cache lacks compiles there, while the seed's
            # compiled kernels in it (timed in this worker against the candidate) stay as copied.
            proc = run_sandboxed(worker_argv(REQUEST_FILE), self.dir, limits, env, watchdog=watch,
                                 private=(REQUEST_FILE,), append_only=(TRITON_CACHE,) if cache.is_dir() else ())
        watch.finish()
        if options.save_cache is not None and proc.returncode == 0 and cache.is_dir():
            _replace_tree(cache, Path(options.save_cache))
        return from_worker(proc)

    def result(self) -> dict | None:
        with open_worker_file(self.dir / RESULT_FILE) or nullcontext() as handle:
            if handle is None:
                return None
            try:
                loaded = from_worker(json.loads(handle.read(RESULT_LIMIT_BYTES).decode("utf-8", errors="replace")))
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                return None
        # The worker writes a dict whose environment is a dict; anything else was written by
        # something else in its directory (a killed worker's file is whatever was there last).
        if not isinstance(loaded, dict) or not isinstance(loaded.get("environment", {}), dict):
            return None
        return loaded

    def outputs(self, name: str = OUTPUTS_FILE) -> dict | None:
        """The worker's outputs file (or another file of that form, ``name``: a parity case it
        streamed); :class:`UnreadableWorkerFile` when it cannot be loaded.  A missing
        ``outputs.pt`` is no cases; a missing other file is None."""
        import torch

        with open_worker_file(self.dir / name) or nullcontext() as handle:
            if handle is None:
                return {"cases": {}} if name == OUTPUTS_FILE else None
            try:
                # onto the CPU: the parent never needs a CUDA context for a worker's outputs
                loaded = torch.load(handle, weights_only=True, map_location="cpu")
            except Exception as exc:  # the worker's to write: whatever it wrote, its failure, in our words
                raise UnreadableWorkerFile(f"{name} cannot be read ({type(exc).__name__})") from None
            return from_worker(loaded)

    def case_at_death(self, asked: set[str]) -> str | None:
        """The parity case the worker was running when it died: the case file's text, kept
        only when it is one of the ``asked`` ids (the file is the candidate's to write)."""
        with open_worker_file(self.dir / CASE_FILE) or nullcontext() as handle:
            if handle is None:
                return None
            text = handle.read(4096).decode("utf-8", errors="replace")
        return text if text in asked else None

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def from_worker(value):
    """The one door for what a worker hands back (its process result, result.json,
    outputs.pt): every string in it is scrubbed of the parent's secrets, made plain
    (no control, format or bidi character but newline and tab) and capped."""
    if isinstance(value, SandboxResult):
        return dataclasses.replace(value, stdout=scrub_text(value.stdout), stderr=scrub_text(value.stderr))
    return scrub_worker_data(value)


# Workers of one evaluation run in threads and may save at the same moment: one at a time.
_REPLACING = threading.Lock()


def _replace_tree(source: Path, dest: Path) -> None:
    """Copy ``source`` to ``dest`` so that readers see the old tree or the new one, never half."""
    with _REPLACING:
        tag = f"{os.getpid()}.{threading.get_ident()}"
        tmp = dest.with_name(f".{dest.name}.{tag}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        old = dest.with_name(f".{dest.name}.{tag}.old")
        if dest.exists():
            dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)


def sandbox_failure(proc, result: dict | None, watch: PhaseWatch) -> Verdict | None:
    """A verdict for a worker that timed out, died or reported a load/run error."""
    tail = (proc.stderr or "")[-3000:]
    if proc.timed_out:
        if proc.watchdog_reason:
            return Verdict(Outcome.TIMEOUT, f"killed: {proc.watchdog_reason}", worker_log=tail)
        return Verdict(Outcome.TIMEOUT, f"killed in the {watch.phase} phase after the {proc.wall_seconds:.0f} s "
                       "wall-clock limit", worker_log=tail)
    if result is None and proc.returncode == EXIT_CONFINE_FAILED:
        return Verdict(Outcome.CRASHED, "the sandbox could not confine the worker (seccomp or Landlock "
                       "failed to apply); nothing ran", worker_log=tail)
    if result is None:
        how = f"signal {proc.signal}" if proc.signal else f"exit code {proc.returncode}"
        return Verdict(Outcome.CRASHED, f"the worker died ({how}) without a result", worker_log=tail)
    status = result.get("status")
    if status == "host_compute":  # only a checked op name is kept: the rest of the text is the candidate's
        where = f"{result['case']}: " if result.get("case") else ""
        what = hostops.reported(result.get("error", "")) or "torch compute outside a Triton launch"
        return Verdict(Outcome.INTEGRITY_FAILED, f"{where}[host-compute] {what}",
                       environment=result.get("environment", {}), worker_log=tail)
    if status in ("compile_error", "runtime_error"):
        where = f" in case {result['case']}" if result.get("case") else ""
        return Verdict(Outcome(status), f"{status.replace('_', ' ')}{where}: {result.get('error', '')}",
                       environment=result.get("environment", {}), worker_log=tail)
    return None
