"""The evaluator's verdict as a record: an outcome (one of :data:`VERDICT_OUTCOMES`) and versioned JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tik_agent.outcomes import VERDICT_OUTCOMES, Outcome

SCHEMA_VERSION = 1


@dataclass
class Verdict:
    outcome: Outcome                       # one of VERDICT_OUTCOMES
    reason: str | None
    speedup: float | None = None           # workload-weighted, candidate vs seed
    speedup_low: float | None = None       # the slowest round's paired speedup over the seed
    speedup_vs_parent: float | None = None
    speedup_vs_parent_low: float | None = None  # the slowest round's paired speedup over the parent
    noise: float | None = None             # weighted relative spread of the timings
    timer: str | None = None
    cases: list[dict] = field(default_factory=list)
    first_mismatch: dict | None = None
    timing: list[dict] = field(default_factory=list)
    static_violations: list[dict] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    candidate_sha256: str = ""
    seed_sha256: str = ""
    seconds: float = 0.0
    worker_log: str | None = None
    # Which OS isolation the candidate's worker ran under: {"level", "mechanism",
    # "layers"} (see tik_agent.sandbox.isolation); None when nothing ran.
    isolation: dict | None = None
    ceilings: dict | None = None           # the device's measured copy GB/s and matmul TFLOP/s (eval on cuda)

    @property
    def passed(self) -> bool:
        return self.outcome.passed

    @property
    def cases_passed(self) -> int:
        return sum(1 for c in self.cases if c.get("passed"))

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "passed": self.passed,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "speedup": self.speedup,
            "speedup_low": self.speedup_low,
            "speedup_vs_parent": self.speedup_vs_parent,
            "speedup_vs_parent_low": self.speedup_vs_parent_low,
            "noise": self.noise,
            "timer": self.timer,
            "cases_passed": self.cases_passed,
            "cases_total": len(self.cases),
            "first_mismatch": self.first_mismatch,
            "cases": self.cases,
            "timing": self.timing,
            "static_violations": self.static_violations,
            "environment": self.environment,
            "candidate_sha256": self.candidate_sha256,
            "seed_sha256": self.seed_sha256,
            "seconds": self.seconds,
            "worker_log": self.worker_log,
            "isolation": self.isolation,
            "ceilings": self.ceilings,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "Verdict":
        if d.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"verdict schema {d.get('schema')!r} is not {SCHEMA_VERSION}")
        if Outcome(d["outcome"]) not in VERDICT_OUTCOMES:
            raise ValueError(f"verdict outcome {d['outcome']!r} is an attempt's, not the judge's")
        return cls(
            outcome=Outcome(d["outcome"]), reason=d["reason"], speedup=d["speedup"], speedup_low=d.get("speedup_low"),
            speedup_vs_parent=d["speedup_vs_parent"], speedup_vs_parent_low=d.get("speedup_vs_parent_low"),
            noise=d["noise"], timer=d["timer"],
            cases=list(d["cases"]), first_mismatch=d["first_mismatch"], timing=list(d["timing"]),
            static_violations=list(d["static_violations"]), environment=dict(d["environment"]),
            candidate_sha256=d["candidate_sha256"], seed_sha256=d["seed_sha256"],
            seconds=float(d["seconds"]), worker_log=d.get("worker_log"), ceilings=d.get("ceilings"),
            isolation=dict(d["isolation"]) if d.get("isolation") else None,
        )
