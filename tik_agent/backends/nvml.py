"""NVML (the driver's management library), for the SM and memory clocks beside a measurement.

pynvml loads ``libnvidia-ml.so.1`` by its bare name on first use.  Inside a worker
that is too late: the guard (:mod:`tik_agent.sandbox.guard`) refuses a library
loaded by a bare name, or from outside torch's and triton's folders.  So
:func:`preload` finds the library by its absolute path and loads it before the
guard is installed; pynvml keeps the handle it finds in its module and loads
nothing more.  Clocks are a record, never a reason to fail: every step here
gives up quietly.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

LIBRARY = "libnvidia-ml.so.1"
# Where driver installs and container runtimes put it (gVisor nodes: /usr/local/nvidia, read-only).
SEARCHED = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
            "/usr/lib/aarch64-linux-gnu", "/usr/lib/wsl/lib")


def find(dirs: tuple[str, ...] | None = None) -> str | None:
    """The absolute path of NVML: LD_LIBRARY_PATH's folders first, then :data:`SEARCHED`."""
    if dirs is None:
        dirs = tuple(d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d) + SEARCHED
    for folder in dirs:
        path = os.path.join(folder, LIBRARY)
        if os.path.isabs(path) and os.path.exists(path):
            return os.path.realpath(path)
    return None


def preload(dirs: tuple[str, ...] | None = None) -> str | None:
    """Load NVML by its absolute path into pynvml; the path, or None (no pynvml, no library)."""
    try:
        import pynvml
    except ImportError:
        return None
    if getattr(pynvml, "nvmlLib", None) is not None:
        return getattr(pynvml.nvmlLib, "_name", None)
    path = find(dirs)
    if path is None:
        log.debug("NVML: %s not found; clocks are not recorded", LIBRARY)
        return None
    try:
        pynvml.nvmlLib = ctypes.CDLL(path)  # pynvml's loader uses this one instead of a bare-name dlopen
    except OSError as exc:
        log.debug("NVML: %s did not load (%s); clocks are not recorded", path, exc)
        return None
    return path


def handle(torch):
    """pynvml's handle of device 0 (torch's numbering, matched by UUID), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        return None
