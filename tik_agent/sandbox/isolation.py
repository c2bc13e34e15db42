"""The operating system as the sandbox: which isolation a worker runs under.

Strongest first, each probed once per process with a real start:

* ``bwrap`` (bubblewrap): its own PID, network, IPC and UTS namespaces with a
  fresh ``/proc``; a read-only root holding only the system libraries, the Python
  install, site-packages and the tik_agent package, with the sandbox directory the
  one writable place (its input files bound read-only on top, so the candidate
  cannot replace the seed it is timed against); ``--die-with-parent``.  Started
  as root it is not given a user namespace (a uid mapping would keep the real uid
  0): ``setpriv`` drops to ``nobody`` with no capabilities and no-new-privileges.
  As a normal user it maps the user's own uid into a user namespace.
* ``unshare``/``setpriv`` (util-linux): the same namespaces and uid drop but no
  private mount view; Landlock then is what hides and protects the filesystem.
* ``process``: the process sandbox of :mod:`tik_agent.sandbox.process` alone.

In every mode the program is started through :mod:`tik_agent.sandbox.confine`
(seccomp and Landlock) when the kernel offers them.  Every process a worker starts
dies with it: the namespace's init is killed with it (bwrap's ``--die-with-parent``,
unshare's ``--kill-child``), which takes the whole PID namespace along.

Why these tools: bubblewrap is the one widely packaged program that builds a
whole mount view (read-only binds, tmpfs root, fresh /proc) in one unprivileged
or root exec, and it works both as root in CI and as a normal user with user
namespaces; util-linux is on every Linux, so it is the fallback.  Seccomp and
Landlock come from the kernel in every mode and need no privileges.

CUDA is not tested here (no GPU on the project's CPU machines): when ``/dev/nvidia*``
exist they are bound into the view with ``/sys`` and the whole of ``/proc`` readable,
which is what the driver is known to need; if that is not enough on a GPU node, the
probe fails and the next mechanism is used, with its notice.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.util
import logging
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.sandbox import confine, isolation_probe
from tik_agent.sandbox.environment import scrubbed_environment
from tik_agent.sandbox.netns import network_isolation_available

log = logging.getLogger(__name__)

LAYERS = ("user", "pid", "mount", "net", "nnp", "seccomp", "landlock")
FULL, PARTIAL, PROCESS_LEVEL = "full", "partial", "process"
NOBODY = 65534
MODES = ("auto", "strict")
_CONTAINED = ("user", "pid", "mount", "net", "nnp")
_PROBE_SECONDS = 60
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime",
              "alternatives")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_PROC_FILES = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys/kernel", "/proc/sys/vm")
_SETPRIV = ("--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", "--")


def level_of(layers: Sequence[str]) -> str:
    """``full``: every namespace layer and at least one kernel policy; ``process``: none of them."""
    held = set(layers)
    if set(_CONTAINED) <= held and held & {"seccomp", "landlock"}:
        return FULL
    return PARTIAL if held & {"user", "pid", "mount", "seccomp", "landlock"} else PROCESS_LEVEL


@dataclass(frozen=True)
class IsolationReport:
    """Which isolation a worker ran under, recorded with every verdict."""

    level: str
    mechanism: str
    layers: tuple[str, ...]
    why: str = ""  # why a stronger mechanism was not used (not recorded)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(layer for layer in LAYERS if layer not in self.layers)

    def notice(self) -> str | None:
        """One line for the screen when the isolation is not full, else None."""
        if self.level == FULL:
            return None
        why = f" ({self.why})" if self.why else ""
        return (f"sandbox: {self.level} isolation only, by {self.mechanism}{why}; missing: "
                f"{', '.join(self.missing)}; full isolation needs bubblewrap and Landlock or seccomp")

    def to_dict(self) -> dict:
        return {"level": self.level, "mechanism": self.mechanism, "layers": list(self.layers)}

    @classmethod
    def from_dict(cls, d: dict) -> "IsolationReport":
        return cls(str(d["level"]), str(d["mechanism"]), tuple(str(x) for x in d["layers"]))


@dataclass(frozen=True)
class Isolation:
    """How to start one sandboxed program; build with :func:`best` (or use :data:`PROCESS`)."""

    mechanism: str                  # bwrap, unshare or process
    namespaces: tuple[str, ...] = ()  # layers the wrapper itself provides
    drop_uid: bool = False          # root parent: the program runs as nobody
    landlock: bool = False
    seccomp: bool = False
    why: str = ""                   # why a stronger mechanism was not used

    @property
    def layers(self) -> tuple[str, ...]:
        held = set(self.namespaces) | {"nnp"} | ({"landlock"} if self.landlock else set()) | (
            {"seccomp"} if self.seccomp else set())
        return tuple(layer for layer in LAYERS if layer in held)

    def report(self) -> IsolationReport:
        return IsolationReport(level_of(self.layers), self.mechanism, self.layers, self.why)

    def prepare(self, workdir: Path, append_only: Sequence[str] = ()) -> None:
        """Make ``workdir`` writable by the uid the program will run as, and each directory
        named in ``append_only`` open to new entries (sticky and world-writable, as /tmp):
        what is in it stays the caller's, which the dropped uid cannot change or remove."""
        if not self.drop_uid:
            return
        os.chown(workdir, NOBODY, NOBODY)
        for entry in append_only:
            if (Path(workdir) / entry).is_dir():
                os.chmod(Path(workdir) / entry, 0o1777)

    def wrap(self, argv: Sequence[str], workdir: Path, keep_private: Sequence[str] = (),
             append_only: Sequence[str] = ()) -> list[str]:
        """``argv`` as started under this isolation in ``workdir``.

        Entries of ``workdir`` that exist now are the program's inputs and become
        read-only in the bwrap view, except the names in ``keep_private``.  A directory
        named in ``append_only`` (a warm Triton cache) is bound writable, and each entry
        already in it read-only: the program adds entries and changes none (under bwrap;
        elsewhere :meth:`prepare`'s modes are what hold).
        """
        workdir = Path(workdir).resolve()
        argv = list(argv)
        if self.landlock or self.seccomp:
            read, write = _landlock_paths(workdir, own_proc="pid" in self.namespaces)
            policy = {"landlock": self.landlock, "seccomp": self.seccomp, "read": read, "write": write,
                      "list": [_package_root()]}
            argv = confine.launcher_argv(sys.executable, _package_root(), policy, argv)
        if self.drop_uid:
            argv = [_tool("setpriv"), *_SETPRIV, *argv]
        if self.mechanism == "bwrap":
            return [_tool("bwrap"), *_bwrap_args(workdir, root=os.geteuid() == 0, keep_private=keep_private,
                                                 append_only=append_only), "--", *argv]
        if self.mechanism == "unshare":
            user = [] if os.geteuid() == 0 else ["--user", "--map-current-user"]
            return [_tool("unshare"), *user, "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--net",
                    "--ipc", "--uts", "--", *argv]
        return argv


