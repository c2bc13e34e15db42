"""Compile-only: every Triton launch compiles for a GPU target through Triton's own
compiler and ptxas, and no program runs (issue 22's rehearsal, and a node's cache warming).

:func:`activate` makes a stand-in driver Triton's active one: it reports a CUDA
target (capability 90 and warp size 32 for sm_90 unless told otherwise), and it
has no device, no stream and no launcher.  Every ``JITFunction.run`` is then made
with ``warmup=True``: Triton binds the arguments, specialises them (integers equal
to 1 or divisible by 16, pointers on 16-byte alignment), compiles the variant into
the Triton cache (``TRITON_CACHE_DIR``) and returns the compiled kernel without a
launch.  The inputs are CPU tensors: their data pointers are aligned as a CUDA
allocation's are, and nothing ever reads them.

:func:`recording` lists each launch (the kernel, its grid as Triton would compute
it, the compiled variant's warps and stages, and the seconds spent compiling when
this process compiled it), :func:`resources` asks ptxas for registers and
spills of one compiled kernel, and :func:`reductions` reads from its TTGIR the
thread layout each ``tt.reduce`` works on (the tree of a ``tl.sum`` on the GPU).

Refused where the CPU interpreter is on: an interpreted kernel is not a
``JITFunction`` and would run.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from tik_agent.errors import UsageError

TARGETS = {"sm_80": 80, "sm_89": 89, "sm_90": 90, "sm_100": 100}


@dataclass
class Launch:
    """One launch made in compile-only mode."""

    kernel: str                 # the kernel function's qualified name
    grid: list[int]             # the launch grid as Triton would compute it
    num_warps: int
    num_stages: int
    compiled_s: float           # seconds this launch spent compiling (0.0: the variant was known)
    variant: str                # the compiled variant's hash (one per specialisation)
    compiled: object = field(repr=False, default=None)  # triton's CompiledKernel


class _State:
    def __init__(self) -> None:
        self.capability: int | None = None
        self.lock = threading.Lock()
        self.recorders: list[list[Launch]] = []
        self.launchers = False            # also build each new variant's C launcher (a node's warm cache)
        self.launchers_built = 0
        self.launcher_error: str | None = None  # why none could be built (no libcuda, no C compiler)


_STATE = _State()


def target_capability(name: str) -> int:
    """``sm_90`` -> 90; anything else is bad usage."""
    if name not in TARGETS:
        raise UsageError(f"--target {name!r}: expected one of {', '.join(TARGETS)}")
    return TARGETS[name]


def activate(capability: int = 90, launchers: bool = False) -> None:
    """Make the stand-in driver active and every launch a compile. Idempotent for one capability.

    ``launchers``: also build, for each variant this process compiles, the C launcher Triton
    compiles for its argument kinds with the C compiler and links to libcuda (``CudaLauncher``,
    cached in the Triton cache), and the driver's own ``cuda_utils`` once.  Only a node has
    libcuda: elsewhere the first failure is kept (:func:`launcher_report`) and nothing else
    changes."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise UsageError("compile-only mode needs the real Triton compiler: unset TRITON_INTERPRET")
    with _STATE.lock:
        if _STATE.capability is not None:
            if _STATE.capability != capability:
                raise UsageError(f"compile-only mode is active for capability {_STATE.capability}, "
                                 f"not {capability}")
            return
        _STATE.capability = capability
        _STATE.launchers = launchers
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    driver.set_active(_stand_in_driver(capability))
    _wrap(JITFunction)


def is_active() -> bool:
    return _STATE.capability is not None


def _stand_in_driver(capability: int):
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class StandInDriver(DriverBase):
        """A CUDA target without a device: enough for Triton to compile, nothing to launch with."""

        @classmethod
        def is_active(cls) -> bool:
            return True

        def map_python_to_cpp_type(self, ty: str) -> str:
            return "void*"

        def get_current_target(self):
            return GPUTarget("cuda", capability, 32)

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_current_device(self) -> int:
            return 0

        def set_current_device(self, device: int) -> None:
            pass

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_benchmarker(self):
            raise RuntimeError("compile-only mode: nothing runs, so nothing can be timed")

        def get_device_interface(self):
            raise RuntimeError("compile-only mode: there is no device")

    return StandInDriver()


def _wrap(cls) -> None:
    original = cls.run

    def run(self, *args, grid, warmup, **kwargs):
        cache = self.device_caches[0][0] if 0 in getattr(self, "device_caches", {}) else {}
        known = len(cache)
        start = time.perf_counter()
        compiled = original(self, *args, grid=grid, warmup=True, **kwargs)
        seconds = time.perf_counter() - start
        if compiled is None or warmup:
            return compiled
        grew = len(self.device_caches[0][0]) > known
        if grew and _STATE.launchers:
            _build_launcher(compiled)
        # The grid is evaluated at every launch, as Triton does (a grid callable that raises
        # fails the launch, and the survey's recording grid sees it), recorder or not.
        launch = Launch(kernel=getattr(self.fn, "__qualname__", "?"), grid=_grid(self, grid, args, kwargs),
                        num_warps=compiled.metadata.num_warps, num_stages=compiled.metadata.num_stages,
                        compiled_s=round(seconds, 4) if grew else 0.0, variant=str(compiled.hash),
                        compiled=compiled)
        with _STATE.lock:
            for recorder in _STATE.recorders:
                recorder.append(launch)
        return compiled

    cls.run = run


