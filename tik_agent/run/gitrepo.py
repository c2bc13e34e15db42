"""A run directory's repository, through GitPython.

GitPython reads refs from their files and objects through one long-lived
``git cat-file`` process per repository, so listing the lineage forks no process
per tag or commit.  Every git command it runs here has an environment pinned to
this repository.

Durability: the run sets ``core.fsync``, so what git writes is synced.  Objects
go through ``git hash-object`` (GitPython's store) and tags through ``git tag``:
a tag never names an object a power cut could lose.  ``main`` and ``HEAD`` are
derived (a resume recomputes them), so GitPython writes them itself (unsynced).

Commit objects never change, so what is read from one is cached by its hash.
One lock serialises the GitPython calls: its object reader is one pipe.
"""

from __future__ import annotations

import functools
import io
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError

NAME, EMAIL = "tik-agent", "tik-agent@localhost"
IDENTITY = {"GIT_AUTHOR_NAME": NAME, "GIT_AUTHOR_EMAIL": EMAIL, "GIT_COMMITTER_NAME": NAME, "GIT_COMMITTER_EMAIL": EMAIL}
FILE_MODE, TREE_MODE = 0o100644, 0o040000


@functools.cache
def gitpython():
    """The ``git`` module, imported on first use.

    Importing GitPython runs ``git version`` (and fails without the binary), which
    the commands that never open a run (``seeds``, ``eval``, ``--help``) should not pay.
    """
    if shutil.which("git") is None:
        raise UsageError("git: not found on PATH; a run's lineage is a git repository and needs the git binary")
    import git

    return git


def pinned_env(path: Path) -> dict[str, str]:
    """What every git command on ``path`` runs with.  Inherited from a hook or a wrapper,
    GIT_DIR, GIT_INDEX_FILE and the like would point git at another repository or
    index; here each names this one's own (an empty namespace and ceiling are none)."""
    gitdir = path / ".git"
    return {**IDENTITY, "GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(path), "GIT_COMMON_DIR": str(gitdir),
            "GIT_INDEX_FILE": str(gitdir / "index"), "GIT_OBJECT_DIRECTORY": str(gitdir / "objects"),
            "GIT_NAMESPACE": "", "GIT_CEILING_DIRECTORIES": ""}


@dataclass(frozen=True)
class CommitInfo:
    parents: tuple[str, ...]
    committed_at: int
    message: str


