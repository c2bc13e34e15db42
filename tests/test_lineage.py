"""The run's git lineage on disk: root, variants, branches, best, trailers, the read API."""

from __future__ import annotations

import json
import subprocess

import pytest

from tik_agent.errors import UsageError
from tik_agent.run.lineage import (BRANCH, LineageWriter, format_trailers, open_run, parse_trailers)


def git(path, *args):
    return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, check=True).stdout.strip()


def write(path, name, text):
    (path / name).write_text(text)
    return path / name


@pytest.fixture
def lineage(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run, "run.json", "{}")
    lin = LineageWriter.init(run)
    write(run, "kernel.py", "ROWS = 1\n")
    write(run, "spec.toml", "[kernel]\n")
    write(run, "evaluation.json", json.dumps({"schema": 1, "kind": "seed", "speedup": 1.0}))
    lin.commit_root(["kernel.py", "spec.toml", "evaluation.json"],
                    "seed: k\n\nThe seed.\n\n" + format_trailers({"Kind": "seed", "Seed": "k"}) + "\n")
    return lin


def variant(lin, attempt, parent, rows, speedup, vs_parent=1.5, rationale="faster"):
    d = lin.path / "attempts" / attempt
    d.mkdir(parents=True)
    kernel = write(d, "candidate.py", f"ROWS = {rows}\n")
    evaluation = write(d, "evaluation.json", json.dumps({"kind": "variant", "attempt_id": attempt, "speedup": speedup}))
    trailers = {"Attempt-Id": attempt, "Parent-Commit": parent, "Speedup-Vs-Seed": f"{speedup:.3f}",
                "Speedup-Vs-Parent": f"{vs_parent:.3f}", "Parity-Cases": "5/5", "Device": "cpu", "Agent": "offline",
                "Model": "none", "Tokens-Input": 0, "Tokens-Output": 0}
    return lin.commit_variant(attempt, parent, kernel, evaluation,
                              f"{attempt}: k\n\n{rationale}\n\n{format_trailers(trailers)}\n")


def test_root_commit_holds_the_seed_and_is_tagged(lineage):
    root = lineage.root_commit()
    assert lineage.best_commit() == root
    assert git(lineage.path, "rev-parse", "--abbrev-ref", "HEAD") == BRANCH
    assert lineage.trailers(root)["Kind"] == "seed"
    assert set(git(lineage.path, "ls-tree", "--name-only", root).split()) == {"kernel.py", "spec.toml", "evaluation.json"}
    assert lineage.file_at(root, "kernel.py") == "ROWS = 1\n"


def test_run_files_are_excluded_from_the_lineage(lineage):
    for name in ("journal.jsonl", "summary.json", "reference.pt", "run.lock", ".summary.json.1.tmp"):
        write(lineage.path, name, "x")
    (lineage.path / "attempts" / "a0001").mkdir(parents=True)
    write(lineage.path / "attempts" / "a0001", "candidate.py", "x")
    (lineage.path / "report").mkdir()
    write(lineage.path / "report", "report.png", "x")
    assert git(lineage.path, "status", "--porcelain") == ""


def test_variants_branch_from_their_parent_and_main_follows_the_best(lineage):
    root = lineage.root_commit()
    a1 = variant(lineage, "a0001", root, 4, 3.0)
    a2 = variant(lineage, "a0002", root, 2, 1.8)          # explored from the seed: a branch
    a3 = variant(lineage, "a0003", a2, 8, 3.5, vs_parent=1.9)
    assert lineage.parents(a1) == [root]
    assert lineage.parents(a3) == [a2]
    assert lineage.best_by_speedup() == a3
    lineage.set_best(a1)
    assert lineage.best_commit() == a1 and (lineage.path / "kernel.py").read_text() == "ROWS = 4\n"
    lineage.set_best(lineage.best_by_speedup())
    assert lineage.best_commit() == a3 and (lineage.path / "kernel.py").read_text() == "ROWS = 8\n"
    # nothing evicted: every accepted kernel and its ancestors stay reachable
    assert [k.attempt_id for k in lineage.accepted()] == ["a0001", "a0002", "a0003"]
    assert len(git(lineage.path, "rev-list", "--all").split()) == 4
    k3 = lineage.accepted()[2]
    assert (k3.commit, k3.parent_commit, k3.speedup_vs_seed, k3.speedup_vs_parent) == (a3, a2, 3.5, 1.9)
    assert k3.trailers["Parity-Cases"] == "5/5"
    assert json.loads(lineage.file_at(a3, "evaluation.json"))["attempt_id"] == "a0003"
    assert lineage.file_at(a3, "spec.toml") == "[kernel]\n"  # the parent's other files are kept


