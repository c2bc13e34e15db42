"""Where evaluations run: a pool of slots, one evaluation at a time in each.

The optimiser takes a slot for an attempt, runs the first and the confirming
evaluation in it, and gives it back.  One evaluation times the candidate, the
seed and the parent in interleaved rounds inside one worker, so with one slot
per GPU every speedup compares kernels timed on the same GPU.

:class:`LocalExecutor` runs sandboxed workers on this machine.  On cuda each slot
is one GPU of the parent's own visible list, handed to its worker as
``CUDA_VISIBLE_DEVICES`` (so ``CUDA_VISIBLE_DEVICES=2,3 tik-agent optimize
--workers 2`` uses GPUs 2 and 3, never 0), and every worker starts from a fresh
copy of the seed's compiled Triton cache.  The parent itself never touches a
GPU: it counts devices and reads worker outputs onto the CPU.

:class:`tik_agent.search.ray_executor.RayExecutor` hands out slots with the same
``evaluate`` on a Ray cluster; :func:`tik_agent.search.pool.open_executor` picks
one of the two.  Both implement the protocols of :mod:`tik_agent.search.slots`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import queue
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from tik_agent.errors import UsageError
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions, Reference
from tik_agent.judge.records import Verdict
from tik_agent.search.interrupts import kill_sandboxes
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

EvaluateFn = Callable[..., Verdict]


def visible_devices(environ: Mapping[str, str], count: Callable[[], int]) -> list[str]:
    """The GPUs this process may use, as entries for a child's ``CUDA_VISIBLE_DEVICES``.

    Entries are kept as written (indices or ``GPU-<uuid>``/``MIG-...`` names), so a
    child sees exactly one device of the parent's list.  As CUDA does, the list ends
    at the first empty or negative entry.  Unset means every device ``count`` reports.
    """
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return [str(i) for i in range(count())]
    entries: list[str] = []
    for part in raw.split(","):
        part = part.strip()
        if not part or part.startswith("-"):
            break
        if part in entries:
            raise UsageError(f"CUDA_VISIBLE_DEVICES: {part} is listed twice (got {raw!r})")
        entries.append(part)
    return entries


def assign_gpus(workers: int, visible: list[str]) -> list[str]:
    """One GPU per worker, in the parent's order; more workers than GPUs is a usage error."""
    if not visible:
        raise UsageError("--device cuda: no GPU is visible to this process (CUDA_VISIBLE_DEVICES)")
    if workers > len(visible):
        raise UsageError(f"--workers {workers} on cuda: one evaluation per GPU and only {len(visible)} "
                         f"visible ({','.join(visible)}); use --workers {len(visible)} or fewer")
    return visible[:workers]


def torch_device_count() -> int:
    import torch

    return torch.cuda.device_count()  # counts devices; creates no context


@dataclass
class LocalSlot:
    name: str
    cuda_device: str | None = None
    warm_cache: Path | None = None
    evaluate_fn: EvaluateFn = evaluate
    node: str = dataclasses.field(default_factory=platform.node)

    def evaluate(self, spec: KernelSpec, candidate: Path, options: EvalOptions,
                 reference: Reference | None = None, parent: Path | None = None) -> Verdict:
        pinned = dataclasses.replace(
            options, cuda_device=self.cuda_device,
            warm_cache=str(self.warm_cache) if self.warm_cache is not None else options.warm_cache)
        log.debug("evaluating %s on %s", Path(candidate).name, self.name)
        return self.evaluate_fn(spec, candidate, pinned, reference=reference, parent=parent)


class LocalExecutor:
    kind = "local"

    def __init__(self, device: str, workers: int, *, warm_cache: Path | None = None,
                 environ: Mapping[str, str] = os.environ, device_count: Callable[[], int] = torch_device_count,
                 evaluate_fn: EvaluateFn = evaluate):
        if workers < 1:
            raise UsageError(f"--workers: must be at least 1 (got {workers})")
        if device == "cuda":
            gpus = assign_gpus(workers, visible_devices(environ, device_count))
            made = [LocalSlot(f"cuda:{gpu}", gpu, warm_cache, evaluate_fn) for gpu in gpus]
        else:
            made = [LocalSlot(f"{device}:{i}", None, None, evaluate_fn) for i in range(workers)]
        self.slots = len(made)
        self.names = [s.name for s in made]
        self._free: queue.Queue[LocalSlot] = queue.Queue()
        for slot in made:
            self._free.put(slot)

    def acquire(self) -> LocalSlot:
        return self._free.get()

    def release(self, slot: LocalSlot) -> None:
        self._free.put(slot)

    def placement(self) -> list[tuple[str, str]]:
        return [(name, platform.node()) for name in self.names]

    def cancel(self) -> None:
        kill_sandboxes()

    def close(self) -> None:
        pass
