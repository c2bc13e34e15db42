"""A warm interpreter for the trusted seed's workers on the CPU: torch, Triton and
the worker's modules imported once, then one fork per worker run.

Every worker used to start a fresh interpreter, and about 3 s of each start is
``import torch`` and Triton's set-up (docs/benchmarks.md, 2026-12-03 evening).
The seed's workers (``reference`` mode) run only the user's own seed, on cases
and timed inputs the trusted side drew; no candidate code ever runs in them.
So they fork from this server instead, and keep the rest of the worker's
contract: the same :func:`tik_agent.sandbox.worker.main` on the same request
in the same directory, a scrubbed environment, its own session, the same
resource limits, stdout and stderr in files, a wall-clock limit and a watchdog.
What they do not get is the operating system's sandbox (namespaces, mount view,
seccomp, Landlock), which is there for candidates.  A candidate's worker never
forks from here: it starts a fresh interpreter under the full sandbox, as before.

Only on the CPU (the Triton interpreter).  On a GPU a forked child would share
nothing useful (each worker compiles into its own cache) and CUDA cannot be
used across fork; GPU workers start fresh.  ``TIK_AGENT_SEED_FORKS=0`` turns
the server off.

The server is single-threaded (it reaps by polling), so a fork copies no other
thread's locks.  It dies with its parent: it reads its requests on a pipe, and
at end of file it kills its children and exits; each child has the death
signal set against the server.  When the server cannot start, the seed's
workers start fresh interpreters, with a warning.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tik_agent.sandbox.process import (
    REAP_GRACE_SECONDS, STDERR_NAME, STDOUT_NAME, WATCHDOG_POLL_SECONDS, SandboxLimits, SandboxResult, child_setup,
    kill_group, read_tail, scrubbed_environment,
)

log = logging.getLogger(__name__)

SWITCH = "TIK_AGENT_SEED_FORKS"
READY_S = 120.0
_POLL_S = 0.02


def enabled(device: str) -> bool:
    """Whether the seed's workers on ``device`` fork from the warm server: on the CPU, unless
    switched off, and only where no candidate can reach the server (:func:`out_of_reach`)."""
    return device == "cpu" and os.environ.get(SWITCH, "1") != "0" and out_of_reach()


def out_of_reach(isolation=None) -> bool:
    """Whether candidates' workers are kept from the server's process: a PID namespace hides
    it, and Landlock denies even the read-mode ptrace check that ``/proc/<pid>/fd`` needs.

    Without either (the bare process sandbox with seccomp alone, which stops the ptrace call
    but not that open) a candidate of the same uid could open a write end of the server's
    request pipe and have its own file run as a seed, outside the sandbox; then the seed's
    workers start fresh in the sandbox like everyone else's."""
    from tik_agent.sandbox import isolation as isolations

    iso = isolation if isolation is not None else isolations.best()
    return "pid" in iso.layers or iso.landlock


@dataclass
class _Job:
    id: int
    done: threading.Event = field(default_factory=threading.Event)
    status: int | None = None      # the exit code, or minus the signal that killed it
    error: str | None = None       # why there is no status (the fork failed, the server died)


