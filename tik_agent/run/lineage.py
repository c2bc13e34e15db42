"""The run's git repository: the seed at the root, one commit per accepted kernel.

Layout (a contract with ``tik-agent export``):

* branch ``main`` is checked out and its HEAD is always the best kernel;
* every commit tracks ``kernel.py`` (that commit's kernel), ``spec.toml`` (and
  ``reference.py`` when the seed has one) and ``evaluation.json`` (the seed's
  audit at the root, the confirming verdict of an accepted variant);
* a variant's git parent is the kernel it was derived from, so exploring from
  an older kernel makes a branch; every accepted commit is tagged with its
  attempt id (the root with ``seed``), so nothing is ever unreachable;
* messages end in git trailers (``Attempt-Id``, ``Parent-Commit``,
  ``Speedup-Vs-Seed``, ... ; the root has ``Kind: seed``);
* run files that are not lineage (``attempts/``, the journal, the summary,
  ``run.json``, ``reference.pt``, reports) are listed in ``.git/info/exclude``.

:func:`open_run` and :class:`Lineage` are the read API; :class:`LineageWriter`
adds the writes the optimisation loop makes.  A commit's objects are written
and synced before its tag, so no half-made commit is ever visible: a commit
exists for the loop once its tag exists.  The repository is read and written
through GitPython (:mod:`tik_agent.run.gitrepo`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.run.gitrepo import RunRepo

log = logging.getLogger(__name__)

BRANCH = "main"
SEED_TAG = "seed"
KERNEL_FILE = "kernel.py"
SPEC_FILE = "spec.toml"
REFERENCE_FILE = "reference.py"
EVALUATION_FILE = "evaluation.json"
EXCLUDED = ("/attempts/", "/journal.jsonl", "/summary.json", "/run.json", "/reference.pt",
            "/reference.tmp", "/report/", "/run.lock", "/.*.tmp", "/triton-cache/", "/.triton-cache.*", "/probes.json")
_ATTEMPT_TAG = re.compile(r"a\d{4,}")
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.*)$")


def format_trailers(trailers: dict[str, object]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in trailers.items())


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Key: value`` lines of a message's last paragraph."""
    last = message.strip().split("\n\n")[-1]
    found = {}
    for line in last.splitlines():
        m = _TRAILER.match(line.strip())
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "none") else None
    except ValueError:
        return None


@dataclass(frozen=True)
class AcceptedKernel:
    commit: str
    parent_commit: str
    attempt_id: str
    speedup_vs_seed: float
    speedup_vs_parent: float | None
    trailers: dict[str, str] = field(default_factory=dict)