PROCESS = Isolation("process")  # the bare process sandbox: for tests of the other layers alone


def _tool(name: str) -> str:
    return shutil.which(name) or name


def _package_root() -> str:
    import tik_agent

    return str(Path(tik_agent.__file__).resolve().parents[1])


def _cuda_devices() -> list[str]:
    return sorted(p for p in glob.glob("/dev/nvidia*") if os.path.exists(p))


def _python_paths() -> list[str]:
    """What the worker's interpreter needs: its install, the venv, site-packages, tik_agent."""
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), os.path.abspath(sys.prefix),
             os.path.dirname(os.path.realpath(sys.executable)), str(Path(_package_root()) / "tik_agent")}
    paths.update(os.path.realpath(p) for p in site.getsitepackages())
    for name in ("torch", "triton", "numpy", "pyseccomp"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            paths.add(os.path.dirname(os.path.dirname(os.path.realpath(spec.origin))))
    for var in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        paths.update(os.path.realpath(p) for p in os.environ.get(var, "").split(os.pathsep) if os.path.isabs(p))
    return _outermost(p for p in paths if os.path.exists(p))


def _outermost(paths) -> list[str]:
    """Sorted, without any path that lies beneath another one."""
    result: list[str] = []
    for path in sorted(set(paths)):
        if not any(path == kept or path.startswith(kept.rstrip("/") + "/") for kept in result):
            result.append(path)
    return result


def _landlock_paths(workdir: Path, own_proc: bool) -> tuple[list[str], list[str]]:
    """Read and write allowlists; ``/proc`` is readable whole only where it shows just the sandbox."""
    cuda = _cuda_devices()
    read = ["/usr", *_SYSTEM_DIRS, *(f"/etc/{name}" for name in _ETC_FILES), *_python_paths(), *_DEVICES,
            str(workdir)]
    read += ["/proc"] if own_proc or cuda else list(_PROC_FILES)
    read += ["/sys", *cuda] if cuda else ["/sys/devices/system/cpu"]
    write = [str(workdir), "/dev/null", *cuda] + (["/dev/shm"] if cuda else [])
    return read, write


def _bwrap_args(workdir: Path, *, root: bool, keep_private: Sequence[str], append_only: Sequence[str] = ()) -> list[str]:
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]
    if not root:
        args += ["--unshare-user", *(["--disable-userns"] if _bwrap_knows("--disable-userns") else [])]
    made: set[str] = {"/"}

    def bind(kind: str, path: str) -> None:
        # Directories bwrap creates on the way get mode 0700 when it runs as root,
        # which would lock nobody out of everything beneath them: make them first.
        for parent in reversed(Path(path).parents):
            if str(parent) not in made:
                made.add(str(parent))
                args.extend(["--perms", "0755", "--dir", str(parent)])
        args.extend([kind, path, path])

    bind("--ro-bind", "/usr")
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args.extend(["--symlink", os.readlink(path), path])
        elif os.path.isdir(path):
            bind("--ro-bind", path)
    for name in _ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            bind("--ro-bind", f"/etc/{name}")
    args.extend(["--proc", "/proc", "--dev", "/dev"])
    cuda = _cuda_devices()
    for dev in cuda:
        args.extend(["--dev-bind", dev, dev])
    for path in ["/sys"] if cuda else ["/sys/devices/system/cpu"]:
        if os.path.exists(path):
            bind("--ro-bind", path)
    for path in _python_paths():
        if not path.startswith(("/usr/", "/lib")):
            bind("--ro-bind", path)
    bind("--bind", str(workdir))
    for entry in sorted(os.listdir(workdir)):
        if entry in append_only and (workdir / entry).is_dir():
            # A mount point of its own (it cannot be renamed away and replaced), writable;
            # what it holds now read-only, each entry a mount point too.
            args.extend(["--bind", str(workdir / entry), str(workdir / entry)])
            for held in sorted(os.listdir(workdir / entry)):
                args.extend(["--ro-bind", str(workdir / entry / held), str(workdir / entry / held)])
        elif entry not in keep_private:
            args.extend(["--ro-bind", str(workdir / entry), str(workdir / entry)])
    return args + ["--chdir", str(workdir), "--remount-ro", "/"]