class RunRepo:
    """The repository at ``path/.git``; opened on first use (``path`` may not exist yet)."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        self._repo = None
        self._commits: dict[str, CommitInfo] = {}
        self._lock = threading.RLock()

    # -- opening ---------------------------------------------------------------------------

    def _open(self):
        git = gitpython()
        try:
            repo = git.Repo(self.path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            return None
        gitdir = (self.path / ".git").resolve()
        if Path(repo.git_dir).resolve() != gitdir:
            return None
        # GitPython reads refs and objects where it finds them when it opens a repository,
        # GIT_COMMON_DIR and GIT_OBJECT_DIRECTORY from os.environ included (core.worktree
        # from the config): a run that would be read elsewhere is refused.
        seen = {"GIT_COMMON_DIR": (repo.common_dir, gitdir), "GIT_OBJECT_DIRECTORY": (repo.odb.root_path(),
                gitdir / "objects"), "GIT_WORK_TREE": (repo.working_tree_dir, self.path)}
        for var, (where, expected) in seen.items():
            if where is None or Path(where).resolve() != expected:
                repo.close()
                raise UsageError(f"{self.path}: git finds its {var.split('_', 1)[1].lower().replace('_', ' ')} at "
                                 f"{where}, not in the run directory (is {var} set in the environment?)")
        repo.git.update_environment(**pinned_env(self.path))
        return repo

    @property
    def repo(self):
        """The GitPython ``Repo``; UsageError when ``path/.git`` is not a repository."""
        with self._lock:
            if self._repo is None:
                self._repo = self._open()
                if self._repo is None:
                    raise UsageError(f"{self.path}: not a git repository")
            return self._repo

    def is_repository(self) -> bool:
        """True when ``path/.git`` itself is a repository (not one further up)."""
        with self._lock:
            if self._repo is None:
                self._repo = self._open()
            return self._repo is not None

    def init(self, branch: str) -> None:
        """Create the repository with ``branch`` unborn (or reopen it), ``core.fsync`` on."""
        git = gitpython()
        with self._lock:
            if not (self.path / ".git").is_dir():
                # `git init`: GitPython's Repo.init would run it with the inherited GIT_DIR.
                command = git.Git(str(self.path))
                command.update_environment(**pinned_env(self.path))
                command.init("--quiet", f"--initial-branch={branch}")
            with self.repo.config_writer() as config:
                config.set_value("core", "fsync", "committed,index")

    # -- reading ---------------------------------------------------------------------------

    def rev(self, ref: str) -> str | None:
        """The commit ``ref`` names (git's rules), or None when it names none (or several).

        Through ``git rev-parse``: GitPython's own tries a short hash before a ref of the
        same name, and a lineage tag (``a0001``) is all hex digits.
        """
        git = gitpython()
        try:
            return self.repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}").strip()
        except git.GitCommandError:
            return None

    def ref(self, path: str) -> str | None:
        """The commit a full ref name (``refs/tags/seed``) points to, or None."""
        git = gitpython()
        with self._lock:
            try:
                return git.Reference(self.repo, path).commit.hexsha
            except (ValueError, TypeError):
                return None

    def head(self) -> str | None:
        """The commit HEAD points to, or None while its branch is unborn."""
        with self._lock:
            try:
                return self.repo.head.commit.hexsha
            except ValueError:
                return None

    def tags(self) -> dict[str, str]:
        """Every tag's name and the object it names.

        One ``git for-each-ref`` lists them all; GitPython's ``repo.tags`` resolves each
        tag in Python, about half a millisecond a tag (100 ms at 200 tags) on this machine.
        """
        out = self.repo.git.for_each_ref("--format=%(refname:strip=2) %(objectname)", "refs/tags")
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def branches(self) -> set[str]:
        with self._lock:
            return {h.name for h in self.repo.heads}

    def commit(self, sha: str) -> CommitInfo:
        info = self._commits.get(sha)
        if info is None:
            with self._lock:
                c = self.repo.commit(sha)
                message = c.message if isinstance(c.message, str) else c.message.decode(errors="replace")
                info = CommitInfo(tuple(p.hexsha for p in c.parents), c.committed_date, message)
            self._commits[sha] = info
        return info

    def blob(self, commit: str, path: str) -> bytes | None:
        """The bytes of ``path`` in ``commit``'s tree, or None when it has no such file."""
        git = gitpython()
        with self._lock:
            try:
                item = self.repo.commit(commit).tree / path
            except (KeyError, ValueError, git.BadName, git.BadObject):
                return None
            return item.data_stream.read() if item.type == "blob" else None

    def dirty(self) -> list[str]:
        """Tracked files whose work-tree or index copy differs from HEAD.

        ``git status`` answers both in one command; GitPython's ``is_dirty`` runs two diffs.
        """
        out = self.repo.git.status("--porcelain", "--untracked-files=no")
        return [line[3:] for line in out.splitlines()]

    def unknown_commits(self, heads: list[str], known: list[str]) -> list[str]:
        """Commits reachable from ``heads`` and from none of ``known`` (newest first)."""
        if set(heads) <= set(known):
            return []       # the usual case, answered without a rev-list
        with self._lock:
            return [c.hexsha for c in self.repo.iter_commits([*heads, "--not", *known])]

    def is_ancestor(self, commit: str, of: str) -> bool:
        return self.repo.is_ancestor(commit, of)

    # -- writing ---------------------------------------------------------------------------

    def _store(self, kind: str, data: bytes) -> bytes:
        """Write an object; GitPython (3.2 on) hands it to ``git hash-object -w``, which
        syncs it (core.fsync) before it returns."""
        from gitdb import IStream

        return self.repo.odb.store(IStream(kind, len(data), io.BytesIO(data))).binsha

    def commit_files(self, parent: str | None, files: dict[str, Path], message: str) -> str:
        """A commit of ``parent``'s tree (none: an empty one) with the top-level ``files``
        (name -> source) set, each with its mode as ``git add`` records it.

        The tree is built here rather than by GitPython's IndexFile.write_tree, which
        writes trees in Python (unsynced) instead of through git.
        """
        with self._lock:
            entries = {} if parent is None else {
                item.name: (item.binsha, item.mode) for item in self.repo.commit(parent).tree}
            for name, source in files.items():
                if "/" in name:
                    raise ValueError(f"{name}: lineage files sit at the top of the tree")
                mode = FILE_MODE | (0o111 if source.stat().st_mode & 0o100 else 0)
                entries[name] = (self._store("blob", source.read_bytes()), mode)
            tree = self._store("tree", _tree_bytes(entries))
            return self.commit_tree(tree.hex(), parent, message)

    def commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        """A commit of ``tree`` on ``parent`` (none: a root), by tik-agent."""
        git = gitpython()
        with self._lock:
            parents = [self.repo.commit(parent)] if parent is not None else []
            actor = git.Actor(NAME, EMAIL)
            commit = git.Commit.create_from_tree(self.repo, tree, message, parent_commits=parents, head=False,
                                                 author=actor, committer=actor)
            return commit.hexsha

    def tag(self, name: str, sha: str) -> None:
        """A lightweight tag, written by git (synced; it refuses a tag that exists)."""
        with self._lock:
            self.repo.create_tag(name, ref=sha)

    def branch(self, name: str, sha: str) -> None:
        """A new branch, written by git (synced: it may be all that keeps a person's work)."""
        self.repo.git.branch(name, sha)

    def set_branch(self, branch: str, sha: str) -> None:
        """Point ``branch`` at ``sha`` and check it out: HEAD names it, index and work tree match."""
        git = gitpython()
        with self._lock:
            head = git.Head(self.repo, f"refs/heads/{branch}")
            current = self.ref(head.path)
            if current != sha:  # a reflog entry needs an old value: none for a branch being born
                head.set_commit(sha, logmsg=f"{NAME}: {branch} is {sha[:12]}" if current else None)
            if self.repo.head.is_detached or self.repo.head.reference.path != head.path:
                self.repo.head.set_reference(head)   # never move a branch of the user's
            self.repo.head.reset(head.path, index=True, working_tree=True, quiet=True)

    def snapshot(self, tip: str, index: Path) -> str:
        """The tree of ``tip`` with the work tree's edits to tracked files, through a
        private index.  Plumbing: ``add --update`` stages edits and deletions through the
        work tree's filters into an index of our choosing, which GitPython cannot."""
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.repo.git.read_tree(tip, env=env)
            self.repo.git.add("--update", env=env)
            return self.repo.git.write_tree(env=env).strip()
        finally:
            index.unlink(missing_ok=True)


def _tree_bytes(entries: dict[str, tuple[bytes, int]]) -> bytes:
    """A tree object's content: entries in git's order (a folder sorts as its name plus '/')."""
    from git.objects.fun import tree_to_stream

    ordered = sorted(entries.items(), key=lambda e: e[0].encode() + (b"/" if e[1][1] == TREE_MODE else b""))
    out = io.BytesIO()
    tree_to_stream([(sha, mode, name) for name, (sha, mode) in ordered], out.write)
    return out.getvalue()