class _Server:
    """The parent's side: the server's process, and a thread that reads its replies."""

    def __init__(self) -> None:
        import tik_agent

        root = str(Path(tik_agent.__file__).resolve().parents[1])
        boot = (f"import sys; sys.path.insert(0, {root!r}); "
                "from tik_agent.sandbox.forkserver import serve; sys.exit(serve())")
        self._errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors,
            env=scrubbed_environment({"TRITON_INTERPRET": "1"}), cwd="/", close_fds=True,
            # Its own process group, so a terminal's Ctrl-C reaches the parent only; not its own session,
            # which marks a sandbox (tik_agent.search.interrupts): its children, the workers, are those.
            process_group=0)
        self._write = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._ids = 0
        self.ready = threading.Event()
        self.dead = False
        self.served = 0
        self.owner = os.getpid()  # a forked copy of this process must not share the pipes
        threading.Thread(target=self._read, name="tik-agent-forkserver", daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                reply = json.loads(line)
                if reply.get("ready"):
                    self.ready.set()
                    continue
                job = self._jobs.pop(reply["id"], None) if "status" in reply or "error" in reply else None
                if job is not None:
                    job.status, job.error = reply.get("status"), reply.get("error")
                    job.done.set()
        except (ValueError, KeyError, OSError) as exc:  # a torn reply: the server is not to be trusted with more
            log.warning("the seed's fork server sent an unreadable reply (%s); it is stopped", type(exc).__name__)
            self.proc.kill()
        finally:
            self.dead = True
            self.ready.set()
            for job in list(self._jobs.values()):
                job.error = "the fork server died"
                job.done.set()

    def errors(self) -> str:
        self._errors.seek(0)
        return self._errors.read()[-2000:].decode("utf-8", errors="replace")

    def _send(self, message: dict) -> bool:
        with self._write:
            try:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()
                return True
            except (BrokenPipeError, ValueError, OSError):
                return False

    def submit(self, workdir: Path, env: dict[str, str], limits: SandboxLimits) -> _Job | None:
        with self._write:
            self._ids += 1
            job = _Job(self._ids)
            self._jobs[job.id] = job
        sent = self._send({"op": "run", "id": job.id, "workdir": str(workdir), "env": env,
                           "limits": dataclasses.asdict(limits)})
        if not sent or self.dead:
            self._jobs.pop(job.id, None)
            return None
        with self._write:
            self.served += 1
        return job

    def kill(self, job: _Job) -> None:
        self._send({"op": "kill", "id": job.id})

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=REAP_GRACE_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self._errors.close()


_LOCK = threading.Lock()
_current: _Server | None = None
_broken = False


def _server() -> _Server | None:
    """The running server, started (or restarted after a death) on first use; None when it cannot start."""
    global _current, _broken
    with _LOCK:
        if _broken:
            return None
        if _current is None or _current.dead or _current.owner != os.getpid():
            if _current is None:
                atexit.register(shutdown)
            elif _current.owner == os.getpid():
                _current.close()  # dead: its pipes and its error file
            try:
                _current = _Server()
            except OSError as exc:
                log.warning("the seed's fork server could not start (%s); seed workers start fresh "
                            "interpreters", exc)
                _current, _broken = None, True
                return None
        server = _current
    if server.ready.wait(READY_S) and not server.dead:
        return server
    with _LOCK:
        if not _broken:
            log.warning("the seed's fork server did not start; seed workers start fresh interpreters: %s",
                        server.errors().strip().splitlines()[-1:] or "no message")
        _broken = True
    server.close()
    return None


def shutdown() -> None:
    """Stop the server (its children are killed); the next seed worker starts a new one."""
    global _current
    with _LOCK:
        server, _current = _current, None
    if server is not None and server.owner == os.getpid():
        server.close()


def server_pid() -> int | None:
    """The running server's pid (its children are the seed's workers), or None."""
    server = _current
    return server.proc.pid if server is not None and not server.dead else None


def runs_served() -> int:
    """How many worker runs the current server was handed (tests: that the seed's workers fork)."""
    server = _current
    return server.served if server is not None else 0


def run_trusted(workdir: Path, limits: SandboxLimits, env: dict[str, str], *,
                watchdog=None) -> SandboxResult | None:
    """The worker on ``workdir``'s request, forked from the warm server, under
    :func:`tik_agent.sandbox.process.run_sandboxed`'s limits, watchdog and result;
    None when the server is unavailable, or died under the worker (then the worker's
    result is the server's fault, not the seed's: start it again fresh)."""
    server = _server()
    if server is None:
        return None
    workdir = Path(workdir)
    start = time.monotonic()
    with (workdir / STDOUT_NAME).open("w+b") as out, (workdir / STDERR_NAME).open("w+b") as err:
        job = server.submit(workdir, dict(env), limits)
        if job is None:
            return None
        reason: str | None = None
        try:
            deadline = start + limits.wall_seconds
            while not job.done.wait(WATCHDOG_POLL_SECONDS):
                reason = watchdog() if watchdog is not None else None
                if reason or time.monotonic() >= deadline:
                    break
        except BaseException:  # KeyboardInterrupt above all: never leave the child running
            server.kill(job)
            job.done.wait(REAP_GRACE_SECONDS)
            raise
        exited = job.done.is_set()
        if not exited:
            server.kill(job)
            job.done.wait(REAP_GRACE_SECONDS)
        wall = time.monotonic() - start
        stdout, stderr = read_tail(out), read_tail(err)
    if job.error:
        if exited:  # nobody asked for a kill: the server failed the worker
            log.warning("the seed's fork server failed a worker (%s); it starts fresh instead", job.error)
            return None
        stderr += f"\n[fork server: {job.error}]"
    if job.status is None:
        returncode, killed_by = None, int(signal.SIGKILL)
    elif job.status < 0:
        returncode, killed_by = None, -job.status
    else:
        returncode, killed_by = job.status, None
    return SandboxResult(returncode, not exited, killed_by, wall, stdout, stderr, None, reason or None)


# ---- the server's side ------------------------------------------------------------------------


def serve() -> int:
    """The server's main loop: import once, then fork a worker per request, reap, report."""
    from tik_agent.backends import device as devices
    from tik_agent.sandbox.netns import load_libc

    devices.prepare("cpu")
    import torch  # noqa: F401
    import triton  # noqa: F401

    # What every worker imports, so that a forked child finds it loaded.
    from tik_agent.sandbox import guard, harness, launches, timed, worker  # noqa: F401
    from tik_agent.spec import cases, schema  # noqa: F401

    requests, replies = os.dup(0), os.dup(1)  # duplicates are not inherited: a child closes them below
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    libc = load_libc()
    children: dict[int, int] = {}  # pid -> job id, until reaped
    _reply(replies, {"ready": True})
    pending = b""
    while True:
        readable, _, _ = select.select([requests], [], [], _POLL_S)
        if readable:
            chunk = os.read(requests, 1 << 16)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _handle(json.loads(line), children, replies, (requests, replies, devnull), libc)
        _reap(children, replies)
    for pid in children:
        kill_group(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return 0


def _reply(fd: int, message: dict) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")


def _handle(request: dict, children: dict[int, int], replies: int, fds: tuple[int, ...], libc) -> None:
    if request["op"] == "kill":
        for pid, job in children.items():
            if job == request["id"]:  # not yet reaped, so the pid (and group) is still the child's
                kill_group(pid)
                os.kill(pid, signal.SIGKILL)  # before its setsid() the child has no group of its own
        return
    try:
        pid = os.fork()
    except OSError as exc:
        _reply(replies, {"id": request["id"], "error": f"fork failed: {exc}"})
        return
    if pid == 0:
        _child(request, fds, libc)
    children[pid] = request["id"]


def _reap(children: dict[int, int], replies: int) -> None:
    for pid in list(children):
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            continue
        kill_group(pid)  # grandchildren left behind by a finished child
        _, status = os.waitpid(pid, 0)
        _reply(replies, {"id": children.pop(pid), "status": os.waitstatus_to_exitcode(status)})


def _child(request: dict, fds: tuple[int, ...], libc) -> None:
    """In the forked child: become the worker of ``request``; never returns."""
    code = 1
    try:
        for fd in fds:
            os.close(fd)
        os.setsid()
        child_setup(SandboxLimits(**request["limits"]), libc, False)()
        os.chdir(request["workdir"])
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, name in ((1, STDOUT_NAME), (2, STDERR_NAME)):
            target = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            os.dup2(target, fd)
            os.close(target)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR is the worker's directory now
        from tik_agent.sandbox.worker import REQUEST_FILE, main

        code = main([REQUEST_FILE])
    except SystemExit as exc:  # as a fresh interpreter exits on it
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
