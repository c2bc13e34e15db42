"""The seed-audit cache: a seed's reference outputs and audit, kept by content.

A new run of a seed audits it first (its outputs on every evaluation case, then
a full evaluation against itself with timings); attention's takes minutes.  The
result only depends on what :class:`AuditKey` names: the seed's files, the grid
(evaluation cases and workload cells on the device), the device, the versions of
torch, triton, Python and tik-agent (with a digest of tik-agent's own files, since
its version string does not change with every edit of the evaluator), and the
evaluation options that shape the audit.  Any change is a different key, so a
stale audit is never found, only missed.

An entry is ``<root>/audits/<key digest>/``: ``reference.pt``, ``evaluation.json``,
on cuda the warm Triton cache, and ``record.json`` (the key's inputs in full and
a digest of each file), written into a temporary directory and renamed, so no
process ever sees half an entry.  :meth:`AuditCache.fetch` checks the copies it
makes against the record and the key; an entry that fails any check is reported
as a warning and missed, never used in part.

The store is for trusted results only (the seed's own audit, which passed): the
root is created 0700, since what it holds is committed into runs as the seed's
baseline and its Triton cache is copied into every cuda worker.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import platform
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import tik_agent
from tik_agent.judge.options import EvalOptions, Reference, sha256_file
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

SCHEMA = 1
CACHE_ENV = "TIK_AGENT_CACHE"
RECORD = "record.json"
# Entry file name -> the AuditFiles field it is copied from and to.
_ENTRY_FILES = {"reference.pt": "reference", "evaluation.json": "evaluation", "triton-cache": "warm_cache"}
# Options that say where or how verbosely an evaluation runs, not what it measures.
_NOT_AUDIT_SHAPING = ("keep_workdir", "cuda_device", "warm_cache", "save_cache", "early_stop")
# A broken entry can fail in any of these ways; each means "recompute", never "crash".
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError)


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """``$TIK_AGENT_CACHE``, else ``$XDG_CACHE_HOME/tik-agent``, else ``~/.cache/tik-agent``."""
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tik-agent"


def versions() -> dict[str, str]:
    """The software an audit's bits and timings depend on."""
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "tik_agent": tik_agent.__version__, "tik_agent_files": _package_digest()}


def _package_digest() -> str:
    """sha256 over tik-agent's own files: an edited evaluator is a new key, version bump or not."""
    root = Path(tik_agent.__file__).parent
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _digest_tree(path: Path) -> str:
    """sha256 over a directory's relative file names and contents (for the warm Triton cache)."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f.relative_to(path).as_posix().encode() + b"\0" + sha256_file(f).encode() + b"\0")
    return h.hexdigest()


def _digest(path: Path) -> str:
    return _digest_tree(path) if path.is_dir() else sha256_file(path)


@dataclass(frozen=True)
class AuditKey:
    """Everything a seed's audit depends on; :attr:`digest` names its cache entry."""

    seed: Mapping[str, str | None]    # role (spec, kernel, reference) -> sha256 of the file, None if absent
    cases: tuple[str, ...]            # the evaluation case ids on the device
    cells: tuple[str, ...]            # the workload cells timed on the device
    device: Mapping[str, Any]         # the environment binding of the device, and the host
    versions: Mapping[str, str]
    options: Mapping[str, Any]        # the audit-shaping evaluation options

    @classmethod
    def of(cls, spec: KernelSpec, options: EvalOptions, device: Mapping[str, Any]) -> "AuditKey":
        shaping = {k: v for k, v in dataclasses.asdict(options).items() if k not in _NOT_AUDIT_SHAPING}
        return cls(
            seed={"spec": sha256_file(spec.spec_path), "kernel": sha256_file(spec.source),
                  "reference": sha256_file(spec.reference) if spec.reference else None},
            cases=tuple(c.id for c in evaluation_cases(spec, options.device)),
            cells=tuple(c.name for c in spec.workload_for(options.device)),
            device={**device, "host": platform.node()}, versions=versions(),
            options={**shaping, "graph_phase": options.graph_phase})

    def to_dict(self) -> dict:
        # Through JSON and back: tuples become lists, as in a record read from disk.
        return json.loads(json.dumps(dataclasses.asdict(self), sort_keys=True))

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class AuditFiles:
    """Where a run keeps the audit's files (copied from on store, into on fetch)."""

    reference: Path
    evaluation: Path
    warm_cache: Path | None = None  # cuda only: the audit's Triton cache


