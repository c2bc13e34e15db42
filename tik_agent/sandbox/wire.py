"""What a worker hands the judge: one case's raw outputs, and how a result is read.

The judge reads these on the trusted side; the worker writes them.  Kept apart from
:mod:`tik_agent.sandbox.harness` (which runs kernel code and patches torch's
allocators) so that the judge depends only on the data, and this module imports
nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tik_agent.spec.cases import SubBatch


def as_outputs(out) -> tuple:
    """An entry's result as a tuple of outputs: one tensor, or the tuple several outputs make."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclass
class CaseOutputs:
    """What one case produced, as raw tensors; compared on the trusted side."""

    full: object
    again: object
    rows: object | None = None
    subs: list[tuple[SubBatch, object]] = field(default_factory=list)
    launches: dict[str, int] = field(default_factory=dict)
    inputs_digest_after: str = ""
    probes: dict[str, object] = field(default_factory=dict)  # sequences layout: launch label -> output

    def to_payload(self) -> dict:
        return {
            "full": self.full, "again": self.again, "rows": self.rows,
            "subs": [(list(s.index), s.prefix, t) for s, t in self.subs],
            "launches": dict(self.launches), "inputs_digest_after": self.inputs_digest_after,
            "probes": dict(self.probes),
        }

    @classmethod
    def from_payload(cls, d: dict) -> "CaseOutputs":
        subs = [(SubBatch(tuple(i), bool(p)), t) for i, p, t in d["subs"]]
        return cls(d["full"], d["again"], d["rows"], subs, dict(d["launches"]), d["inputs_digest_after"],
                   dict(d.get("probes", {})))
