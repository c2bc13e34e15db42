"""What runs on a Ray node: the seed unpacked once per node, and the actor that evaluates.

The driver packs the seed once (:class:`SeedBundle`: its spec files, its outputs
on every parity case as ``reference.pt``, on cuda its compiled Triton cache) and
puts it in Ray's object store; each node's store fetches it once, and the first
actor on a node unpacks it into a per-node cache directory keyed by its digest
(under a file lock; the others find it ready).  Every actor then evaluates with
the very function a local slot calls, :func:`tik_agent.judge.evaluate.evaluate`:
static rules, the sandboxed workers under their own watchdog (a timeout kills
the candidate's process group here, on this node), the judge.

Nothing here imports Ray at module level, so the packing and unpacking can be
tested without a cluster; the driver wraps :class:`EvaluationActor` with
``ray.remote``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import logging
import os
import platform
import shutil
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NODE_CACHE_ENV = "TIK_AGENT_NODE_CACHE"   # where a node keeps unpacked seeds (default: its temp dir)
READY_FILE = "ready"
SEED_DIR = "seed"
REFERENCE_NAME = "reference.pt"
WARM_DIR = "triton-cache"
CANCEL_S = 60.0   # how long a cancel keeps killing the sandboxes of an evaluation that goes on starting them


@dataclass(frozen=True)
class SeedBundle:
    """The seed as a node needs it, as bytes; ``digest`` names its unpacked copy."""

    device: str
    files: dict[str, bytes]       # spec.toml, kernel.py and reference.py when the seed has one
    reference: bytes              # the seed's outputs (Reference.save)
    warm_cache: bytes | None      # a tar of the seed's Triton cache (cuda), or None
    digest: str = ""

    def __post_init__(self):
        if not self.digest:
            h = hashlib.sha256(self.device.encode())
            for name in sorted(self.files):
                h.update(name.encode() + b"\0" + self.files[name])
            h.update(self.reference)
            h.update(self.warm_cache or b"")
            object.__setattr__(self, "digest", h.hexdigest()[:24])

    @property
    def size(self) -> int:
        return sum(map(len, self.files.values())) + len(self.reference) + len(self.warm_cache or b"")

    @classmethod
    def pack(cls, spec, reference, device: str, warm_cache: Path | None = None) -> "SeedBundle":
        files = {p.name: p.read_bytes() for p in (spec.spec_path, spec.source, spec.reference) if p is not None}
        with tempfile.TemporaryDirectory(prefix="tik-bundle-") as tmp:
            path = Path(tmp) / REFERENCE_NAME
            reference.save(path)
            data = path.read_bytes()
        tar = None
        if warm_cache is not None and Path(warm_cache).is_dir():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as t:
                t.add(warm_cache, arcname=".")
            tar = buf.getvalue()
        return cls(device, files, data, tar)


def cache_root() -> Path:
    return Path(os.environ.get(NODE_CACHE_ENV) or Path(tempfile.gettempdir()) / f"tik-agent-ray-{os.getuid()}")


def unpack(bundle: SeedBundle, root: Path) -> tuple[Path, bool]:
    """``root/<digest>``, unpacked by the first caller on this node; True when this call unpacked it."""
    root.mkdir(parents=True, exist_ok=True)
    target = root / bundle.digest
    with open(root / f"{bundle.digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if (target / READY_FILE).is_file():
            return target, False
        shutil.rmtree(target, ignore_errors=True)  # a half-unpacked copy of a killed actor
        (target / SEED_DIR).mkdir(parents=True)
        for name, data in bundle.files.items():
            (target / SEED_DIR / name).write_bytes(data)
        (target / REFERENCE_NAME).write_bytes(bundle.reference)
        if bundle.warm_cache is not None:
            with tarfile.open(fileobj=io.BytesIO(bundle.warm_cache)) as t:
                t.extractall(target / WARM_DIR, filter="data")
        (target / READY_FILE).write_text(bundle.digest + "\n")
        return target, True


def node_environment(device: str) -> dict:
    """What a node must share with the run: the bound fields, python and tik-agent."""
    import tik_agent
    from tik_agent.backends import device as devices

    env = devices.binding(devices.probe_environment(device))
    env.update(python=platform.python_version(), tik_agent=tik_agent.__version__)
    return env


class EvaluationActor:
    """One evaluation slot on a node: ``evaluate`` runs one sandboxed evaluation at a time;
    ``cancel`` (from a second thread of the actor) kills the sandboxes in flight."""

    def __init__(self, bundle: SeedBundle):
        from tik_agent.backends import device as devices
        from tik_agent.judge.options import Reference
        from tik_agent.spec.schema import load_spec

        devices.prepare(bundle.device)
        self.device = bundle.device
        self.dir, self.unpacked = unpack(bundle, cache_root())
        self.spec = load_spec(self.dir / SEED_DIR)
        self.reference = Reference.load(self.dir / REFERENCE_NAME)
        warm = self.dir / WARM_DIR
        self.warm_cache = str(warm) if warm.is_dir() else None
        self.work = Path(tempfile.mkdtemp(prefix="tik-ray-eval-"))
        self._busy = threading.Event()   # an evaluation is running in the actor's other thread

    def describe(self) -> dict:
        """Where this actor runs and what the node has (checked by the driver before use)."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "address": ray.util.get_node_ip_address(),
                "host": platform.node(), "pid": os.getpid(), "unpacked": self.unpacked,
                "environment": node_environment(self.device)}

    def evaluate(self, name: str, source: str, parent_source: str | None, options) -> dict:
        """The candidate's verdict as versioned JSON (the same call a local slot makes)."""
        from tik_agent.judge.evaluate import evaluate

        d = Path(tempfile.mkdtemp(dir=self.work))
        self._busy.set()
        try:
            candidate = d / name
            candidate.write_text(source)
            parent = None
            if parent_source is not None:
                parent = d / "parent.py"
                parent.write_text(parent_source)
            # Ray gave this actor its GPU (CUDA_VISIBLE_DEVICES); the workers inherit it.
            pinned = dataclasses.replace(options, cuda_device=None, warm_cache=self.warm_cache)
            return evaluate(self.spec, candidate, pinned, reference=self.reference, parent=parent).to_dict()
        finally:
            self._busy.clear()
            shutil.rmtree(d, ignore_errors=True)

    def cancel(self) -> int:
        """Kill the evaluation's sandboxes until it returns: one evaluation starts several workers
        (the seed's beside the candidate's), and one started after a single kill would run on."""
        from tik_agent.search.interrupts import kill_sandboxes

        killed, deadline = kill_sandboxes(), time.monotonic() + CANCEL_S
        while self._busy.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
            killed += kill_sandboxes()
        return killed

    def sandboxes(self) -> int:
        """How many sandboxed workers of this actor are alive (0 after a timeout or a cancel)."""
        from tik_agent.search.interrupts import sandbox_groups

        return len(sandbox_groups())
