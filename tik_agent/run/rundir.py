"""A run directory as storage: lock it, lay it out, and bring it to a consistent state.

Creation order (each step safe to redo after a kill): ``run.json``, the git
repository, the seed's files in the working tree, the cached seed outputs
(``reference.pt``), the seed's audit (``evaluation.json``), the root commit.
This module stores and never evaluates: :mod:`tik_agent.search.setup` drives the
creation, computing the seed's outputs and its audit (or taking them from the
seed-audit cache) and handing them here to be committed.

Reopening (``--resume``) checks the environment binding first, takes the run
lock (a second process on the same run is refused), clears git locks a killed
process left, finishes an interrupted creation, then reconciles the journal
with git: an accepted commit whose attempt the journal does not call finished
gets its record back from the commit (the commit is made before the journal
line), and every other started-but-unfinished attempt is set aside and redone.
Finally ``main`` is pointed at the best kernel and checked out.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord, AttemptStore, Journal, ResumeState
from tik_agent.run.lineage import (EVALUATION_FILE, KERNEL_FILE, REFERENCE_FILE, SEED_TAG, SPEC_FILE,
                               LineageWriter, format_trailers)
from tik_agent.run.runconfig import RunConfig, is_run_dir
from tik_agent.spec.schema import KernelSpec, load_spec

log = logging.getLogger(__name__)

REFERENCE_CACHE = "reference.pt"
# The Triton cache of the seed's own audit (trusted code only), copied fresh into every
# cuda worker so that no sandbox starts by recompiling the seed.
WARM_CACHE = "triton-cache"
# Bit probes of the seed's tunables on this run's device (from scripts/gpu-check.sh), if given.
PROBES_FILE = "probes.json"
LOCK_FILE = "run.lock"
SEED_SNAPSHOT = Path(".git") / "tik-seed"  # the root commit's files, for this session's evaluations


@dataclass
class RunDir:
    """An open, locked, consistent run directory: what the run has stored."""

    path: Path
    config: RunConfig
    lineage: LineageWriter
    journal: Journal
    store: AttemptStore
    spec: KernelSpec          # the seed as the root commit holds it (SEED_SNAPSHOT)
    environment: dict         # the seed audit's environment
    state: ResumeState
    redo: list[str] = field(default_factory=list)
    _lock_fd: int | None = None

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def check_new_run_dir(path: Path) -> None:
    if is_run_dir(path):
        raise UsageError(f"{path}: is an existing run; continue it with --resume {path}")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{path}: exists and is not a tik-agent run; choose another --run-dir")


def discard_unborn(path: Path, keep_dir: bool) -> None:
    """Remove a run directory whose seed commit was never made (what ``create`` put there)."""
    writer = LineageWriter(path)
    if path.is_dir() and writer.repo.is_repository() and writer.has_root():
        return
    if keep_dir:
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def holder(path: Path) -> str | None:
    """The pid holding the run's lock (a session in progress), or None.  The lock is a
    flock, so a killed process releases it: a dead run never shows as running."""
    lock = Path(path) / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 32).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)  # releases the shared lock if it was taken
    return None


def take_lock(path: Path) -> int:
    """Take the run's lock (an flock, so a killed process releases it); refused while held."""
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise UsageError(f"{path}: the run is in use (by pid {holder}); wait for it or stop it first") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def prepare(path: Path, config: RunConfig) -> LineageWriter:
    """Under the run lock: ``run.json`` (a resume's extended budgets), the repository, no stale git locks."""
    config.save(path)
    return LineageWriter.init(path)


def open_run_dir(path: Path, config: RunConfig, lineage: LineageWriter, spec: KernelSpec, lock_fd: int) -> RunDir:
    """The run after its root commit: the journal repaired and reconciled with the lineage."""
    environment = json.loads(lineage.file_at(lineage.root_commit(), EVALUATION_FILE))["environment"]
    journal, store = Journal(path), AttemptStore(path)
    journal.repair()
    run = RunDir(path, config, lineage, journal, store, spec, environment, ResumeState(), _lock_fd=lock_fd)
    _reconcile(run)
    return run


def copy_seed(seed_dir: Path, run_dir: Path) -> None:
    """The seed's files into the run directory's working tree (a seed for optimize keeps fixed names)."""
    spec = load_spec(seed_dir)
    if spec.source.name != KERNEL_FILE or (spec.reference and spec.reference.name != REFERENCE_FILE):
        raise UsageError(f"{seed_dir}: a seed for optimize keeps its kernel in {KERNEL_FILE} "
                         f"(and its reference in {REFERENCE_FILE})")
    for f in (spec.spec_path, spec.source, spec.reference):
        if f is not None:
            shutil.copyfile(f, run_dir / f.name)


