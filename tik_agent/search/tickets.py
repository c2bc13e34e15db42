"""What the loop shows of itself: attempts in flight, a snapshot for the live view,
one log line per finished attempt and the commit message of an accepted one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tik_agent import figures
from tik_agent.run.journal import AttemptRecord
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import SEED_TAG, AcceptedKernel, format_trailers
from tik_agent.search.budget import Gauge
from tik_agent.search.frontier import Member
from tik_agent.search.throughput import NodeUse


@dataclass
class Ticket:
    attempt_id: str
    index: int
    parent: Member | None   # chosen just before the proposal
    started: float
    stage: str = "starting"
    stage_started: float = 0.0   # the live view times the stage, not the wait before it
    slot: str | None = None      # "<slot>@<node>" once an evaluation slot is held

    def enter(self, stage: str) -> None:
        self.stage, self.stage_started = stage, time.time()


@dataclass(frozen=True)
class Snapshot:
    """A consistent view of the run for the live display."""

    run_id: str
    seed: str
    agent: str
    model: str | None
    workers: int
    gauges: list[Gauge]
    best: Member
    accepted: int
    outcomes: dict[str, int]
    in_flight: list[Ticket]
    recent: list[AttemptRecord]
    stop_reason: str | None = None
    paused: str | None = None
    frontier: list[Member] = field(default_factory=list)
    executor: str = "local"
    nodes: list[NodeUse] = field(default_factory=list)   # per-node slots and throughput, this session
    noise_margin: float = 0.0
    too_noisy: list[dict] = field(default_factory=list)  # as in summary.json


def commit_message(record: AttemptRecord, verdict, seed_name: str, device: str) -> str:
    """The commit message of an accepted attempt: a title, the agent's rationale, trailers.

    ``Speedup-Vs-Parent`` equals ``Speedup-Vs-Seed`` when the parent is the seed (one
    measurement); ``Noise`` is the spread of both; ``Noise-Retimes`` counts the re-times
    taken because a verdict was too noisy to rank the candidate."""
    trailers = {
        "Attempt-Id": record.attempt_id, "Parent-Commit": record.parent_commit,
        "Speedup-Vs-Seed": f"{record.speedup:.3f}", "Speedup-Vs-Parent": f"{record.speedup_vs_parent:.3f}",
        "Noise": "none" if record.noise is None else f"{record.noise:.4f}",
        **({"Noise-Retimes": record.retimes} if record.retimes else {}),
        "Parity-Cases": f"{record.cases_passed}/{record.cases_total}",
        "Device": verdict.environment.get("device_name", device),
        "Agent": record.agent, "Model": record.model or "none",
        "Tokens-Input": record.input_tokens, "Tokens-Output": record.output_tokens,
    }
    title = f"{record.attempt_id}: {seed_name} {_speedups(record, record.parent_id)}"
    body = (record.rationale or "(no rationale)").strip()
    return f"{title}\n\n{body}\n\n{format_trailers(trailers)}\n"


def noise_of(kernel: AcceptedKernel) -> float | None:
    """The spread of an accepted kernel's speedups, from its ``Noise`` trailer (None: not recorded)."""
    try:
        return float(kernel.trailers["Noise"])
    except (KeyError, ValueError):
        return None


def _speedups(record: AttemptRecord, parent: str) -> str:
    return figures.speedups(record.speedup, record.speedup_vs_parent, record.noise,
                            record.parent_id == SEED_TAG, parent)


def describe(record: AttemptRecord) -> str:
    """One log line for a finished attempt."""
    text = f"{record.attempt_id} from {record.parent_id}: {record.outcome.value}"
    if record.outcome is Outcome.ACCEPTED:
        text += f", {_speedups(record, 'the parent')}"
        if record.retimes:
            text += f" (re-timed {record.retimes}x: too noisy to rank at first)"
    elif record.reason:
        text += f": {record.reason.splitlines()[0][:160]}"
    return text


def too_noisy(records: list[AttemptRecord]) -> list[dict]:
    """The attempts that a verdict too noisy to rank them cost re-times (or left decided under noise)."""
    return [{"attempt_id": r.attempt_id, "retimes": r.retimes, "noise": r.noise, "outcome": r.outcome.value,
             "resolved": not r.noisy} for r in records if r.retimes or r.noisy]


def outcome_counts(records: list[AttemptRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    return counts
