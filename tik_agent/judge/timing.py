"""Timing statistics: medians, spread, weighted speedup, noise and the regression cap.

Samples come from a worker that timed kernels in interleaved rounds (see
:mod:`tik_agent.sandbox.worker`).  Everything here is arithmetic on those
samples, so the rules of promotion are testable without a device.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

# No cell may be more than this much slower than the seed (AReaL-TIK's rule).
REGRESSION_CAP = 1.05


@dataclass(frozen=True)
class Stats:
    median_ms: float
    iqr_ms: float
    min_ms: float
    n: int

    @property
    def rel_spread(self) -> float:
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0

    def to_dict(self) -> dict:
        return {"median_ms": self.median_ms, "iqr_ms": self.iqr_ms, "min_ms": self.min_ms, "n": self.n}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Stats":
        return cls(float(d["median_ms"]), float(d["iqr_ms"]), float(d["min_ms"]), int(d["n"]))


def stats(samples_ms: Sequence[float]) -> Stats:
    if not samples_ms:
        raise ValueError("no timing samples")
    xs = sorted(samples_ms)
    if len(xs) >= 4:
        q = statistics.quantiles(xs, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = xs[-1] - xs[0]
    return Stats(statistics.median(xs), iqr, xs[0], len(xs))


@dataclass(frozen=True)
class CellTiming:
    """One workload cell: the seed's and the candidate's samples, side by side."""

    name: str
    shape: str
    weight: float
    seed: Stats
    candidate: Stats
    parent: Stats | None = None
    # seed time / candidate time in each interleaved round (paired: same machine state)
    round_ratios: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        """Speedup of the candidate over the seed in this cell (>1 is faster)."""
        return self.seed.median_ms / self.candidate.median_ms

    @property
    def noise(self) -> float:
        """Relative noise of this cell: the largest relative IQR of the kernels timed."""
        spreads = [self.seed.rel_spread, self.candidate.rel_spread]
        if self.parent is not None:
            spreads.append(self.parent.rel_spread)
        return max(spreads)

    def regressed(self, cap: float = REGRESSION_CAP) -> bool:
        """Slower than the seed by more than the cap and the noise, and in every round."""
        slowdown = self.candidate.median_ms / self.seed.median_ms
        every_round = all(r < 1.0 for r in self.round_ratios)
        return slowdown > cap and slowdown - 1.0 > self.noise and every_round

    def to_dict(self) -> dict:
        d = {
            "name": self.name, "shape": self.shape, "weight": self.weight,
            "seed": self.seed.to_dict(), "candidate": self.candidate.to_dict(),
            "speedup": self.ratio, "noise": self.noise, "round_ratios": list(self.round_ratios),
        }
        if self.parent is not None:
            d["parent"] = self.parent.to_dict()
            d["speedup_vs_parent"] = self.parent.median_ms / self.candidate.median_ms
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "CellTiming":
        parent = Stats.from_dict(d["parent"]) if d.get("parent") else None
        return cls(d["name"], d["shape"], float(d["weight"]), Stats.from_dict(d["seed"]),
                   Stats.from_dict(d["candidate"]), parent, tuple(d.get("round_ratios", ())))


def weighted_speedup(cells: Sequence[CellTiming], against: str = "seed") -> float:
    """Ratio of weighted latency sums: sum(w * t_ref) / sum(w * t_candidate)."""
    ref = sum(c.weight * getattr(c, against).median_ms for c in cells)
    cand = sum(c.weight * c.candidate.median_ms for c in cells)
    return ref / cand


def weighted_noise(cells: Sequence[CellTiming]) -> float:
    """Workload-weighted relative noise: speedups within it are not evidence."""
    total = sum(c.weight for c in cells)
    return sum(c.weight * c.noise for c in cells) / total


def regressions(cells: Sequence[CellTiming], cap: float = REGRESSION_CAP) -> list[CellTiming]:
    return [c for c in cells if c.regressed(cap)]


def paired_speedups(samples: Mapping[str, Mapping[str, Sequence[float]]], weights: Mapping[str, float],
                    against: str) -> list[float]:
    """Per-round speedups of the candidate over ``against`` (weighted latency sums).

    Rounds are interleaved, so both kernels of a round saw the same machine;
    a ratio per round cancels load drift that a comparison of medians keeps.
    """
    rounds = min(len(samples[cell]["candidate"]) for cell in weights)
    out = []
    for r in range(rounds):
        ref = sum(w * samples[cell][against][r] for cell, w in weights.items())
        cand = sum(w * samples[cell]["candidate"][r] for cell, w in weights.items())
        out.append(ref / cand)
    return out
