"""A run directory's repository, read and written through the ``git`` binary.

The lineage needs a dozen plumbing commands, and GPU node images carry git but
not GitPython (which shells out to the same binary).  Commit objects never
change, so what is read from one is cached by its hash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError

IDENTITY = {"GIT_AUTHOR_NAME": "tik-agent", "GIT_AUTHOR_EMAIL": "tik-agent@localhost",
            "GIT_COMMITTER_NAME": "tik-agent", "GIT_COMMITTER_EMAIL": "tik-agent@localhost"}
# Inherited from a hook or a wrapper, these would point git at another repository or index.
_FOREIGN = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE",
            "GIT_CEILING_DIRECTORIES", "GIT_COMMON_DIR")


class GitError(RuntimeError):
    """A git command exited non-zero; the message holds its first stderr line."""


@dataclass(frozen=True)
class CommitInfo:
    parents: tuple[str, ...]
    committed_at: int
    message: str


def git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise UsageError("git: not found on PATH; a run's lineage is a git repository and needs the git binary")
    return found


class GitRepo:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._commits: dict[str, CommitInfo] = {}

    def _env(self, extra: dict | None) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
        return {**env, **IDENTITY, **(extra or {})}

    def _call(self, args: tuple[str, ...], env: dict | None) -> subprocess.CompletedProcess:
        return subprocess.run([git_binary(), *args], cwd=self.path, env=self._env(env),
                              capture_output=True, stdin=subprocess.DEVNULL)

    def run(self, *args: str, env: dict | None = None) -> str:
        """Run ``git ARGS`` here; its stdout without the trailing newline, GitError on failure."""
        done = self._call(args, env)
        if done.returncode != 0:
            first = (done.stderr.decode(errors="replace").strip().splitlines() or ["(no message)"])[0]
            raise GitError(f"git {args[0]} in {self.path}: {first}")
        return done.stdout.decode().rstrip("\n")

    def is_repository(self) -> bool:
        """True when ``path/.git`` itself is the repository git finds (not one further up)."""
        done = self._call(("rev-parse", "--absolute-git-dir"), None)
        if done.returncode != 0:
            return False
        return Path(done.stdout.decode().strip()).resolve() == (self.path / ".git").resolve()

    def rev(self, ref: str) -> str | None:
        """The commit ``ref`` names, or None when it names none (or several)."""
        done = self._call(("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"), None)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def tags(self) -> dict[str, str]:
        out = self.run("for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/tags")
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def commit(self, sha: str) -> CommitInfo:
        info = self._commits.get(sha)
        if info is None:
            raw = self.run("cat-file", "commit", sha)
            header, _, message = raw.partition("\n\n")
            parents, when = [], 0
            for line in header.splitlines():
                key, _, value = line.partition(" ")
                if key == "parent":
                    parents.append(value)
                elif key == "committer":
                    when = int(value.rsplit(" ", 2)[-2])
            info = CommitInfo(tuple(parents), when, message)
            self._commits[sha] = info
        return info

    def message(self, sha: str) -> str:
        return self.commit(sha).message

    def parents(self, sha: str) -> list[str]:
        return list(self.commit(sha).parents)

    def committed_at(self, sha: str) -> int:
        return self.commit(sha).committed_at

    def blob(self, commit: str, path: str) -> bytes | None:
        """The bytes of ``path`` in ``commit``'s tree, or None when it has no such file."""
        done = self._call(("cat-file", "blob", f"{commit}:{path}"), None)
        return done.stdout if done.returncode == 0 else None