@functools.lru_cache(maxsize=None)
def _bwrap_knows(option: str) -> bool:
    """Whether this bubblewrap has ``option`` (--disable-userns came with 0.8)."""
    try:
        text = subprocess.run([_tool("bwrap"), "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return option in text


def _probe(isolation: Isolation) -> str | None:
    """Start what a worker starts under ``isolation`` (:mod:`tik_agent.sandbox.isolation_probe`);
    None when it worked, else why not."""
    not_root = isolation.drop_uid or os.geteuid() != 0
    with tempfile.TemporaryDirectory(prefix="tik-probe-") as tmp:
        (Path(tmp) / "probe.py").write_text(isolation_probe.SOURCE)
        isolation.prepare(Path(tmp))
        argv = isolation.wrap(isolation_probe.argv(_package_root(), not_root, bool(_cuda_devices())), Path(tmp))
        try:
            proc = subprocess.run(argv, cwd=tmp, env=scrubbed_environment(workdir=Path(tmp)),
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_PROBE_SECONDS)
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or "").strip().splitlines()
    return f"exit {proc.returncode}" + (f": {lines[-1][:200]}" if lines else "")


def _unreachable_for_nobody() -> str | None:
    """Without a mount view of its own, a worker dropped to nobody reads the interpreter, its
    libraries and the package where they are installed: the first folder on the way to one of
    them that others cannot enter (or, at the end, read), with its mode; None when there is none."""
    for target in [os.path.realpath(sys.executable), *_python_paths()]:
        path = target
        while path != "/":
            path = os.path.dirname(path)
            mode = os.stat(path).st_mode
            if not mode & 0o001:
                return f"{path} (mode {mode & 0o777:04o})"
        if os.path.isdir(target) and (os.stat(target).st_mode & 0o005) != 0o005:
            return f"{target} (mode {os.stat(target).st_mode & 0o777:04o})"
    return None


@functools.lru_cache(maxsize=1)
def best() -> Isolation:
    """The strongest isolation this machine gives, probed once; ``why`` says what was skipped."""
    landlock = confine.landlock_abi() >= 1
    seccomp = confine.seccomp_available()
    root = os.geteuid() == 0
    skipped = []
    candidates = []  # each with what it lacks, said only if it is reached
    if shutil.which("bwrap"):
        candidates.append((Isolation("bwrap", _CONTAINED, root, landlock, seccomp), None))
    else:
        skipped.append("bwrap: not installed")
    if shutil.which("unshare"):
        drop, lacks = root and bool(shutil.which("setpriv")), None
        if drop and (blocked := _unreachable_for_nobody()) is not None:
            # a worker dropped to nobody could not start: unshare keeps the caller's uid, and says why
            drop, lacks = False, (f"setpriv: nobody cannot reach {blocked}, above the interpreter or the "
                                  f"package (install where others can read, or install bubblewrap)")
        user = ("user",) if drop or not root else ()
        candidates.append((Isolation("unshare", (*user, "pid", "net"), drop, landlock, seccomp), lacks))
    else:
        skipped.append("unshare: not installed")
    for isolation, lacks in candidates:
        if lacks:
            skipped.append(lacks)
        why = _probe(isolation)
        if why is None:
            return dataclasses.replace(isolation, why="; ".join(skipped))
        skipped.append(f"{isolation.mechanism}: {why}")
        log.debug("sandbox: %s does not work here (%s)", isolation.mechanism, why)
    fallback = Isolation("process", ("net",) if network_isolation_available() else (), False, landlock, seccomp)
    if (landlock or seccomp) and (why := _probe(fallback)) is not None:
        skipped.append(f"seccomp/landlock: {why}")
        fallback = Isolation("process", fallback.namespaces)
    return dataclasses.replace(fallback, why="; ".join(skipped))


def require(mode: str) -> IsolationReport:
    """Check ``--sandbox MODE`` against this machine: ``strict`` refuses anything short of full."""
    if mode not in MODES:
        raise UsageError(f"--sandbox: unknown mode {mode!r}; expected one of {list(MODES)}")
    report = best().report()
    if mode == "strict" and report.level != FULL:
        why = f" ({report.why})" if report.why else ""
        raise UsageError(f"--sandbox strict: this machine gives only {report.level} isolation, by "
                         f"{report.mechanism}{why}; missing: {', '.join(report.missing)}")
    return report
