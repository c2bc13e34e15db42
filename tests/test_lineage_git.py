"""The lineage's repository through GitPython: objects git itself would write, an inherited
git environment, and the git processes a promotion costs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tik_agent.errors import UsageError
from tik_agent.run.lineage import LineageWriter, format_trailers, open_run

CLEAN = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git(path: Path, *args: str, env: dict | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=path, env=CLEAN if env is None else env, input=stdin,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def make_run(path: Path) -> LineageWriter:
    path.mkdir(exist_ok=True)
    (path / "run.json").write_text("{}")
    lin = LineageWriter.init(path)
    for name, text in (("spec.toml", "[kernel]\n"), ("kernel.py", "ROWS = 1\n"), ("evaluation.json", "{}"),
                       ("reference.py", "def reference(x):\n    return x\n")):
        if not (path / name).exists():
            (path / name).write_text(text)
    lin.commit_root(["spec.toml", "kernel.py", "evaluation.json", "reference.py"],
                    "seed: k\n\nThe seed.\n\n" + format_trailers({"Kind": "seed"}) + "\n")
    return lin


def variant(lin: LineageWriter, n: int, parent: str) -> str:
    d = lin.path / "attempts" / f"a{n:04d}"
    d.mkdir(parents=True)
    (d / "candidate.py").write_text(f"ROWS = {n}\n")
    (d / "evaluation.json").write_text(json.dumps({"attempt_id": f"a{n:04d}"}))
    trailers = {"Attempt-Id": f"a{n:04d}", "Parent-Commit": parent, "Speedup-Vs-Seed": f"{1 + n / 100:.3f}"}
    return lin.commit_variant(f"a{n:04d}", parent, d / "candidate.py", d / "evaluation.json",
                              f"a{n:04d}: k\n\nfaster\n\n{format_trailers(trailers)}\n")


def test_objects_are_what_git_itself_writes(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "reference.py").write_text("x = 1\n")
    (run / "reference.py").chmod(0o755)          # git add records an executable file as such
    lin = make_run(run)
    a1 = variant(lin, 1, lin.root_commit())
    lin.set_best(a1)
    modes = dict(line.split("\t")[::-1] for line in git(run, "ls-tree", a1).splitlines())
    assert {name: mode.split()[0] for name, mode in modes.items()} == {
        "evaluation.json": "100644", "kernel.py": "100644", "reference.py": "100755", "spec.toml": "100644"}
    for commit in (lin.root_commit(), a1):   # git's own tree of the same entries is the same object
        assert git(run, "mktree", stdin=git(run, "ls-tree", commit) + "\n") == git(run, "rev-parse", f"{commit}^{{tree}}")
    assert git(run, "fsck", "--strict", "--no-dangling") == ""
    assert git(run, "status", "--porcelain") == ""
    # Negative control: fsck --strict does see a tree whose entries are out of git's order.
    bad = tmp_path / "bad"
    bad.mkdir()
    git(bad, "init", "-q")
    blob = git(bad, "hash-object", "-w", "--stdin", stdin="x")
    entries = b"".join(b"100644 " + name + b"\0" + bytes.fromhex(blob) for name in (b"b", b"a"))
    done = subprocess.run(["git", "hash-object", "-w", "-t", "tree", "--literally", "--stdin"], cwd=bad, env=CLEAN,
                          input=entries, capture_output=True)
    assert done.returncode == 0
    assert subprocess.run(["git", "fsck", "--strict"], cwd=bad, env=CLEAN, capture_output=True).returncode != 0


def test_a_hooks_git_environment_does_not_redirect_the_lineage(tmp_path, monkeypatch):
    """Run from a git hook or a wrapper, tik-agent inherits GIT_DIR, GIT_INDEX_FILE and the
    like; the run's repository must still be the one written and read."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    hook = {"GIT_DIR": str(other / ".git"), "GIT_INDEX_FILE": str(other / ".git" / "index"), "GIT_NAMESPACE": "hook",
            "GIT_WORK_TREE": str(other), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    for key, value in hook.items():
        monkeypatch.setenv(key, value)
    lin = make_run(tmp_path / "run")
    a1 = variant(lin, 1, lin.root_commit())
    lin.set_best(a1)
    # Negative control: plain git given this environment in the run directory works on the other repository.
    assert git(lin.path, "rev-parse", "--absolute-git-dir", env=dict(os.environ)) == str(other / ".git")
    assert git(other, "for-each-ref") == "" and not (other / ".git" / "index").exists()
    assert sorted(p.name for p in other.iterdir()) == [".git"]     # nothing checked out there
    assert git(lin.path, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main", "refs/tags/a0001",
                                                                         "refs/tags/seed"]
    assert git(lin.path, "status", "--porcelain") == "" and (lin.path / "kernel.py").read_text() == "ROWS = 1\n"
    assert [k.commit for k in open_run(lin.path).accepted()] == [a1]


@pytest.mark.parametrize("variable, where", [("GIT_COMMON_DIR", ".git"), ("GIT_OBJECT_DIRECTORY", ".git/objects")])
def test_a_variable_that_moves_what_gitpython_reads_is_refused(tmp_path, monkeypatch, variable, where):
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    run = make_run(tmp_path / "run").path
    assert open_run(run).accepted() == []                 # negative control: the same run opens without it
    monkeypatch.setenv(variable, str(other / where))
    with pytest.raises(UsageError) as caught:
        open_run(run)
    message = str(caught.value)
    assert variable in message and str(run) in message and "\n" not in message


def test_a_promotion_costs_the_same_few_git_processes_however_many_tags(tmp_path, monkeypatch):
    """Each git process is a fork (tens of ms on a busy machine); the lineage must not start
    one per accepted tag, neither to promote nor to be read."""
    log, bin_dir = tmp_path / "git.log", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$1" >> "{log}"\nexec {shutil.which("git")} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    lin = make_run(tmp_path / "run")
    tip = variant(lin, 1, lin.root_commit())

    def promote(n: int) -> list[str]:
        nonlocal tip
        log.write_text("")
        tip = variant(lin, n, tip)
        lin.set_best(tip)
        return log.read_text().split()

    def cold_read() -> list[str]:
        log.write_text("")
        assert len(open_run(lin.path).accepted()) == len(lin.accepted())
        return sorted(log.read_text().split())

    few, read_few = promote(2), cold_read()
    for n in range(3, 33):
        tip = variant(lin, n, tip)
    many, read_many = promote(33), cold_read()
    assert "tag" in few and "reset" in few            # negative control: the wrapper sees git's commands
    assert many == few and len(few) <= 8, few
    assert read_many == read_few and len(read_few) <= 4, read_few
