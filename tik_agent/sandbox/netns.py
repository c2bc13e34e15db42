"""A private network namespace for a sandboxed child: libc, the unshare call made
between fork and exec, and the one probe of whether this machine allows it.

Used by :mod:`tik_agent.sandbox.process` (which enters the namespace in the child) and
:mod:`tik_agent.sandbox.isolation` (whose bare process fallback reports it as a layer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import subprocess

logger = logging.getLogger(__name__)

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000


@functools.lru_cache(maxsize=1)
def load_libc() -> ctypes.CDLL | None:
    """libc, loaded in the parent so the child never runs the dynamic loader after fork."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def unshare_network(libc: ctypes.CDLL) -> None:
    """Enter a fresh network namespace (loopback only); raise OSError if impossible.

    Root (CAP_SYS_ADMIN) can do this directly.  Otherwise try an unprivileged user
    namespace first, mapping our own uid and gid so file ownership looks unchanged.
    """
    if libc.unshare(_CLONE_NEWNET) == 0:
        return
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare: {os.strerror(code)}")
    for path, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        fd = os.open(f"/proc/self/{path}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


@functools.lru_cache(maxsize=1)
def network_isolation_available() -> bool:
    """Whether children can be put in a private network namespace here (probed once)."""
    libc = load_libc()
    if libc is None:
        logger.warning("network isolation unavailable: libc could not be loaded")
        return False
    try:
        subprocess.run(
            ["/bin/sh", "-c", "exit 0"],
            preexec_fn=functools.partial(unshare_network, libc),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=30,
        )
    except (subprocess.SubprocessError, OSError) as err:
        logger.warning("network isolation unavailable (%s); sandboxed children share the network", err)
        return False
    return True
