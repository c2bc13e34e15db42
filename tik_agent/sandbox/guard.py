"""Runtime defence in depth for the sandbox worker: a ``sys.addaudithook`` policy.

Installed inside the worker process after torch and triton are imported (and, on
CUDA, after the device and Triton's driver are initialised) and before the candidate
file is loaded.  From then on the process may not:

* use the network (any ``socket.*`` event, urllib, http.client ...);
* write, create, rename, delete or chmod files outside its sandbox directory
  (``/dev/null`` excepted), or read credentials (``~/.ssh``, ``.env``, ``.netrc``,
  another process's ``/proc/<pid>/``);
* start programs other than the ``allow_subprocess`` ones (ptxas, cc and ldconfig on
  the CUDA path), fork, exec, call ``os.system`` or signal other processes;
* ``dlopen`` libraries from outside the sandbox and the torch/triton install;
* change the environment, resource limits, tracing or profiling hooks, add audit
  hooks, or list every object in the heap through ``gc``.

A denied operation raises PermissionError at the point of the call.  Audit hooks
cannot be removed, so tests install this in a child process only.  Hooks are a
tripwire, not a security boundary: code that reaches ctypes calls can bypass them,
which is why the static rules and the process sandbox come first.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_ALWAYS_WRITABLE = frozenset({"/dev/null"})
# Path components and names under which credentials usually live.
_SECRET_COMPONENTS = frozenset(
    {".ssh", ".aws", ".azure", ".gnupg", ".docker", ".kube", ".config", ".netrc", ".git-credentials",
     ".pypirc", ".npmrc", ".env", ".anthropic", ".openai", ".huggingface"}
)  # fmt: skip
_SECRET_FILES = frozenset({"/etc/shadow", "/etc/gshadow", "/etc/sudoers"})
_DENIED_EVENTS = frozenset(
    {
        "os.system", "os.exec", "os.fork", "os.forkpty", "os.killpg", "pty.spawn", "os.putenv", "os.unsetenv",
        "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys._current_frames",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        "resource.setrlimit", "resource.prlimit", "webbrowser.open",
    }
)  # fmt: skip
_DENIED_PREFIXES = ("socket.", "urllib.", "http.client.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.")
# Events whose listed argument positions are paths that will be written or removed,
# with the position of their dir_fd argument (None if the event has none).
_PATH_EVENTS: dict[str, tuple[tuple[int, ...], int | None]] = {
    "os.remove": ((0,), 1),
    "os.rmdir": ((0,), 1),
    "os.mkdir": ((0,), 2),
    "os.rename": ((0, 1), None),
    "os.link": ((1,), None),
    "os.symlink": ((1,), 2),
    "os.truncate": ((0,), None),
    "os.chmod": ((0,), 2),
    "os.chown": ((0,), 3),
    "os.utime": ((0,), 4),
    "os.setxattr": ((0,), None),
    "os.removexattr": ((0,), None),
    "shutil.copyfile": ((1,), None),
    "shutil.copymode": ((1,), None),
    "shutil.copystat": ((1,), None),
    "shutil.copytree": ((1,), None),
    "shutil.rmtree": ((0,), 1),
    "shutil.move": ((0, 1), None),
    "shutil.chown": ((0,), None),
    "shutil.make_archive": ((0,), None),
    "shutil.unpack_archive": ((1,), None),
}


def _real(path: Any, dir_fd: Any = None) -> str | None:
    """Absolute, symlink-free form of an audited path; None for descriptors."""
    if isinstance(path, int):
        return None
    text = os.fsdecode(path)
    if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(text):
        text = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), text)
    return os.path.realpath(text)


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


@dataclass(frozen=True)
class _Policy:
    sandbox: str
    library_roots: tuple[str, ...]
    programs: frozenset[str]
    pid: int

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in _DENIED_EVENTS or event.startswith(_DENIED_PREFIXES):
            raise PermissionError(f"sandbox: '{event}' is not allowed")
        handler = _HANDLERS.get(event)
        if handler is not None:
            handler(self, event, args)
        elif event in _PATH_EVENTS:
            self._check_paths(event, args)

    def _check_open(self, event: str, args: tuple[Any, ...]) -> None:
        path, mode, flags = args
        real = _real(path)
        if real is None:
            return
        writing = (flags or 0) & _WRITE_FLAGS or any(c in (mode or "") for c in "wax+")
        if writing:
            self._require_writable(event, real)
        elif self._secret(real):
            raise PermissionError(f"sandbox: reading {real} is not allowed")

    def _secret(self, real: str) -> bool:
        """Credential files, and anything under another process's /proc/<pid>/."""
        parts = real.split(os.sep)
        foreign_proc = len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != self.pid
        return (
            foreign_proc
            or real in _SECRET_FILES
            or bool(_SECRET_COMPONENTS.intersection(parts))
            or parts[-1].startswith(".env")
        )

    def _check_paths(self, event: str, args: tuple[Any, ...]) -> None:
        positions, dir_fd_at = _PATH_EVENTS[event]
        dir_fd = args[dir_fd_at] if dir_fd_at is not None and dir_fd_at < len(args) else None
        for position in positions:
            real = _real(args[position], dir_fd)
            if real is not None:
                self._require_writable(event, real)

    def _require_writable(self, event: str, real: str) -> None:
        if real not in _ALWAYS_WRITABLE and not _inside(real, (self.sandbox,)):
            raise PermissionError(f"sandbox: '{event}' on {real} (outside {self.sandbox}) is not allowed")

    def _check_program(self, event: str, args: tuple[Any, ...]) -> None:
        """subprocess.Popen(executable, args, cwd, env) or os.posix_spawn(path, argv, env)."""
        if event == "subprocess.Popen":
            executable, argv, cwd, env = args
        else:
            (executable, argv, env), cwd = args, None
        if executable is None:
            argv = [argv] if isinstance(argv, (str, bytes)) else list(argv)
            executable = argv[0] if argv else ""
        name = os.fsdecode(executable)
        if os.sep in name:
            found = os.path.join(os.fsdecode(cwd), name) if cwd is not None else name
        else:  # looked up on the PATH the child will get, which the caller may have set
            found = shutil.which(name, path=os.pathsep.join(os.get_exec_path(env))) or name
        path, real = os.path.abspath(found), os.path.realpath(found)
        allowed = os.path.basename(name) in self.programs or real in self.programs
        if not allowed or _inside(path, (self.sandbox,)) or _inside(real, (self.sandbox,)):
            raise PermissionError(f"sandbox: running '{name}' is not allowed")

    def _check_kill(self, event: str, args: tuple[Any, ...]) -> None:
        if args[0] != self.pid:
            raise PermissionError(f"sandbox: signalling process {args[0]} is not allowed")

    def _check_dlopen(self, event: str, args: tuple[Any, ...]) -> None:
        name = args[0]
        text = os.fsdecode(name) if name is not None else ""
        if not os.path.isabs(text) or not _inside(os.path.realpath(text), self.library_roots):
            raise PermissionError(f"sandbox: loading library {text or '<main program>'} is not allowed")

    def _check_setattr(self, event: str, args: tuple[Any, ...]) -> None:
        if args[1] in {"__code__", "__globals__", "__builtins__"}:
            raise PermissionError(f"sandbox: replacing {args[1]} is not allowed")