def _build_launcher(compiled) -> None:
    """The variant's C launcher (and once the driver's utilities) into the Triton cache, as a
    worker's first launch of it would build them; a failure is kept, never raised."""
    if _STATE.launcher_error is not None:
        return
    try:
        from triton.backends.nvidia.driver import CudaLauncher, CudaUtils

        if _STATE.launchers_built == 0:
            CudaUtils()
        CudaLauncher(compiled.src, compiled.metadata)
        _STATE.launchers_built += 1
    except Exception as exc:  # no libcuda or no C compiler here: the launchers compile in the workers
        _STATE.launcher_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def launcher_report() -> dict:
    """Launchers built by this process, and why none could be where that failed ({} when the
    process was not asked to build them)."""
    if not _STATE.launchers:
        return {}
    return {"launchers_built": _STATE.launchers_built, "launcher_error": _STATE.launcher_error}


def _grid(kernel, grid, args, kwargs) -> list[int]:
    """The grid as Triton computes it at a launch: a callable gets the kernel's bound arguments."""
    if callable(grid):
        signature = inspect.signature(kernel.fn)
        bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
        bound.apply_defaults()
        grid = grid(dict(bound.arguments))
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    return [int(g) for g in grid] + [1] * (3 - len(grid))


@contextmanager
def recording():
    """Yield a list that collects every launch made inside the block (any thread)."""
    found: list[Launch] = []
    with _STATE.lock:
        _STATE.recorders.append(found)
    try:
        yield found
    finally:
        with _STATE.lock:  # by identity: two recorders that saw the same launches are equal lists
            _STATE.recorders[:] = [r for r in _STATE.recorders if r is not found]


_USED = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_STACK = re.compile(r"(\d+) bytes stack frame")
_LOAD = re.compile(r"^\s*(?:@!?%?\w+\s+)?ld\.global((?:\.[\w:]+)*)", re.M)
_ASYNC = re.compile(r"^\s*(?:@!?%?\w+\s+)?cp\.async\.\w+\.shared\.global(?:\.[\w:]+)*\s+\[[^]]*\],\s*\[[^]]*\],\s*(0x[0-9a-fA-F]+|\d+)", re.M)


def load_widths(ptx: str) -> list[int]:
    """The bytes one thread's global load instruction moves, each width the PTX uses (a load of
    ``ld.global.v4.b32`` moves 16; ``cp.async`` copies to shared memory name their size)."""
    widths = set()
    for suffix in _LOAD.findall(ptx):
        parts = suffix.split(".")
        lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
        bits = next((int(p[1:]) for p in parts if re.fullmatch(r"[bfsu]\d+", p)), 0)
        if bits:
            widths.add(lanes * bits // 8)
    widths.update(int(n, 0) for n in _ASYNC.findall(ptx))
    return sorted(widths)


def resources(launch: Launch) -> dict:
    """Registers, spill bytes (stores) and stack frame of one compiled kernel, from ptxas -v
    run on its PTX for the kernel's own architecture (Triton's bundled ptxas), and the widths
    of its global loads (from the PTX)."""
    from triton.backends.nvidia.compiler import get_ptxas

    compiled = launch.compiled
    capability = compiled.metadata.target.arch
    arch = f"sm_{capability}" + ("a" if capability >= 90 else "")
    ptxas = get_ptxas(capability).path
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "kernel.ptx")
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        done = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", ptx, "-o", os.path.join(tmp, "kernel.cubin")],
                              capture_output=True, text=True, check=True)
    log = done.stderr + done.stdout
    used, spill, stack = _USED.search(log), _SPILL.search(log), _STACK.search(log)
    return {"registers": int(used.group(1)) if used else None,
            "spill_bytes": int(spill.group(1)) if spill else 0,
            "stack_bytes": int(stack.group(1)) if stack else 0,
            "shared_bytes": int(getattr(compiled.metadata, "shared", 0) or 0),
            "load_bytes": load_widths(compiled.asm["ptx"])}


_BLOCKED = re.compile(r"^#(\w+) = #ttg\.blocked<\{(.*)\}>", re.M)
_REDUCE = re.compile(r'"tt\.reduce"\([^)]*\) <\{axis = (\d+) : i32\}>')
_OPERAND = re.compile(r"^\s*\}\) : \(tensor<([\dx]+)x\w+, #(\w+)>")


def reductions(launch: Launch) -> list[dict]:
    """Each ``tt.reduce`` of one compiled kernel's TTGIR, in order: the axis it reduces, the
    operand's shape and its blocked layout as the TTGIR writes it (``sizePerThread = [1, 8],
    threadsPerWarp = [1, 32], warpsPerCTA = [2, 2], order = [1, 0]``).  Two launches whose
    reductions read the same give each row the same tree of adds on the GPU; a reduce over
    another layout (a slice, a shared one) is reported with ``layout`` None."""
    lines = launch.compiled.asm["ttgir"].splitlines()
    blocked = dict(_BLOCKED.findall("\n".join(lines)))
    found = []
    for n, line in enumerate(lines):
        match = _REDUCE.search(line)
        if match is None:
            continue
        operand = next((m for m in map(_OPERAND.match, lines[n + 1:]) if m), None)
        shape = [int(d) for d in operand.group(1).split("x")] if operand else None
        found.append({"axis": int(match.group(1)), "shape": shape,
                      "layout": blocked.get(operand.group(2)) if operand else None})
    return found
