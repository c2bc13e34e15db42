"""Run a worker command in a sandboxed child process.

The child gets its own session (so the whole process group can be killed), a
scrubbed environment built from an allowlist, resource limits set with
``setrlimit`` before ``exec``, a private network namespace where the kernel allows
one, and stdout/stderr redirected to files inside its working directory.  Files, not
pipes: a child that prints megabytes, or a grandchild that keeps the descriptors
open, can never block the parent.

The parent waits with a wall-clock deadline, then kills the process group with
SIGKILL; it also does so when interrupted (KeyboardInterrupt) before re-raising.

Limits worth knowing:

* ``RLIMIT_NPROC`` counts every process of the user, not only the sandbox's, and
  root is exempt from it.
* ``RLIMIT_AS`` caps virtual memory; CUDA reserves huge address ranges, so leave
  ``memory_bytes`` unset on GPU runs.
* ``RLIMIT_FSIZE`` also bounds the captured stdout/stderr files.
* A grandchild that calls ``setsid`` leaves the process group and escapes the kill
  of the bare process sandbox; under bwrap or unshare it dies with the PID
  namespace, and the audit hook in :mod:`tik_agent.sandbox.guard` forbids the worker
  to spawn one anyway.

What wraps the command (namespaces, a mount view, another uid, seccomp and
Landlock) is :mod:`tik_agent.sandbox.isolation`'s choice: by default the strongest
isolation this machine gives.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import math
import os
import resource
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tik_agent.sandbox import isolation as isolations
from tik_agent.sandbox.environment import scrubbed_environment  # noqa: F401  (callers import it from here)
from tik_agent.sandbox.isolation import Isolation, IsolationReport
from tik_agent.sandbox.netns import load_libc, network_isolation_available, unshare_network

logger = logging.getLogger(__name__)

OUTPUT_TAIL_BYTES = 20_000
REAP_GRACE_SECONDS = 30
STDOUT_NAME = "sandbox.stdout"
STDERR_NAME = "sandbox.stderr"

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_SIGNALS = frozenset(int(s) for s in signal.Signals)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one sandboxed run; ``None`` leaves a limit as inherited."""

    wall_seconds: float = 600
    cpu_seconds: int | None = None
    memory_bytes: int | None = None
    file_bytes: int | None = None
    max_processes: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.wall_seconds, bool) or not isinstance(self.wall_seconds, (int, float)):
            raise ValueError(f"SandboxLimits.wall_seconds: expected a number, got {self.wall_seconds!r}")
        if not (math.isfinite(self.wall_seconds) and self.wall_seconds > 0):
            raise ValueError(f"SandboxLimits.wall_seconds: must be finite and > 0, got {self.wall_seconds!r}")
        for name in ("cpu_seconds", "memory_bytes", "file_bytes", "max_processes"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"SandboxLimits.{name}: expected an int or None, got {value!r}")
            if value <= 0:
                raise ValueError(f"SandboxLimits.{name}: must be > 0, got {value}")


@dataclass(frozen=True)
class SandboxResult:
    """How the child ended and the tail of what it printed.

    ``returncode`` is the exit status when the child exited, ``None`` when a signal
    killed it (then ``signal`` holds the signal number).  ``timed_out`` means the
    parent killed the group at the wall-clock deadline.
    """

    returncode: int | None
    timed_out: bool
    signal: int | None
    wall_seconds: float
    stdout: str
    stderr: str
    isolation: "IsolationReport | None" = None
    # Why a watchdog callback had the child killed (then ``timed_out`` is True too).
    watchdog_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def child_setup(limits: SandboxLimits, libc: ctypes.CDLL | None, isolate_network: bool) -> Callable[[], None]:
    """The preexec_fn: runs in the child between fork and exec, so it stays minimal."""

    def setup() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limits.cpu_seconds is not None:
            # SIGXCPU at the soft limit, SIGKILL one second later at the hard limit.
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        for which, value in (
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_bytes),
            (resource.RLIMIT_NPROC, limits.max_processes),
        ):
            if value is not None:
                _, hard = resource.getrlimit(which)
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(which, (value, value))
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            if isolate_network:
                try:
                    unshare_network(libc)
                except OSError:
                    pass  # the parent's probe already warned that isolation is unavailable

    return setup


def read_tail(handle: BinaryIO, limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of an output file, read through the parent's own handle.

    Reading by descriptor, not by path, means a child that swaps the file for a
    symlink to something secret only ever shows us its own output.
    """
    size = os.fstat(handle.fileno()).st_size
    handle.seek(max(0, size - limit))
    text = handle.read(limit).decode("utf-8", errors="replace")
    return f"[... {size - limit} bytes trimmed ...]\n{text}" if size > limit else text


def open_worker_file(path: Path) -> BinaryIO | None:
    """A file the child left in its directory, opened for reading; None if there is none.

    Never through a symlink and only a regular file: a child that leaves
    ``result.json`` pointing at a secret file of the parent's only gets a refusal.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        logger.warning("refusing to read %s from the sandbox: %s", path, err)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        logger.warning("refusing to read %s from the sandbox: not a regular file", path)
        return None
    return os.fdopen(fd, "rb")


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError as err:  # only possible if the pgid was reused by another user
        logger.warning("could not kill process group %d: %s", pgid, err)


WATCHDOG_POLL_SECONDS = 0.25


def _wait_without_reaping(pid: int, deadline: float, watchdog: Callable[[], str | None] | None = None) -> bool | str:
    """Wait until ``pid`` exits or the deadline passes; True if it exited, False at the
    deadline, the watchdog's reason when the watchdog asked for a kill.

    The child is left a zombie (WNOWAIT) so its pid, which is also the process group
    id, cannot be reused before we have killed the rest of the group.
    """
    delay = 0.001
    next_poll = time.monotonic() + WATCHDOG_POLL_SECONDS
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None and info.si_pid == pid:
            return True
        now = time.monotonic()
        if watchdog is not None and now >= next_poll:
            next_poll = now + WATCHDOG_POLL_SECONDS
            reason = watchdog()
            if reason:
                return str(reason)
        remaining = deadline - now
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)


