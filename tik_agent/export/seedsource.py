"""What an export takes from a seed itself (``tik-agent export rmsnorm``): the seed's
kernel, certified by the seed's own audit.

The audit is the one a run of the seed commits as its root (:mod:`tik_agent.judge.seedaudit`):
taken from the seed-audit cache when it holds one for this seed, grid, device and
versions (so a second export, or an export after ``optimize``, audits nothing),
else computed, which under the CPU interpreter takes minutes, and stored.  No run
directory is created: the certificate's provenance is ``seed``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from tik_agent.backends import device as devices
from tik_agent.errors import UsageError
from tik_agent.export.source import ExportSource
from tik_agent.judge.auditcache import AuditFiles
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.seedaudit import SeedAudit, audit_seed
from tik_agent.run.runconfig import is_run_dir
from tik_agent.spec import seeds
from tik_agent.spec.schema import SPEC_FILE, load_spec

log = logging.getLogger(__name__)

SEED_PROVENANCE = "seed"


def is_seed_argument(text: str | Path) -> bool:
    """Whether ``export``'s argument names a seed rather than a run: a directory holding a
    ``spec.toml`` and no ``run.json`` (a run's working tree holds a spec too), or a bundled
    seed's name where no such path exists."""
    path = Path(text).expanduser()
    if path.exists():
        return path.is_dir() and (path / SPEC_FILE).is_file() and not is_run_dir(path)
    return "/" not in str(text) and str(text) in seeds.bundled_names()


def read_seed_source(seed: str | Path, workdir: Path, device: str | None = None,
                     fresh_audit: bool = False) -> tuple[ExportSource, SeedAudit]:
    """The seed's kernel and its audit on ``device`` (default: cuda if visible, else the CPU
    interpreter), with the options a default ``optimize`` run audits with, so both share
    one cache entry.  ``workdir`` receives the audit's files."""
    seed_dir = seeds.seed_directory(seed)
    spec = load_spec(seed_dir)
    resolved = devices.resolve(device)
    options = EvalOptions(device=resolved)
    binding = devices.binding(devices.probe_environment(resolved))
    workdir.mkdir(parents=True, exist_ok=True)
    files = AuditFiles(workdir / "reference.pt", workdir / "evaluation.json")
    audit = audit_seed(spec, options, binding, files, fresh=fresh_audit)
    evaluation = _evaluation(audit.record, spec.source)
    kernel = spec.source.read_bytes()
    spec_bytes = spec.spec_path.read_bytes()
    source = ExportSource(
        run_id=None, commit=None, root_commit=None, attempt_id=None, parent_commit=None, spec=spec,
        spec_source=spec_bytes, seed_source=kernel, kernel_source=kernel, evaluation=evaluation, trailers={},
        ancestry=(), committed_at=int(audit.audited_at.timestamp()), provenance=SEED_PROVENANCE,
        audit_key=audit.key.digest, seed_digest=hashlib.sha256(spec_bytes + b"\0" + kernel).hexdigest())
    return source, audit


def _evaluation(record: dict, kernel: Path) -> dict:
    """The audit as the certificate reads a verdict: every case passed, timings present."""
    where = f"the seed's audit of {kernel}"
    if record.get("kind") != SEED_PROVENANCE:
        raise UsageError(f"{where}: kind is {record.get('kind')!r}, expected 'seed'")
    cases = record.get("cases") or []
    if not cases:
        raise UsageError(f"{where}: records no parity cases; there is nothing to certify")
    failed = [c.get("case") for c in cases if not c.get("passed")]
    if failed:
        raise UsageError(f"{where}: records failed parity cases, e.g. {failed[0]}")
    evaluation = json.loads(json.dumps(record))  # a copy: the audit's own record stays as it was
    evaluation.update(outcome="passed", speedup_vs_parent=None, candidate_sha256=record.get("seed_sha256"))
    return evaluation
