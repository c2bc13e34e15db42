"""Sampler against trainer, per token: the importance ratio, its spread, a KL estimate, bit identity.

For a response token with sampler log-prob ``s`` and trainer log-prob ``t``
the importance ratio is ``r = exp(t - s)``.  The figures an RL engineer reads:
the largest and the mean ``|r - 1|`` over the tokens, and the k3 estimate of
KL(sampler || trainer), the mean of ``(r - 1) - log r`` (non-negative, zero
exactly when every ratio is 1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from tik_agent.onpolicy.kernels import KernelSet
from tik_agent.onpolicy.model import Config, Decoder
from tik_agent.onpolicy.sampler import sample_logprobs
from tik_agent.onpolicy.trainer import train_logprobs
from tik_agent.onpolicy.workload import make_workload

DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class SideBySide:
    """One kernel set's figures in one model dtype."""

    kernels: str
    dtype: str
    tokens: int
    identical: int
    max_abs_ratio_minus_1: float
    mean_abs_ratio_minus_1: float
    kl_k3: float
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
        return {"kernels": self.kernels, "dtype": self.dtype, "tokens": self.tokens,
                "identical_tokens": self.identical, "identical_fraction": self.identical_fraction,
                "max_abs_ratio_minus_1": self.max_abs_ratio_minus_1,
                "mean_abs_ratio_minus_1": self.mean_abs_ratio_minus_1, "kl_k3": self.kl_k3,
                "max_abs_logprob_diff": self.max_abs_logprob_diff, "grad_norm": self.grad_norm,
                "seconds": round(self.seconds, 3), "sources": dict(self.sources)}


def compare(ops: KernelSet, config: Config | None = None, sequences: int = 4, seed: int = 0,
            dtype: str = "float32") -> SideBySide:
    import torch

    config = config or Config()
    model = Decoder(config, seed, dtype)
    workload = make_workload(config.vocab, sequences, seed)
    start = time.perf_counter()
    sampled = sample_logprobs(model, ops, workload)
    trained, grad_norm = train_logprobs(model, ops, workload)
    if sampled.keys() != trained.keys():
        raise RuntimeError(f"on-policy check: the sampler scored {len(sampled)} tokens, the trainer {len(trained)}")
    identical, worst_diff, ratios = 0, 0.0, []
    for key, s in sampled.items():
        t = trained[key]
        identical += int(s.view(torch.int32) == t.view(torch.int32))
        diff = float(t.double() - s.double())
        worst_diff = max(worst_diff, abs(diff)) if math.isfinite(diff) else math.inf
        ratios.append(diff)
    return SideBySide(ops.name, dtype, len(sampled), identical, *ratio_statistics(ratios), worst_diff, grad_norm,
                      time.perf_counter() - start, dict(ops.sources))


def ratio_statistics(log_ratios: list[float]) -> tuple[float, float, float]:
    """(max |r - 1|, mean |r - 1|, mean k3) of the tokens' log-ratios ``t - s``; inf if any is not finite."""
    if not log_ratios:
        return 0.0, 0.0, 0.0
    if not all(math.isfinite(d) for d in log_ratios):
        return math.inf, math.inf, math.inf
    deviations = [abs(math.expm1(d)) for d in log_ratios]
    k3 = [math.expm1(d) - d for d in log_ratios]
    return max(deviations), sum(deviations) / len(deviations), sum(k3) / len(k3)
