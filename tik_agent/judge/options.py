"""What an evaluation is asked to do (:class:`EvalOptions`) and the seed's outputs it
compares against (:class:`Reference`): records shared by the evaluation call and the
worker box that runs it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.spec.cases import Case


@dataclass(frozen=True)
class EvalOptions:
    device: str = "cpu"
    timeout_s: float | None = None  # None: a limit per worker phase, derived from the seed's times
    rounds: int = 5
    warmup: int = 1
    timing: bool = True
    memory_bytes: int | None = 16 * 1024**3
    keep_workdir: bool = False
    # Set by an executor, never by a user: the worker's CUDA_VISIBLE_DEVICES (one entry of
    # the parent's own list), and where to keep the worker's cache after a clean run (only
    # for evaluations that run nothing but the trusted seed).  ``warm_cache``: a Triton cache
    # directory copied into each worker's cache before it starts (an executor's, or the
    # user's own through ``tik-agent eval --warm-cache``).
    cuda_device: str | None = None
    warm_cache: str | None = None
    save_cache: str | None = None
    ceilings: bool = False  # on cuda, also measure the device's copy and matmul ceilings (eval)
    # The graph phase decides speedups on cuda (CUDA-graph replay); None: on cuda only.
    # True elsewhere runs it with the eager stand-in (the GPU check's rehearsal, tests).
    graphs: bool | None = None
    # With a reference, judge each fixed case as the candidate's worker finishes it and stop
    # the worker at the first that fails (tik_agent.judge.stream); False runs every case first.
    early_stop: bool = True
    # Survey the candidate's launcher over every size of the declared domain and judge
    # each change of its launch (tik_agent.judge.configs); specs without a domain have none.
    survey: bool = True

    @property
    def graph_phase(self) -> bool:
        return self.timing and (self.device == "cuda" if self.graphs is None else self.graphs)

    def __post_init__(self):
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise UsageError(f"--timeout: must be positive (got {self.timeout_s})")
        if self.rounds < 1:
            raise UsageError(f"--rounds: must be at least 1 (got {self.rounds})")


@dataclass
class Reference:
    """The seed's outputs for the evaluation cases on one device."""

    outputs: dict  # case id -> full output tensor
    environment: dict
    seed_sha256: str
    cases: list[Case] = field(default_factory=list)
    phase_seconds: dict = field(default_factory=dict)  # the seed's worker, per phase (basis of the limits)

    def save(self, path: Path) -> None:
        import torch

        tmp = path.with_suffix(".tmp")
        torch.save({"outputs": self.outputs, "environment": self.environment, "seed_sha256": self.seed_sha256,
                    "cases": [c.to_dict() for c in self.cases], "phase_seconds": dict(self.phase_seconds)}, tmp)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Reference":
        import torch

        d = torch.load(path, weights_only=True, map_location="cpu")
        return cls(d["outputs"], d["environment"], d["seed_sha256"], [Case.from_dict(c) for c in d["cases"]],
                   dict(d.get("phase_seconds", {})))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
