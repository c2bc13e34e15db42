"""The executor seam: a pool of evaluation slots, and what a lost slot raises.

The loop knows only these protocols; :class:`tik_agent.search.executor.LocalExecutor`
and :class:`tik_agent.search.ray_executor.RayExecutor` implement them.  A slot whose
worker dies mid-evaluation raises :class:`SlotLost`: the loop leaves that attempt
unfinished and redoes it, and the executor replaces the slot when it is given back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tik_agent.errors import TikError
from tik_agent.judge.options import EvalOptions, Reference
from tik_agent.judge.records import Verdict
from tik_agent.spec.schema import KernelSpec


class SlotLost(Exception):
    """The slot's worker (a Ray actor, its node) died during an evaluation: no verdict."""


class ExecutorFailed(TikError):
    """No slot is left to evaluate on (every replacement failed); the run stops."""


class Slot(Protocol):
    name: str
    node: str   # where the slot evaluates: a host name or a Ray node's address

    def evaluate(self, spec: KernelSpec, candidate: Path, options: EvalOptions,
                 reference: Reference | None = None, parent: Path | None = None) -> Verdict:
        ...


class Executor(Protocol):
    slots: int

    def acquire(self) -> Slot:
        """Block until a slot is free and take it."""
        ...

    def release(self, slot: Slot) -> None:
        """Give a slot back; a lost one is replaced (or retired) here."""
        ...

    def placement(self) -> list[tuple[str, str]]:
        """(slot name, node) of every live slot."""
        ...

    def cancel(self) -> None:
        """Kill the evaluations in flight (Ctrl-C); their callers abandon them."""
        ...

    def close(self) -> None:
        ...
