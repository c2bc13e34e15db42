"""Which device evaluates kernels, how to prepare it, and what it is.

``cpu`` means Triton's interpreter (set up by :mod:`tik_agent.backends.interpreter`);
``cuda`` means a real GPU.  The environment record binds results (parity
baselines, timings, runs) to the device and versions that produced them.
"""

from __future__ import annotations

import os
import platform
import sys

from tik_agent.errors import UsageError

DEVICES = ("cpu", "cuda")


def resolve(requested: str | None) -> str:
    """``None``/``auto`` picks cuda when a GPU is visible, else the CPU interpreter."""
    if requested in (None, "auto"):
        return "cuda" if _cuda_available() else "cpu"
    if requested not in DEVICES:
        raise UsageError(f"--device: unknown device {requested!r}; expected one of {list(DEVICES)} or 'auto'")
    if requested == "cuda" and not _cuda_available():
        raise UsageError("--device cuda: no CUDA device is visible on this machine")
    return requested


def _cuda_available() -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    import torch

    return torch.cuda.is_available()


def prepare(device: str) -> None:
    """Make this process ready to run Triton kernels on ``device``."""
    if device == "cpu":
        from tik_agent.backends import interpreter

        interpreter.activate()


def environment(device: str) -> dict:
    """Device and versions, recorded next to every result they hold for."""
    import torch
    import triton

    env = {
        "device": device,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "interpreter": device == "cpu",
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env["device_name"] = props.name
        env["capability"] = f"{props.major}.{props.minor}"
        env["cuda"] = torch.version.cuda
        env["driver"] = _driver_version()
    else:
        env["device_name"] = f"CPU ({platform.machine()}, Triton interpreter)"
        env["cuda"] = None
        env["driver"] = None
    env["executable"] = sys.executable
    return env


def probe_environment(device: str, in_child: bool | None = None) -> dict:
    """:func:`environment`, read in a short child process on cuda (``in_child``).

    Reading the device's properties initialises CUDA in the reading process; the
    optimiser's parent runs no kernel and keeps no CUDA state, so it asks a child.
    """
    if not (device == "cuda" if in_child is None else in_child):
        return environment(device)
    import json
    import subprocess

    import tik_agent

    root = os.path.dirname(os.path.dirname(os.path.abspath(tik_agent.__file__)))
    code = (f"import sys, json; sys.path.insert(0, {root!r}); "
            f"from tik_agent.backends.device import environment, prepare; prepare({device!r}); "
            f"print(json.dumps(environment({device!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--device {device}: reading the device's properties failed: {last}")
    env = json.loads(done.stdout.strip().splitlines()[-1])
    env["executable"] = sys.executable
    return env


def binding(env: dict) -> dict:
    """The fields a run refuses to change between resumes."""
    return {k: env.get(k) for k in ("device", "device_name", "driver", "cuda", "torch", "triton")}


def _driver_version() -> str | None:
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"{version.value // 1000}.{(version.value % 1000) // 10}"
    except OSError:
        return None
    return None