class Lineage:
    """Read access to a run's lineage."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()  # git runs in the run directory: no relative paths
        self.repo = RunRepo(self.path)

    @property
    def run_id(self) -> str:
        return self.path.name

    def _tag_commit(self, name: str) -> str | None:
        return self.repo.ref(f"refs/tags/{name}")

    def has_root(self) -> bool:
        return self._tag_commit(SEED_TAG) is not None

    def root_commit(self) -> str:
        commit = self._tag_commit(SEED_TAG)
        if commit is None:
            raise UsageError(f"{self.path}: not a tik-agent run (no seed commit)")
        return commit

    def best_commit(self) -> str:
        commit = self.repo.ref(f"refs/heads/{BRANCH}")
        if commit is None:
            raise UsageError(f"{self.path}: branch {BRANCH} does not exist")
        return commit

    def accepted(self) -> list[AcceptedKernel]:
        out = []
        for name, commit in self.repo.tags().items():
            if not _ATTEMPT_TAG.fullmatch(name):
                continue
            t = self.trailers(commit)
            parent = t.get("Parent-Commit") or self.parents(commit)[0]
            out.append(AcceptedKernel(
                commit=commit, parent_commit=parent, attempt_id=t.get("Attempt-Id", name),
                speedup_vs_seed=_float(t.get("Speedup-Vs-Seed")) or 0.0,
                speedup_vs_parent=_float(t.get("Speedup-Vs-Parent")), trailers=t))
        return sorted(out, key=lambda k: k.attempt_id)

    def commit_of(self, attempt: str) -> str | None:
        return self._tag_commit(attempt) if _ATTEMPT_TAG.fullmatch(attempt) else None

    def speedup_of(self, commit: str) -> float:
        if commit == self.root_commit():
            return 1.0
        return _float(self.trailers(commit).get("Speedup-Vs-Seed")) or 0.0

    def trailers(self, commit: str) -> dict[str, str]:
        return parse_trailers(self.repo.commit(commit).message)

    def parents(self, commit: str) -> list[str]:
        return list(self.repo.commit(commit).parents)

    def committed_at(self, commit: str) -> int:
        """The commit's committer time, seconds since the epoch."""
        return self.repo.commit(commit).committed_at

    def commits(self) -> set[str]:
        return {self.root_commit()} | {k.commit for k in self.accepted()}

    def resolve(self, ref: str) -> str:
        """A commit of the lineage from a tag (``seed``, ``a0007``), ``main`` or a hex prefix."""
        sha = self.repo.rev(ref) if ref and not ref.startswith("-") else None
        if sha is None or sha not in self.commits():
            raise UsageError(f"{ref}: not a commit of the lineage of {self.path}")
        return sha

    def file_at(self, commit: str, path: str) -> str:
        data = self.repo.blob(commit, path)
        if data is None:
            raise UsageError(f"{path}: not in commit {commit[:12]} of {self.path}")
        return data.decode()


def require_directory(path: Path) -> None:
    """UsageError, worded the same for every command, unless ``path`` is a directory."""
    if not path.exists():
        raise UsageError(f"{path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory")


def open_run(path: Path | str) -> Lineage:
    """The lineage of a run directory; UsageError if the directory is not a run."""
    path = Path(path)
    require_directory(path)
    if not (path / "run.json").is_file() or not (path / ".git").is_dir():
        raise UsageError(f"{path}: not a tik-agent run")
    lineage = Lineage(path)
    if not lineage.repo.is_repository():
        raise UsageError(f"{path}: not a tik-agent run")
    if not lineage.has_root():
        raise UsageError(f"{path}: not a tik-agent run (its seed commit was never made)")
    return lineage


