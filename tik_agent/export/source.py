"""What an export takes from a run: one accepted kernel, the seed, and their records.
(A seed's own export builds the same record from the seed's audit: :mod:`.seedsource`.)

Reads the run's lineage (:mod:`tik_agent.run.lineage`) and checks that its records
agree with its files before anything is certified: the kernel and seed
hashes in the verdict must be those of the committed files.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.run.lineage import EVALUATION_FILE, KERNEL_FILE, SPEC_FILE, Lineage, open_run
from tik_agent.spec.schema import KernelSpec, load_spec


@dataclass(frozen=True)
class ExportSource:
    run_id: str | None      # None (and so commit and root_commit) when the seed itself is exported
    commit: str | None
    root_commit: str | None
    attempt_id: str | None
    parent_commit: str | None
    spec: KernelSpec
    spec_source: bytes
    seed_source: bytes
    kernel_source: bytes
    evaluation: dict        # the accepted commit's verdict (Verdict.to_dict() plus kind, attempt_id, parent_commit)
    trailers: dict          # the accepted commit's git trailers
    ancestry: tuple         # accepted commits from this one back to the seed: commit, attempt, speedups
    # The export's timestamps (epoch seconds): the commit's committer time; for a seed, when its audit was stored.
    committed_at: int | None = None
    provenance: str = "run"          # "run": an accepted kernel of a run; "seed": the seed, by its own audit
    audit_key: str | None = None     # a seed's export: the seed-audit cache key of the audit that certifies it
    seed_digest: str | None = None   # a seed's export: sha256 of its spec and kernel (its default version label)

    def __post_init__(self):
        needed = {"run": ("run_id", "commit", "root_commit"), "seed": ("audit_key", "seed_digest")}
        if self.provenance not in needed:
            raise ValueError(f"ExportSource.provenance: {self.provenance!r} is neither 'run' nor 'seed'")
        missing = [f for f in needed[self.provenance] if not getattr(self, f)]
        if missing:
            raise ValueError(f"ExportSource.{missing[0]}: needed for provenance {self.provenance!r}")

    @property
    def version_label(self) -> str:
        """The default version's local label: ``g<commit>`` of a run, ``seed<digest>`` of a seed
        (a letter first: a label of digits only would lose its leading zeros)."""
        return f"seed{self.seed_digest[:10]}" if self.provenance == "seed" else f"g{self.commit[:10]}"

    @property
    def seed_sha256(self) -> str:
        return sha256(self.seed_source)

    @property
    def kernel_sha256(self) -> str:
        return sha256(self.kernel_source)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_source(run_dir: Path | str, commit: str | None, workdir: Path) -> ExportSource:
    """The run's best kernel (or ``commit``), validated; ``workdir`` receives the seed's files."""
    lineage = open_run(run_dir)
    root = lineage.root_commit()
    if commit is not None and lineage.commit_of(commit) is None:
        _refuse_unaccepted_attempt(Path(run_dir), commit)
    chosen = lineage.resolve(commit) if commit is not None else lineage.best_commit()
    if chosen == root:
        if commit is None:
            raise UsageError(f"{run_dir}: the run has accepted no kernel (its best commit is the seed): nothing to export")
        raise UsageError(f"--commit {commit}: {chosen[:12]} is the seed itself, not an accepted kernel")
    accepted = {k.commit: k for k in lineage.accepted()}
    if chosen not in accepted:
        raise UsageError(f"--commit {commit or 'main'}: {chosen[:12]} is not an accepted kernel of {run_dir}")
    kernel = accepted[chosen]
    evaluation = _evaluation(lineage, chosen)
    source = ExportSource(
        run_id=lineage.run_id, commit=chosen, root_commit=root,
        attempt_id=evaluation.get("attempt_id") or kernel.attempt_id,
        parent_commit=evaluation.get("parent_commit") or kernel.parent_commit,
        spec=_seed_spec(lineage, root, workdir),
        spec_source=lineage.file_at(root, SPEC_FILE).encode(),
        seed_source=lineage.file_at(root, KERNEL_FILE).encode(),
        kernel_source=lineage.file_at(chosen, KERNEL_FILE).encode(),
        evaluation=evaluation, trailers=dict(kernel.trailers), ancestry=_ancestry(chosen, root, accepted),
        committed_at=lineage.committed_at(chosen),
    )
    _check_hashes(source)
    return source


def _refuse_unaccepted_attempt(run_dir: Path, ref: str) -> None:
    """``--commit a0003`` for an attempt that was never committed: say what became of it."""
    from tik_agent.run.journal import finished_records

    if not re.fullmatch(r"a\d{4,}", ref):
        return
    record = next((r for r in finished_records(run_dir) if r.attempt_id == ref), None)
    if record is None:
        if (run_dir / "attempts" / ref).is_dir():
            raise UsageError(f"--commit {ref}: attempt {ref} never finished, so it has no commit")
        return
    if record.commit is None:
        raise UsageError(f"--commit {ref}: attempt {ref} was rejected: {record.outcome.value}"
                         + (f" ({record.reason.splitlines()[0]})" if record.reason else "")
                         + "; only accepted kernels have a commit to export (see: tik-agent lineage RUN)")


def _evaluation(lineage: Lineage, commit: str) -> dict:
    where = f"{EVALUATION_FILE} of {commit[:12]}"
    try:
        evaluation = json.loads(lineage.file_at(commit, EVALUATION_FILE))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON: {exc}") from None
    if evaluation.get("kind") != "variant":
        raise UsageError(f"{where}: kind is {evaluation.get('kind')!r}, expected 'variant'")
    if evaluation.get("outcome") != "passed":
        raise UsageError(f"{where}: outcome is {evaluation.get('outcome')!r}; only a passed kernel is exported")
    cases = evaluation.get("cases") or []
    if not cases:
        raise UsageError(f"{where}: records no parity cases; there is nothing to certify")
    failed = [c.get("case") for c in cases if not c.get("passed")]
    if failed:
        raise UsageError(f"{where}: records failed parity cases, e.g. {failed[0]}")
    return evaluation


def _seed_spec(lineage: Lineage, root: str, workdir: Path) -> KernelSpec:
    """The seed's spec, loaded from its files written to ``workdir``."""
    spec_text = lineage.file_at(root, SPEC_FILE)
    seed_dir = workdir / "seed"
    seed_dir.mkdir(parents=True)
    kernel_table = tomllib.loads(spec_text).get("kernel", {})
    files = {SPEC_FILE, kernel_table.get("source", KERNEL_FILE)}
    if kernel_table.get("reference"):
        files.add(kernel_table["reference"])
    for name in files:
        (seed_dir / name).write_bytes(lineage.file_at(root, name).encode())
    return load_spec(seed_dir)


def _ancestry(commit: str, root: str, accepted: dict) -> tuple:
    chain = []
    seen = set()
    while commit in accepted and commit not in seen:
        seen.add(commit)
        k = accepted[commit]
        chain.append({"commit": k.commit, "attempt_id": k.attempt_id, "speedup_vs_seed": k.speedup_vs_seed,
                      "speedup_vs_parent": k.speedup_vs_parent})
        commit = k.parent_commit
    chain.append({"commit": root, "attempt_id": None, "speedup_vs_seed": 1.0, "speedup_vs_parent": None})
    return tuple(chain)


def _check_hashes(source: ExportSource) -> None:
    """The verdict must be about these very files, or the certificate would certify something else."""
    ev = source.evaluation
    for field, actual, what in (("candidate_sha256", source.kernel_sha256, KERNEL_FILE),
                                ("seed_sha256", source.seed_sha256, f"the seed's {KERNEL_FILE}")):
        recorded = ev.get(field)
        if recorded and recorded != actual:
            raise UsageError(f"{EVALUATION_FILE} of {source.commit[:12]}: {field} {recorded[:16]}... is not the "
                             f"sha256 of {what} ({actual[:16]}...): the run's records disagree with its files")
