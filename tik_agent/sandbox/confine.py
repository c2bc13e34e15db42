"""Kernel-enforced confinement applied to a sandboxed program before it starts.

Run as a launcher: ``python -I -c <boot> POLICY_JSON -- PROGRAM ARGS...``.  It sets
no-new-privileges, loads a seccomp filter (through libseccomp's ``pyseccomp``
binding), restricts itself with Landlock (raw syscalls 444-446 through ctypes: no
extra dependency), and only then ``execve``s the program.  Both survive ``execve``
and are inherited by every child, so the evaluation worker is confined from its
first instruction, before torch, Triton or the candidate run, and no thread exists
yet that could escape a per-thread policy.

A layer the policy asks for and that cannot be applied is fatal (exit
:data:`EXIT_CONFINE_FAILED`, one line on stderr): the parent decided from its
probe that the layer holds, so running without it would misreport the isolation.

Landlock: reads and executes only beneath ``read`` paths, writes only beneath
``write`` paths, no TCP bind/connect (ABI 4+), no signals to or abstract Unix
sockets of processes outside the sandbox (ABI 6+).  Seccomp: the syscalls that
reach beyond a process (ptrace, mounts, namespaces, kernel modules, BPF, keyrings,
io_uring, Internet sockets, ...) fail with EPERM; ``clone3`` fails with ENOSYS so
that libc falls back to ``clone``, whose flags a filter can inspect.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sys
from collections.abc import Sequence

EXIT_CONFINE_FAILED = 120

_PR_SET_NO_NEW_PRIVS = 38
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_LANDLOCK_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# Landlock filesystem rights (uapi/linux/landlock.h) and the ABI that introduced each.
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR, _MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
_MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
_READ_RIGHTS = _EXECUTE | _READ_FILE | _READ_DIR
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

_DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsmount", "fspick", "open_by_handle_at", "name_to_handle_at",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "syslog", "acct",
    "swapon", "swapoff", "quotactl", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "iopl", "ioperm", "fanotify_init", "io_uring_setup", "io_uring_enter", "io_uring_register",
)  # fmt: skip
_DENIED_SOCKET_FAMILIES = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET
_CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


class ConfineError(OSError):
    """A requested layer could not be applied."""


def _syscall():
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.syscall
    fn.restype = ctypes.c_long
    return libc, fn


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    try:
        _, syscall = _syscall()
    except OSError:
        return 0
    abi = syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


def seccomp_available() -> bool:
    """Whether libseccomp's binding loads and the kernel filters syscalls."""
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError):
        return False
    try:
        with open("/proc/self/status") as status:
            return any(line.startswith("Seccomp:") for line in status)
    except OSError:
        return False


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _no_new_privs() -> None:
    libc, _ = _syscall()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfineError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def apply_landlock(read: Sequence[str], write: Sequence[str], listable: Sequence[str] = ()) -> int:
    """Restrict this process (and what it execs) to ``read`` and ``write``; return the ABI used.

    ``listable`` directories may be listed (not read): Python's import system lists
    a ``sys.path`` entry to find a package in it."""
    abi = landlock_abi()
    if abi < 1:
        raise ConfineError(errno.ENOSYS, "Landlock is not available in this kernel")
    _, syscall = _syscall()
    fs = _FS_RIGHTS_BY_ABI.get(abi, (1 << 16) - 1)
    attr = _RulesetAttr(fs, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfineError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        rules = [(p, _READ_DIR) for p in listable] + [(p, _READ_RIGHTS) for p in read] + [(p, fs) for p in write]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path this machine lacks grants nothing
            try:
                if not os.path.isdir(path):
                    rights &= _FILE_RIGHTS
                rule = _PathBeneath(rights & fs, fd)
                if syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                           ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    raise ConfineError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise ConfineError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def apply_seccomp() -> None:
    """Load the deny-list filter into this process (and what it execs)."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:
        raise ConfineError(errno.ENOSYS, f"libseccomp binding unavailable: {exc}") from None
    deny = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in _DENIED_SYSCALLS:
        try:
            flt.add_rule(deny, name)
        except (RuntimeError, ValueError, OSError):
            pass  # a syscall this architecture does not have
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for family in _DENIED_SOCKET_FAMILIES:
        flt.add_rule(deny, "socket", sc.Arg(0, sc.EQ, family))
    for flag in _CLONE_NAMESPACE_FLAGS:
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.load()


def confine(policy: dict) -> list[str]:
    """Apply ``policy`` (keys ``landlock``, ``seccomp``, ``read``, ``write``, ``list``); return the layers applied."""
    _no_new_privs()
    layers = ["nnp"]
    if policy.get("seccomp"):
        apply_seccomp()
        layers.append("seccomp")
    if policy.get("landlock"):
        apply_landlock(policy.get("read", ()), policy.get("write", ()), policy.get("list", ()))
        layers.append("landlock")
    return layers


def launcher_argv(python: str, package_root: str, policy: dict, argv: Sequence[str]) -> list[str]:
    """The command that confines itself by ``policy`` and then execs ``argv``."""
    boot = (f"import sys; sys.path.insert(0, {package_root!r}); "
            "from tik_agent.sandbox.confine import main; main(sys.argv[1:])")
    return [python, "-I", "-c", boot, json.dumps(policy), "--", *argv]


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: confine POLICY_JSON -- PROGRAM [ARGS...]\n")
        sys.exit(2)
    try:
        policy = json.loads(args[0])
        confine(policy)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"tik-agent sandbox: confinement failed: {exc}\n")
        sys.exit(EXIT_CONFINE_FAILED)
    program = args[2:]
    try:
        os.execvpe(program[0], program, os.environ)
    except OSError as exc:
        sys.stderr.write(f"tik-agent sandbox: cannot start {program[0]}: {exc}\n")
        sys.exit(EXIT_CONFINE_FAILED)