class LineageWriter(Lineage):
    """The loop's writes; callers serialise them (one writer thread at a time)."""

    @classmethod
    def init(cls, path: Path) -> "LineageWriter":
        """Create (or reopen, after a crash during creation) the repository.  Call only
        while holding the run lock: a git killed in an earlier session may have left its locks
        (a kill inside ``git init`` leaves ``config.lock``), and they are removed first."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        writer = cls(path)
        if (path / ".git").is_dir():
            writer.clear_stale_locks()
        writer.repo.init(BRANCH)
        exclude = path / ".git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("# tik-agent run files that are not lineage\n" + "\n".join(EXCLUDED) + "\n")
        return writer

    def clear_stale_locks(self) -> None:
        """Remove lock files a killed git left behind (call only while holding the run lock)."""
        gitdir = self.path / ".git"
        for lock in [gitdir / "index.lock", gitdir / "HEAD.lock", gitdir / "packed-refs.lock", gitdir / "config.lock",
                     *gitdir.joinpath("refs").rglob("*.lock")]:
            if lock.exists():
                log.info("removing stale git lock %s", lock)
                lock.unlink()
        for index in gitdir.glob("tik-index-*"):
            index.unlink()

    def commit_root(self, files: list[str], message: str) -> str:
        """Commit the seed's files (already in the working tree) as the root, tag it ``seed``."""
        if self.repo.head() is None:
            sha = self.repo.commit_files(None, {name: self.path / name for name in files}, message)
            self.repo.set_branch(BRANCH, sha)
        sha = self.repo.head()
        if not self.has_root():
            self.repo.tag(SEED_TAG, sha)
        return sha

    def commit_variant(self, attempt: str, parent: str, kernel: Path, evaluation: Path, message: str) -> str:
        """A commit of ``parent``'s tree with a new kernel and evaluation, tagged ``attempt``."""
        existing = self.commit_of(attempt)
        if existing is not None:
            return existing
        sha = self.repo.commit_files(parent, {KERNEL_FILE: Path(kernel), EVALUATION_FILE: Path(evaluation)}, message)
        self.repo.tag(attempt, sha)  # from here on the commit is part of the lineage
        return sha

    def best_by_speedup(self) -> str:
        """The root or the accepted commit with the highest speedup (earliest on ties)."""
        best, best_speedup = self.root_commit(), 1.0
        for k in self.accepted():
            if k.speedup_vs_seed > best_speedup:
                best, best_speedup = k.commit, k.speedup_vs_seed
        return best

    def set_best(self, commit: str) -> None:
        """Point ``main`` at ``commit`` and check it out (tracked files only), after keeping
        whatever a person made in the run directory (:meth:`keep_user_work`)."""
        kept = self.keep_user_work()
        if kept is not None:
            log.warning("%s", kept)
        self.repo.set_branch(BRANCH, commit)

    def keep_user_work(self) -> str | None:
        """Save commits tik-agent did not make and uncommitted edits on a new branch ``kept/<time>``.

        The README sends people to ``RUN/kernel.py``, so editing or committing there is
        natural; ``main`` must still be the best kernel, so their work goes on a branch
        and the returned warning names it.  None when there is nothing of theirs.
        """
        main = self.repo.ref(f"refs/heads/{BRANCH}")
        heads = [sha for sha in (self.repo.head(), main) if sha is not None]
        # The usual case, answered without listing the lineage: both heads are its commits.
        known = heads if all(self._is_lineage(sha) for sha in heads) else sorted(self.commits())
        foreign = self.repo.unknown_commits(heads, known)
        # Untracked files are left where they are (a reset does not touch them); edits to
        # tracked files are what a reset would throw away.
        dirty = self.repo.dirty()
        if not foreign and not dirty:
            return None
        tip = self.repo.head()
        if dirty:
            tree = self.repo.snapshot(tip, self.path / ".git" / f"tik-index-keep-{os.getpid()}")
            tip = self.repo.commit_tree(tree, tip, "uncommitted edits kept by tik-agent")
        branch = self._free_branch(time.strftime("kept/%Y%m%d-%H%M%S"))
        self.repo.branch(branch, tip)
        branches = [branch]
        if main is not None and main not in known and not self.repo.is_ancestor(main, tip):
            # HEAD was elsewhere while main got commits of its own: keep those too.
            branches.append(self._free_branch(f"{branch}-main"))
            self.repo.branch(branches[-1], main)
        what = []
        if foreign:
            what.append(f"{len(foreign)} commit{'s' if len(foreign) > 1 else ''} not made by tik-agent")
        if dirty:
            what.append("uncommitted edits to " + ", ".join(dirty[:3]) + (" ..." if len(dirty) > 3 else ""))
        return (f"{self.path}: kept {' and '.join(what)} on branch {' and '.join(branches)}; main stays "
                f"the best kernel (see: git -C {self.path} log -p {branch})")

    def _is_lineage(self, commit: str) -> bool:
        """Whether ``commit`` is the root or the commit its own attempt's tag names."""
        if commit == self.root_commit():
            return True
        return self.commit_of(self.trailers(commit).get("Attempt-Id", "")) == commit

    def _free_branch(self, name: str) -> str:
        candidate, n = name, 1
        heads = self.repo.branches()
        while candidate in heads:
            n += 1
            candidate = f"{name}-{n}"
        return candidate
