"""What the agent is told: the parent, its timings, and earlier attempts as feedback.

Agents know nothing of the sandbox or the journal; this module turns lineage
kernels and attempt records into the plain data of an :class:`AgentContext`.
``recent`` holds every finished attempt from the chosen parent (so an agent
never repeats itself from there) plus the latest few from elsewhere.
"""

from __future__ import annotations

import difflib
import json
import threading
from typing import Sequence

from pathlib import Path

from tik_agent.agents.base import AgentContext, AttemptFeedback
from tik_agent.run.journal import AttemptRecord, AttemptStore
from tik_agent.run.lineage import EVALUATION_FILE, KERNEL_FILE, Lineage
from tik_agent.search.frontier import Member
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.tunables import load_probes, split_for_device

RECENT_OTHERS = 12   # attempts from other parents shown to the agent


def source_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{old_name}/{KERNEL_FILE}", tofile=f"{new_name}/{KERNEL_FILE}"))


class Briefing:
    """Builds contexts; caches kernels and feedback (both immutable once written).

    ``git_lock`` serialises reads of the lineage with the loop's commits (one
    git object reader per repository).  ``device`` is the run's (``cpu``, ``cuda``),
    ``device_name`` what the agent is told of it; ``probes_file`` is the bit probes
    of the seed's tunables on this device, when a run has them.
    """

    def __init__(self, spec: KernelSpec, device: str, device_name: str, rng_seed: int, lineage: Lineage,
                 store: AttemptStore, git_lock: threading.Lock, probes_file: Path | None = None):
        self._spec, self._device_name, self._rng_seed = spec, device_name, rng_seed
        self._lineage, self._store = lineage, store
        self._git_lock = git_lock
        self._lock = threading.Lock()
        self._kernels: dict[str, tuple[str, list[dict]]] = {}
        self._feedback: dict[str, AttemptFeedback] = {}
        self._spec_text = spec.spec_path.read_text()
        self._seed_source = spec.source.read_text()
        probes = load_probes(probes_file, device) if probes_file is not None and probes_file.is_file() else None
        # On this device: values known to keep bits, and values only the parity check can judge.
        self._tunables, self._unproven = split_for_device(spec, device, probes)

    def kernel(self, commit: str) -> tuple[str, list[dict]]:
        """A lineage kernel's source and its timing table (seed and kernel medians per cell)."""
        with self._git_lock:
            if commit not in self._kernels:
                source = self._lineage.file_at(commit, KERNEL_FILE)
                evaluation = json.loads(self._lineage.file_at(commit, EVALUATION_FILE))
                table = [{"name": c["name"], "shape": c["shape"], "seed_ms": c["seed"]["median_ms"],
                          "parent_ms": c["candidate"]["median_ms"]} for c in evaluation.get("timing", [])]
                self._kernels[commit] = (source, table)
            return self._kernels[commit]

    def context(self, parent: Member, index: int, records: Sequence[AttemptRecord],
                seen: frozenset[str] = frozenset()) -> AgentContext:
        """The context of attempt ``index`` (1-based) from ``parent``, given the finished ``records``."""
        spec = self._spec
        source, table = self.kernel(parent.commit)
        mine = [r for r in records if r.parent_commit == parent.commit]
        others = [r for r in records if r.parent_commit != parent.commit][-RECENT_OTHERS:]
        chosen = sorted(mine + others, key=lambda r: r.index)
        return AgentContext(
            spec_text=self._spec_text, entry=spec.entry, seed_name=spec.name, tunables=self._tunables,
            unproven=self._unproven,
            seed_source=self._seed_source, parent_id=parent.name, parent_source=source,
            parent_speedup=parent.speedup, timing_table=table, recent=[self.feedback(r) for r in chosen],
            device=self._device_name, rng_seed=self._rng_seed,
            attempt_index=index - 1, seen_sources=seen)

    def feedback(self, record: AttemptRecord) -> AttemptFeedback:
        with self._lock:
            if record.attempt_id in self._feedback:
                return self._feedback[record.attempt_id]
        store = self._store
        report = store.read(record.attempt_id, "report.json")
        mismatch = json.loads(report).get("first_mismatch") if report else None
        feedback = AttemptFeedback(   # the record's own outcome: the agent is told exactly what happened
            attempt_id=record.attempt_id, parent_id=record.parent_id, outcome=record.outcome, reason=record.reason,
            rationale=record.rationale or None,
            speedup=record.speedup if record.speedup and record.speedup > 0 else None,
            compile_error=record.reason if record.outcome.is_error else None, first_mismatch=mismatch,
            source_diff=store.read(record.attempt_id, "diff.patch"))
        with self._lock:
            return self._feedback.setdefault(record.attempt_id, feedback)
