"""Sampler against trainer, per token: the importance ratio and bit identity."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from tik_agent.onpolicy.kernels import KernelSet
from tik_agent.onpolicy.model import Config, Decoder
from tik_agent.onpolicy.sampler import sample_logprobs
from tik_agent.onpolicy.trainer import train_logprobs
from tik_agent.onpolicy.workload import make_workload


@dataclass(frozen=True)
class SideBySide:
    """One kernel set's figures: ratio = exp(trainer log-prob - sampler log-prob)."""

    kernels: str
    tokens: int
    identical: int
    max_abs_ratio_minus_1: float
    max_abs_logprob_diff: float
    grad_norm: float
    seconds: float
    sources: dict = field(default_factory=dict)

    @property
    def identical_fraction(self) -> float:
        return self.identical / self.tokens if self.tokens else 0.0

    @property
    def on_policy(self) -> bool:
        return self.tokens > 0 and self.identical == self.tokens

    def to_dict(self) -> dict:
        return {"kernels": self.kernels, "tokens": self.tokens, "identical_tokens": self.identical,
                "identical_fraction": self.identical_fraction, "max_abs_ratio_minus_1": self.max_abs_ratio_minus_1,
                "max_abs_logprob_diff": self.max_abs_logprob_diff, "grad_norm": self.grad_norm,
                "seconds": round(self.seconds, 3), "sources": dict(self.sources)}


def compare(ops: KernelSet, config: Config | None = None, sequences: int = 4, seed: int = 0) -> SideBySide:
    import torch

    config = config or Config()
    model = Decoder(config, seed)
    workload = make_workload(config.vocab, sequences, seed)
    start = time.perf_counter()
    sampled = sample_logprobs(model, ops, workload)
    trained, grad_norm = train_logprobs(model, ops, workload)
    if sampled.keys() != trained.keys():
        raise RuntimeError(f"on-policy check: the sampler scored {len(sampled)} tokens, the trainer {len(trained)}")
    identical, worst_ratio, worst_diff = 0, 0.0, 0.0
    for key, s in sampled.items():
        t = trained[key]
        identical += int(s.view(torch.int32) == t.view(torch.int32))
        diff = float(t.double() - s.double())
        worst_diff = max(worst_diff, abs(diff)) if math.isfinite(diff) else math.inf
        worst_ratio = max(worst_ratio, abs(math.expm1(diff))) if math.isfinite(diff) else math.inf
    return SideBySide(ops.name, len(sampled), identical, worst_ratio, worst_diff, grad_norm,
                      time.perf_counter() - start, dict(ops.sources))