def _tracked(spec: KernelSpec) -> list[str]:
    return [SPEC_FILE, KERNEL_FILE] + ([REFERENCE_FILE] if spec.reference else []) + [EVALUATION_FILE]


def snapshot_seed(lineage: LineageWriter) -> KernelSpec:
    """The seed as the root commit holds it, in a directory the working tree cannot change."""
    target = lineage.path / SEED_SNAPSHOT
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    root = lineage.root_commit()
    for name in (SPEC_FILE, KERNEL_FILE, REFERENCE_FILE):
        try:
            (target / name).write_text(lineage.file_at(root, name))
        except UsageError:
            if name != REFERENCE_FILE:
                raise
    return load_spec(target)


def commit_root(lineage: LineageWriter, spec: KernelSpec, audit: dict, config: RunConfig,
                reused: str | None = None) -> None:
    """The root commit: the seed's files and its ``audit`` (already in the working tree);
    ``reused`` names the audit-cache entry the audit came from."""
    cases, timing = audit["cases"], audit["timing"]
    passed = sum(1 for c in cases if c.get("passed"))
    trailers = {"Kind": "seed", "Seed": spec.name, "Parity-Cases": f"{passed}/{len(cases)}",
                "Device": audit["environment"].get("device_name", config.device)}
    origin = ""
    if reused is not None:
        trailers["Audit-Reused"] = reused
        origin = " The audit was reused from an earlier run of the same seed (the audit cache entry named below)."
    message = (f"seed: {spec.name}\n\nThe seed kernel and its audit: parity baseline over "
               f"{len(cases)} cases, timings of {len(timing)} workload cells.{origin}\n\n"
               f"{format_trailers(trailers)}\n")
    lineage.commit_root(_tracked(spec), message)


def _reconcile(run: RunDir) -> None:
    lineage, journal, store = run.lineage, run.journal, run.store
    state = ResumeState.replay(journal.events())
    for kernel in lineage.accepted():
        if kernel.attempt_id not in state.finished:
            record = restored_record(lineage, store, kernel.commit)
            log.info("%s: accepted commit %s was not journaled as finished; restoring its record",
                     record.attempt_id, kernel.commit[:12])
            if store.read(record.attempt_id, "record.json") is None:
                store.write_json(record.attempt_id, "record.json", record.to_dict())
            journal.append("finished", record=record.to_dict(), t=record.finished_at)  # not now: see replay
    state = ResumeState.replay(journal.events())
    for attempt in state.unfinished:
        moved = store.set_aside(attempt)
        if moved is not None:
            log.info("%s was interrupted; its partial files are in %s and it will be redone", attempt, moved)
    run.state = state
    run.redo = list(state.unfinished)
    lineage.set_best(lineage.best_by_speedup())


def restored_record(lineage: LineageWriter, store: AttemptStore, commit: str) -> AttemptRecord:
    """An accepted attempt's record, rebuilt from its commit's trailers."""
    t = lineage.trailers(commit)
    attempt = t["Attempt-Id"]
    parent = t["Parent-Commit"]
    parent_id = SEED_TAG if parent == lineage.root_commit() else lineage.trailers(parent).get("Attempt-Id", "?")
    passed, _, total = t.get("Parity-Cases", "0/0").partition("/")
    evaluation = json.loads(lineage.file_at(commit, EVALUATION_FILE))
    return AttemptRecord(
        attempt_id=attempt, index=int(attempt[1:]), parent_commit=parent, parent_id=parent_id,
        outcome=Outcome.ACCEPTED, reason="restored from the lineage after an interruption",
        speedup=float(t["Speedup-Vs-Seed"]), speedup_vs_parent=float(t["Speedup-Vs-Parent"]),
        noise=evaluation.get("noise"), commit=commit, cases_passed=int(passed), cases_total=int(total or 0),
        rationale=store.read(attempt, "rationale.txt") or "",
        input_tokens=int(t.get("Tokens-Input", 0)), output_tokens=int(t.get("Tokens-Output", 0)),
        agent=t.get("Agent", ""), model=None if t.get("Model") in (None, "none") else t["Model"],
        finished_at=lineage.committed_at(commit), restored=True)