_HANDLERS: dict[str, Callable[[_Policy, str, tuple[Any, ...]], None]] = {
    "open": _Policy._check_open,
    "subprocess.Popen": _Policy._check_program,
    "os.posix_spawn": _Policy._check_program,
    "os.kill": _Policy._check_kill,
    "ctypes.dlopen": _Policy._check_dlopen,
    "object.__setattr__": _Policy._check_setattr,
}


def _package_root(name: str) -> str | None:
    """site-packages (or equivalent) directory holding an installed package."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.realpath(list(spec.submodule_search_locations)[0]))


def install_guard(sandbox_dir: Path, allow_subprocess: Sequence[str] = ()) -> None:
    """Install the audit-hook policy for the rest of this process's life.

    ``sandbox_dir`` is the only writable place; point TMPDIR, HOME and
    TRITON_CACHE_DIR into it (``scrubbed_environment(workdir=...)`` does).
    ``allow_subprocess`` names programs (basenames such as ``"ptxas"``, or absolute
    paths) the worker may start; none may live inside the sandbox directory, where
    the candidate could have written it.  Triton's CUDA backend runs ``ptxas``, the C
    compiler (``cc``/``gcc``) for its launcher and ``ldconfig``; torch's lazy CUDA
    initialisation sets an environment variable, so call ``torch.cuda.init()`` (and
    compile one kernel) before installing the guard.
    """
    sandbox = os.path.realpath(sandbox_dir)
    if not os.path.isdir(sandbox):
        raise ValueError(f"install_guard: sandbox_dir {sandbox_dir} is not a directory")
    roots = {sandbox} | {root for root in map(_package_root, ("torch", "triton")) if root}
    programs = frozenset(os.path.realpath(p) if os.path.isabs(p) else p for p in allow_subprocess)
    policy = _Policy(sandbox, tuple(sorted(roots)), programs, os.getpid())
    sys.dont_write_bytecode = True  # importlib would otherwise try to write .pyc files
    sys.addaudithook(policy.audit)
