"""A seed's own audit: its outputs on every evaluation case and a full evaluation of the
seed against itself (parity baseline and timings), taken from the seed-audit cache
(:mod:`tik_agent.judge.auditcache`) when an earlier audit of the same seed, grid,
device, options and versions is there, else computed and stored for the next caller.

Two callers: a new run's root commit (:mod:`tik_agent.run.rundir`) and the export of
a seed's own wheel (:mod:`tik_agent.export.seedsource`), so ``tik-agent export
rmsnorm`` after ``tik-agent optimize rmsnorm`` (or a second export) audits nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from tik_agent.atomicfile import atomic_write_json
from tik_agent.errors import UsageError
from tik_agent.judge.auditcache import RECORD, AuditCache, AuditFiles, AuditKey, cache_root
from tik_agent.judge.evaluate import compute_reference, evaluate
from tik_agent.judge.options import EvalOptions, Reference
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

SEED_KIND = "seed"  # evaluation.json's ``kind`` for a seed's audit (a variant's is "variant")


@dataclass(frozen=True)
class SeedAudit:
    """A passed audit of a seed, and where it came from."""

    record: dict              # evaluation.json: kind "seed", environment, cases, timing, noise, timer
    key: AuditKey
    reused: bool              # taken from the cache rather than computed now
    entry: Path | None        # the cache entry it came from or was stored in (None: storing failed)
    audited_at: datetime      # when the entry was stored (now, if it could not be)


def audit_seed(spec: KernelSpec, options: EvalOptions, device: Mapping[str, Any], files: AuditFiles, *,
               fresh: bool = False, reference: Callable[[], Reference] | None = None,
               cache: AuditCache | None = None) -> SeedAudit:
    """The seed's audit written into ``files``: from the cache unless ``fresh``, else computed
    (the outputs by ``reference()``, by default computed and saved to ``files.reference``),
    then stored.  A seed that fails its own audit is a :class:`UsageError`."""
    cache = cache or AuditCache(cache_root())
    key = AuditKey.of(spec, options, device)
    entry = None if fresh else cache.fetch(key, files)
    if entry is not None:
        log.info("reusing the seed's audit from %s (same seed, spec, grid, device and versions; "
                 "--fresh-audit recomputes it)", entry)
        return SeedAudit(json.loads(files.evaluation.read_text()), key, True, entry, _stored_at(entry))
    outputs = reference() if reference is not None else _computed_reference(spec, options, files.reference)
    evaluate_seed(spec, outputs, options, files)
    # As written (and as a later caller reads it from the cache): one audit, one record, whoever asks.
    record = json.loads(files.evaluation.read_text())
    try:
        entry = cache.store(key, files)
        log.debug("stored the seed's audit in %s", entry)
    except OSError as exc:  # the audit is made; only the next caller will not find it
        log.warning("could not store the seed's audit in %s: %s", cache.root, exc)
        entry = None
    stored = _stored_at(entry) if entry is not None else None
    return SeedAudit(record, key, False, entry, stored or datetime.now(timezone.utc))


def _computed_reference(spec: KernelSpec, options: EvalOptions, path: Path) -> Reference:
    log.info("computing the seed's outputs on its fixed parity cases (%s)", options.device)
    outputs = compute_reference(spec, options)
    outputs.save(path)
    return outputs


def evaluate_seed(spec: KernelSpec, reference: Reference, options: EvalOptions, files: AuditFiles) -> dict:
    """The seed evaluated against itself, written to ``files.evaluation``; refused unless it passed."""
    log.info("auditing the seed: parity baseline and timings")
    if options.device == "cuda" and files.warm_cache is not None:
        options = dataclasses.replace(options, save_cache=str(files.warm_cache))
    audit = evaluate(spec, spec.source, options, reference=reference)
    if not audit.timing:
        raise UsageError(f"{spec.source}: the seed's own audit failed: {audit.reason}")
    record = {"schema": 1, "kind": SEED_KIND, "environment": audit.environment, "cases": audit.cases,
              "timing": audit.timing, "speedup": 1.0, "noise": audit.noise, "timer": audit.timer,
              "seed_sha256": audit.seed_sha256}
    atomic_write_json(files.evaluation, record)
    return record


def _stored_at(entry: Path) -> datetime | None:
    """The time a cache entry was stored (its record's ``stored``), None if unreadable."""
    try:
        return datetime.fromisoformat(json.loads((entry / RECORD).read_text())["stored"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
