"""Evaluation slots on a Ray cluster: one actor per slot, the same evaluation as a local one.

The proposals, the journal and the git lineage stay on the driver (this
process); a slot is a Ray actor (:class:`tik_agent.search.ray_node.EvaluationActor`)
that holds one CPU, or one GPU on cuda (``num_gpus=1``: Ray pins the actor's
``CUDA_VISIBLE_DEVICES`` and its sandboxed workers inherit it).  The seed's
outputs and warm cache travel once per node through the object store.

Before a slot is used, its node's environment is compared with the run's
binding (device, driver, cuda, torch, triton) and the driver's python and
tik-agent; a node that differs is refused with one line naming the field, and its
actors are stopped.

Faults: an actor (or its node) that dies during an evaluation raises
:class:`SlotLost` in the caller, which leaves the attempt unfinished and redoes
it; :meth:`RayExecutor.release` then starts a replacement actor (at most
``MAX_REPLACEMENTS`` per slot).  :meth:`RayExecutor.cancel` (Ctrl-C) kills the
sandboxes inside every busy actor and cancels its call; :meth:`close` stops the
actors, and the Ray instance when this run started it.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import ray
from ray import exceptions as rex

import tik_agent
from tik_agent.errors import UsageError
from tik_agent.judge.options import EvalOptions, Reference
from tik_agent.judge.records import Verdict
from tik_agent.run.rundir import WARM_CACHE
from tik_agent.search.slots import ExecutorFailed, SlotLost
from tik_agent.search.ray_node import EvaluationActor, SeedBundle
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0       # for an actor to be placed, import torch and triton, unpack the seed
MAX_REPLACEMENTS = 3          # new actors per slot after losses, before the slot is retired
MIN_OBJECT_STORE = 100 * 1024**2
# What a node must share with the driver, besides the run's binding.
DRIVER_FIELDS = ("python", "tik_agent")
_DIED = (rex.RayActorError, rex.ActorUnavailableError, rex.WorkerCrashedError, rex.ObjectLostError,
         rex.TaskCancelledError, rex.NodeDiedError)


def node_mismatch(expected: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """The first field in which a node's environment differs from the run's, as words; None if none."""
    for key, want in expected.items():
        if node.get(key) != want:
            return f"{key}={node.get(key)!r} (the run's is {want!r})"
    return None


def run_environment(binding: Mapping[str, Any]) -> dict:
    """What every node must match: the run's binding, this driver's python and tik-agent."""
    return {**dict(binding), "python": platform.python_version(), "tik_agent": tik_agent.__version__}


@dataclass
class RaySlot:
    """One actor; evaluates one candidate at a time (the executor hands it to one attempt)."""

    name: str
    index: int
    actor: Any
    replacements: int = 0
    node: str = "?"
    node_id: str = ""
    lost: bool = False
    reference_sha256: str = ""
    call: Any = field(default=None, repr=False)   # the evaluation in flight, for cancel()

    def evaluate(self, spec: KernelSpec, candidate: Path, options: EvalOptions,
                 reference: Reference | None = None, parent: Path | None = None) -> Verdict:
        # The node evaluates against the seed it was shipped; it must be this run's.
        if reference is not None and reference.seed_sha256 != self.reference_sha256:
            raise ValueError(f"{self.name}: the reference given is not the one shipped to the node")
        candidate = Path(candidate)
        parent_source = Path(parent).read_text() if parent is not None else None
        self.call = self.actor.evaluate.remote(candidate.name, candidate.read_text(), parent_source, options)
        try:
            result = ray.get(self.call)
        except _DIED as exc:
            self.lost = True
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            raise SlotLost(f"{self.name} on {self.node}: the Ray actor died during the evaluation "
                           f"({type(exc).__name__}: {first})") from None
        finally:
            self.call = None
        return Verdict.from_dict(result)


class RayExecutor:
    kind = "ray"

    def __init__(self, bundle: SeedBundle, workers: int, expected: Mapping[str, Any], *,
                 reference_sha256: str, address: str | None = None, start_timeout_s: float = START_TIMEOUT_S):
        if workers < 1:
            raise UsageError(f"--workers: must be at least 1 (got {workers})")
        self.device, self.expected = bundle.device, dict(expected)
        self.start_timeout_s, self.reference_sha256 = start_timeout_s, reference_sha256
        self._owns_ray = connect(address, bundle.device, workers, bundle.size)
        self._lock = threading.Lock()
        self._live: dict[str, RaySlot] = {}
        self._free: queue.Queue[RaySlot | None] = queue.Queue()
        self._cancelled = False
        self.unpacked_on: list[str] = []   # nodes where an actor unpacked the seed (once each)
        try:
            self._check_capacity(workers)
            self._bundle = ray.put(bundle)
            self._actor = ray.remote(EvaluationActor).options(
                num_cpus=1, num_gpus=1 if bundle.device == "cuda" else 0, max_concurrency=2, max_restarts=0)
            for slot in self._admit([self._start(i) for i in range(workers)]):
                self._free.put(slot)
        except BaseException:
            self.close()
            raise
        self.slots = len(self._live)
        if self.slots < workers:
            log.warning("running with %d of %d Ray slots (the others were refused)", self.slots, workers)

    @classmethod
    def for_session(cls, session, workers: int, address: str | None = None, **kw) -> "RayExecutor":
        warm = session.run.path / WARM_CACHE
        bundle = SeedBundle.pack(session.run.spec, session.reference, session.run.config.device,
                                 warm if warm.is_dir() else None)
        return cls(bundle, workers, run_environment(session.run.config.binding),
                   reference_sha256=session.reference.seed_sha256, address=address, **kw)

    # ------------------------------------------------------------------ slots

    def _start(self, index: int, replacements: int = 0) -> RaySlot:
        return RaySlot(f"ray:{index}", index, self._actor.remote(self._bundle), replacements,
                       reference_sha256=self.reference_sha256)

    def _admit(self, slots: list[RaySlot]) -> list[RaySlot]:
        """Wait for the actors to start, check each node; keep the slots on matching nodes."""
        calls = {s.actor.describe.remote(): s for s in slots}
        done, pending = ray.wait(list(calls), num_returns=len(calls), timeout=self.start_timeout_s)
        admitted, refusals = [], []
        for ref in pending:
            slot = calls[ref]
            refusals.append(f"{slot.name}: its actor did not start within {self.start_timeout_s:.0f} s")
            self._kill(slot)
        for ref in done:
            slot = calls[ref]
            try:
                info = ray.get(ref)
            except (rex.RayError, ImportError) as exc:
                first = (str(exc).strip().splitlines() or [""])[-1][:200]
                refusals.append(f"{slot.name}: its actor failed to start: {first}")
                self._kill(slot)
                continue
            slot.node, slot.node_id = info["address"], info["node_id"]
            problem = node_mismatch(self.expected, info["environment"])
            if problem is not None:
                refusals.append(f"Ray node {slot.node} ({info['host']}) refused: {problem}")
                self._kill(slot)
                continue
            if info["unpacked"]:
                self.unpacked_on.append(slot.node)
            with self._lock:
                self._live[slot.name] = slot
            admitted.append(slot)
        for line in dict.fromkeys(refusals):
            log.warning("%s", line)
        if refusals and not admitted and not self._live:
            raise UsageError(f"--executor ray: no usable slot; {refusals[0]}")
        return admitted

    def _check_capacity(self, workers: int) -> None:
        """Refuse at once a cluster that can never place ``workers`` actors."""
        key = "GPU" if self.device == "cuda" else "CPU"
        total = ray.cluster_resources().get(key, 0.0)
        if total < workers:
            raise UsageError(f"--workers {workers}: the Ray cluster has {total:g} {key}(s) and each "
                             f"evaluation slot needs one")

    def acquire(self) -> RaySlot:
        slot = self._free.get()
        if slot is None:
            self._free.put(None)   # every waiter learns it
            raise ExecutorFailed("--executor ray: every Ray slot was lost and could not be replaced")
        return slot

    def release(self, slot: RaySlot) -> None:
        if not slot.lost:
            self._free.put(slot)
            return
        self._kill(slot)
        with self._lock:
            self._live.pop(slot.name, None)
        if not self._cancelled and slot.replacements < MAX_REPLACEMENTS:
            log.warning("%s on %s was lost; starting a replacement actor", slot.name, slot.node)
            try:
                replaced = self._admit([self._start(slot.index, slot.replacements + 1)])
            except UsageError as exc:
                log.error("%s", exc)
                replaced = []
            if replaced:
                self._free.put(replaced[0])
                return
        log.error("%s is retired (%d replacement(s) so far)", slot.name, slot.replacements)
        with self._lock:
            if not self._live:
                self._free.put(None)

    def placement(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(s.name, s.node) for s in self._live.values()]

    def actors(self) -> list[Any]:
        """The live actors' handles (fault-injection tests kill one)."""
        with self._lock:
            return [s.actor for s in self._live.values()]

    # ------------------------------------------------------------------ stopping

    def cancel(self) -> None:
        """Ctrl-C: kill the sandboxes inside every busy actor, cancel their calls."""
        self._cancelled = True
        with self._lock:
            busy = [s for s in self._live.values() if s.call is not None]
        for slot in busy:
            slot.actor.cancel.remote()   # runs beside the evaluation (max_concurrency=2)
            call = slot.call
            if call is not None:
                try:
                    ray.cancel(call)
                except (rex.RayError, TypeError, ValueError):
                    pass  # already finished, or an actor task Ray cannot interrupt: the kill above does
        log.info("cancelled %d remote evaluation(s)", len(busy))

    def close(self) -> None:
        """Stop every actor (their sandboxes die with them), and Ray itself if this run started it."""
        self._cancelled = True
        if not ray.is_initialized():
            return
        with self._lock:
            slots, self._live = list(self._live.values()), {}
        for slot in slots:
            self._kill(slot)
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False

    @staticmethod
    def _kill(slot: RaySlot) -> None:
        try:
            ray.kill(slot.actor, no_restart=True)
        except (rex.RayError, ValueError):
            pass  # already dead


def connect(address: str | None, device: str, workers: int, bundle_bytes: int) -> bool:
    """Join the cluster at ``address``, or start a local Ray instance; True when this call did either
    (and :meth:`RayExecutor.close` should disconnect).  An already connected process is reused."""
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": False}
    if address:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise UsageError(f"--ray-address {address}: cannot join the Ray cluster: {first}") from None
        log.info("joined the Ray cluster at %s", address)
        return True
    cpus = max(workers, os.cpu_count() or 1) if device == "cpu" else None
    ray.init(address="local", num_cpus=cpus, include_dashboard=False,
             object_store_memory=max(MIN_OBJECT_STORE, 4 * bundle_bytes), **quiet)
    log.info("started a local Ray instance for this run (no --ray-address or RAY_ADDRESS)")
    return True