def _reap(proc: subprocess.Popen[bytes]) -> int | None:
    """Collect the exit status; None if SIGKILL has not taken effect in a long while
    (a process stuck in the kernel, e.g. in a GPU driver call)."""
    try:
        return proc.wait(timeout=REAP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        logger.error("sandbox pid %d did not die within %d s of SIGKILL", proc.pid, REAP_GRACE_SECONDS)
        return None


def run_sandboxed(
    argv: Sequence[str], workdir: Path, limits: SandboxLimits, env: Mapping[str, str],
    *, isolation: Isolation | None = None, watchdog: Callable[[], str | None] | None = None,
    private: Sequence[str] = (), append_only: Sequence[str] = (),
) -> SandboxResult:
    """Run ``argv`` in ``workdir`` under ``limits`` with exactly ``env``; never hangs.

    ``watchdog``, when given, is called about every quarter second while the child
    runs; a non-empty string it returns kills the child's group at once, and comes
    back as ``watchdog_reason`` (with ``timed_out`` set).  It must not block.

    ``env`` is used as given: build it with :func:`scrubbed_environment`.  The child's
    stdout and stderr go to ``sandbox.stdout``/``sandbox.stderr`` in ``workdir`` and
    their last 20 kB come back in the result.  ``private`` names files of ``workdir``
    that the child may remove (read before any untrusted code runs, e.g. its request);
    ``append_only`` names directories the child may add entries to but not change what
    they hold (a warm Triton cache: a kernel it lacks compiles there, and the seed's
    binaries in it stay as they are) (:meth:`~tik_agent.sandbox.isolation.Isolation.wrap`).
    ``isolation`` defaults to the strongest
    the machine gives (:func:`tik_agent.sandbox.isolation.best`); files already in
    ``workdir`` are the child's read-only inputs there.  Raises OSError if ``argv``
    cannot be started (e.g. the executable does not exist).
    """
    if not argv:
        raise ValueError("run_sandboxed: argv is empty")
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise ValueError(f"run_sandboxed: workdir {workdir} is not a directory")
    iso = isolation if isolation is not None else isolations.best()
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise FileNotFoundError(2, f"run_sandboxed: no such program: {argv[0]}")
    libc = load_libc()
    isolate = iso.mechanism == "process" and network_isolation_available()
    if iso.mechanism == "process":
        iso = dataclasses.replace(iso, namespaces=("net",) if isolate else ())
    iso.prepare(workdir, append_only)
    start = time.monotonic()
    with (workdir / STDOUT_NAME).open("w+b") as out, (workdir / STDERR_NAME).open("w+b") as err:
        proc = subprocess.Popen(
            iso.wrap(argv, workdir, keep_private=(STDOUT_NAME, STDERR_NAME, *private), append_only=append_only),
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            preexec_fn=child_setup(limits, libc, isolate),
        )
        logger.debug("sandbox pid %d started: %s", proc.pid, " ".join(argv))
        try:
            deadline = start + limits.wall_seconds
            waited = (_wait_without_reaping(proc.pid, deadline) if watchdog is None
                      else _wait_without_reaping(proc.pid, deadline, watchdog))
        except BaseException:  # KeyboardInterrupt above all: never leave the group running
            kill_group(proc.pid)
            _reap(proc)
            raise
        kill_group(proc.pid)  # also takes grandchildren left behind by a finished child
        status = _reap(proc)
        wall = time.monotonic() - start
        stdout, stderr = read_tail(out), read_tail(err)
    exited = waited is True
    reason = waited if isinstance(waited, str) else None
    if reason:
        logger.info("sandbox pid %d killed by its watchdog: %s", proc.pid, reason)
    elif not exited:
        logger.info("sandbox pid %d killed after %.1f s wall-clock limit", proc.pid, limits.wall_seconds)
    if status is None:
        returncode, killed_by = None, int(signal.SIGKILL)
    elif status < 0:
        returncode, killed_by = None, -status
    elif iso.mechanism != "process" and status > 128 and status - 128 in _SIGNALS:
        # bwrap and unshare report a signalled child as 128 + the signal number.
        returncode, killed_by = None, status - 128
    else:
        returncode, killed_by = status, None
    return SandboxResult(returncode, not exited, killed_by, wall, stdout, stderr, iso.report(), reason)
