"""Setting up a run: the seed's outputs and audit, computed here and stored by :mod:`tik_agent.run.rundir`.

``create`` starts a run, ``reopen`` continues one (``--resume``).  The order is
:mod:`tik_agent.run.rundir`'s (each step safe to redo after a kill): ``run.json``,
the repository, the seed's files, the cached seed outputs (``reference.pt``),
the seed's audit (``evaluation.json``), the root commit.  The outputs and the
audit come from the seed-audit cache (:mod:`tik_agent.judge.auditcache`) when an
earlier run made them from the same seed, spec, grid, device and versions
(``fresh_audit`` recomputes them); a computed audit that passed is stored there
for the next run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tik_agent.backends import device as devices
from tik_agent.errors import TikError, UsageError
from tik_agent.judge.auditcache import AuditFiles
from tik_agent.judge.evaluate import compute_reference
from tik_agent.judge.options import EvalOptions, Reference, sha256_file
from tik_agent.judge.seedaudit import audit_seed
from tik_agent.run import rundir
from tik_agent.run.journal import AttemptStore, Journal, ResumeState
from tik_agent.run.lineage import EVALUATION_FILE, LineageWriter
from tik_agent.run.rundir import REFERENCE_CACHE, WARM_CACHE, RunDir
from tik_agent.run.runconfig import RunConfig, is_run_dir
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import KernelSpec, load_spec

log = logging.getLogger(__name__)


@dataclass
class Session:
    """An open run ready for the loop: what it stores, the seed's outputs, the evaluation options.

    The loop's pieces are handed only the parts they need; what the run stores is
    read through ``run`` (``session.run.spec``, ``session.run.lineage``...)."""

    run: RunDir
    reference: Reference
    options: EvalOptions

    def close(self) -> None:
        self.run.close()


def eval_options(config: RunConfig) -> EvalOptions:
    return EvalOptions(device=config.device, timeout_s=config.eval_timeout_s, rounds=config.rounds,
                       warmup=config.warmup)


def create(path: Path, config: RunConfig, fresh_audit: bool = False, warm_cache: Path | None = None) -> Session:
    """Start a new run in ``path`` (absent or empty) from ``config``; ``fresh_audit``
    audits the seed again even when the audit cache holds its audit (and refreshes it).
    ``warm_cache``: a Triton cache the seed's audit and outputs start from (a node's)."""
    rundir.check_new_run_dir(path)
    existed = path.exists()
    path.mkdir(parents=True, exist_ok=True)
    config.save(path)
    try:
        return _open(path, config, fresh_audit, warm_cache)
    except TikError as exc:
        # Refused (a seed that fails its own audit, a bad layout): no run was born, so no
        # directory may be left to block the same --run-dir.  A kill or Ctrl-C keeps it:
        # a resume finishes the creation.
        rundir.discard_unborn(path, existed)
        message = str(exc).replace(str(path.resolve()), str(Path(config.seed_source)))
        raise (UsageError if type(exc) is TikError else type(exc))(message) from None


def reopen(path: Path, config: RunConfig, fresh_audit: bool = False, warm_cache: Path | None = None) -> Session:
    """Continue the run in ``path`` with ``config`` (its settings, budgets possibly extended).
    ``fresh_audit`` matters only to a run whose creation was interrupted before its seed commit."""
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a tik-agent run (no run.json)")
    config.check_binding(devices.binding(devices.probe_environment(config.device)))
    return _open(path, config, fresh_audit, warm_cache)


def _open(path: Path, config: RunConfig, fresh_audit: bool = False, warm_cache: Path | None = None) -> Session:
    path = path.resolve()
    lock = rundir.take_lock(path)
    try:
        lineage = rundir.prepare(path, config)
        options = eval_options(config)
        if not lineage.has_root():
            rundir.copy_seed(Path(config.seed_source), path)
            # The audit's workers start from the node's cache; the run keeps the audit's own
            # (WARM_CACHE), which every candidate's worker then starts from.
            audit_options = dataclasses.replace(options, warm_cache=str(Path(warm_cache).resolve())) \
                if warm_cache is not None else options
            _make_root(lineage, load_spec(path), audit_options, config, fresh_audit)
        elif fresh_audit:
            log.warning("%s: the seed's audit is already committed; --fresh-audit changes nothing here", path)
        spec = rundir.snapshot_seed(lineage)
        reference = seed_reference(path, spec, options)
        return Session(rundir.open_run_dir(path, config, lineage, spec, lock), reference, options)
    except BaseException:
        os.close(lock)
        raise


def _make_root(lineage: LineageWriter, spec: KernelSpec, options: EvalOptions, config: RunConfig,
               fresh_audit: bool) -> None:
    """The seed's outputs and audit, from the audit cache or computed (then stored), and the root commit."""
    device = config.binding or devices.binding(devices.probe_environment(config.device))
    files = AuditFiles(lineage.path / REFERENCE_CACHE, lineage.path / EVALUATION_FILE,
                       lineage.path / WARM_CACHE if options.device == "cuda" else None)
    audit = audit_seed(spec, options, device, files, fresh=fresh_audit,
                       reference=lambda: seed_reference(lineage.path, spec, options, fresh=fresh_audit))
    rundir.commit_root(lineage, spec, audit.record, config, reused=audit.key.digest if audit.reused else None)


def seed_reference(run_dir: Path, spec: KernelSpec, options: EvalOptions, fresh: bool = False) -> Reference:
    """The seed's outputs on every evaluation case: cached in reference.pt, recomputed if stale."""
    path = run_dir / REFERENCE_CACHE
    wanted = [c.id for c in evaluation_cases(spec, options.device)]
    if path.is_file() and not fresh:
        try:
            ref = Reference.load(path)
            if ref.seed_sha256 == sha256_file(spec.source) and [c.id for c in ref.cases] == wanted:
                return ref
            log.info("%s is stale; recomputing the seed's outputs", path)
        except (OSError, RuntimeError, KeyError, EOFError) as exc:
            log.warning("%s is unreadable (%s); recomputing the seed's outputs", path, exc)
    log.info("computing the seed's outputs on %d fixed parity cases (%s)", len(wanted), options.device)
    ref = compute_reference(spec, options)
    ref.save(path)
    return ref