def test_commit_variant_is_idempotent(lineage):
    root = lineage.root_commit()
    first = variant(lineage, "a0001", root, 4, 3.0)
    again = lineage.commit_variant("a0001", root, lineage.path / "spec.toml", lineage.path / "spec.toml", "x")
    assert again == first


def test_resolve_accepts_lineage_refs_only(lineage):
    root = lineage.root_commit()
    a1 = variant(lineage, "a0001", root, 4, 3.0)
    lineage.set_best(a1)
    assert lineage.resolve("seed") == root
    assert lineage.resolve("a0001") == a1 == lineage.resolve("main") == lineage.resolve(a1[:10])
    stray = git(lineage.path, "commit-tree", git(lineage.path, "write-tree"), "-p", root, "-m", "stray")
    for ref in ("nope", "a0009", stray, "0" * 40):
        with pytest.raises(UsageError, match="not a commit of the lineage"):
            lineage.resolve(ref)
    with pytest.raises(UsageError, match="missing.py"):
        lineage.file_at(root, "missing.py")


def test_open_run_reads_what_the_writer_wrote(lineage):
    a1 = variant(lineage, "a0001", lineage.root_commit(), 4, 3.0)
    lineage.set_best(a1)
    lin = open_run(lineage.path)
    assert lin.run_id == "run" and lin.best_commit() == a1 and lin.root_commit() == lineage.root_commit()
    assert [k.commit for k in lin.accepted()] == [a1]


def test_open_run_refuses_what_is_not_a_run(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q")
    no_git = tmp_path / "nogit"
    no_git.mkdir()
    write(no_git, "run.json", "{}")
    unborn = tmp_path / "unborn"
    unborn.mkdir()
    write(unborn, "run.json", "{}")
    LineageWriter.init(unborn)
    for path in (empty, plain, no_git, unborn):
        with pytest.raises(UsageError, match="not a tik-agent run"):
            open_run(path)
    with pytest.raises(UsageError, match="absent: no such directory"):
        open_run(tmp_path / "absent")


def test_stale_git_locks_from_a_killed_process_are_cleared(lineage):
    a1 = variant(lineage, "a0001", lineage.root_commit(), 4, 3.0)
    (lineage.path / ".git" / "index.lock").write_text("")
    (lineage.path / ".git" / "refs" / "heads" / "main.lock").write_text("")
    with pytest.raises(Exception):
        lineage.set_best(a1)
    lineage.clear_stale_locks()
    lineage.set_best(a1)
    assert lineage.best_commit() == a1


def test_a_config_lock_left_by_a_kill_inside_git_init_is_cleared_on_reopen(tmp_path):
    """A run killed while ``git init`` wrote its config left ``.git/config.lock``; the resume
    (which reopens the repository under the run lock) failed on it (seen in test_resume's
    kill during creation)."""
    from tik_agent.run.lineage import LineageWriter

    LineageWriter.init(tmp_path / "run")
    lock = tmp_path / "run" / ".git" / "config.lock"
    lock.write_text("")
    writer = LineageWriter.init(tmp_path / "run")
    assert not lock.exists() and writer.repo.head() is None


def test_trailers_are_the_last_paragraph_only():
    message = "a0001: k\n\nIdea: not a trailer\nWhy: neither\n\nAttempt-Id: a0001\nSpeedup-Vs-Seed: 2.000\n"
    assert parse_trailers(message) == {"Attempt-Id": "a0001", "Speedup-Vs-Seed": "2.000"}
    assert parse_trailers(format_trailers({"Kind": "seed", "Tokens-Input": 3})) == {"Kind": "seed", "Tokens-Input": "3"}