class CorruptEntry(Exception):
    """An entry that fails a check (named in the message)."""


class AuditCache:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.audits = self.root / "audits"

    def entry(self, key: AuditKey) -> Path:
        return self.audits / key.digest

    def fetch(self, key: AuditKey, into: AuditFiles) -> Path | None:
        """Copy the entry of ``key`` into ``into`` and return its path; None when there is
        none, or (with a warning) when it fails a check: the caller recomputes."""
        path = self.entry(key)
        try:
            if not path.is_dir():
                log.debug("no cached audit at %s", path)
                return None
            self._copy_out(path, key, into)
        except (CorruptEntry, *_UNREADABLE) as exc:
            log.warning("the cached audit %s is unusable (%s); recomputing the seed's audit", path, exc)
            for target in (into.reference, into.evaluation, into.warm_cache):
                if target is not None and target.is_dir():
                    shutil.rmtree(target)
                elif target is not None:
                    target.unlink(missing_ok=True)
            return None
        return path

    def _copy_out(self, path: Path, key: AuditKey, into: AuditFiles) -> None:
        record = json.loads((path / RECORD).read_text())
        if record.get("schema") != SCHEMA:
            raise CorruptEntry(f"{RECORD}: schema {record.get('schema')!r} is not {SCHEMA}")
        if record.get("key") != key.to_dict() or path.name != key.digest:
            raise CorruptEntry(f"{RECORD}: its key is not this entry's")
        files = record["files"]
        for name, field_name in _ENTRY_FILES.items():
            target = getattr(into, field_name)
            if name not in files or target is None:
                continue
            source = path / name
            if source.is_dir():
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)
            if _digest(target) != files[name]:  # the copy, which is what will be used
                raise CorruptEntry(f"{name}: its digest is not the recorded one")
        for name in ("reference.pt", "evaluation.json"):
            if name not in files:
                raise CorruptEntry(f"{name}: missing")
        reference = Reference.load(into.reference)
        if reference.seed_sha256 != key.seed["kernel"] or [c.id for c in reference.cases] != list(key.cases):
            raise CorruptEntry("reference.pt: not this seed's outputs on this grid")
        audit = json.loads(into.evaluation.read_text())
        if audit.get("kind") != "seed" or audit.get("seed_sha256") != key.seed["kernel"] or not audit.get("timing"):
            raise CorruptEntry("evaluation.json: not a passed audit of this seed")

    def store(self, key: AuditKey, files: AuditFiles) -> Path:
        """Keep a passed audit under ``key``, replacing any entry there; returns the entry.

        Written whole into a temporary directory, then renamed into place: a
        reader finds the old entry, the new one, or (for an instant) none."""
        if not self.root.exists():
            self.root.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.audits.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key.digest}.", dir=self.audits))
        aside = None
        try:
            digests = {}
            for name, field_name in _ENTRY_FILES.items():
                source = getattr(files, field_name)
                if source is None or not source.exists():
                    continue
                if source.is_dir():
                    shutil.copytree(source, tmp / name)
                else:
                    shutil.copyfile(source, tmp / name)
                digests[name] = _digest(tmp / name)
            (tmp / RECORD).write_text(json.dumps(
                {"schema": SCHEMA, "key": key.to_dict(), "files": digests,
                 "stored": datetime.now(timezone.utc).isoformat(timespec="seconds")}, indent=2, sort_keys=True) + "\n")
            final = self.entry(key)
            if final.exists():
                aside = Path(tempfile.mkdtemp(prefix=f".{key.digest}.old.", dir=self.audits))
                try:
                    final.rename(aside / "entry")
                except FileNotFoundError:
                    pass  # another process moved it first
            try:
                tmp.rename(final)
            except OSError:
                # Another process stored this key since: its entry is as good as ours.
                log.debug("%s was stored by another process meanwhile", final)
            return final
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
