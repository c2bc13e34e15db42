"""Kill the run at several points (SIGKILL, Ctrl-C), resume it, and check nothing is lost or counted twice."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from optimize_helpers import FASTER, ScriptedAgent, cli, popen_cli, tiny_seed

from tik_agent.search import setup
from tik_agent.run.journal import CRASH_ENV, Journal, RunSummary, finished_records
from tik_agent.run.lineage import open_run
from tik_agent.search.optimize import Optimizer
from tik_agent.run.runconfig import RunConfig

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


def assert_consistent(path: Path, iterations: int) -> None:
    """Every attempt counted once; every accepted commit journaled exactly once; main is the best."""
    records = finished_records(path)
    finished = [e["record"]["attempt_id"] for e in Journal(path).events() if e["event"] == "finished"]
    assert len(finished) == len(set(finished)) == len(records) == iterations
    assert sorted(finished) == [f"a{i:04d}" for i in range(1, iterations + 1)]
    lin = open_run(path)
    accepted = {k.attempt_id: k.commit for k in lin.accepted()}
    assert accepted == {r.attempt_id: r.commit for r in records if r.outcome.value == "accepted"}
    best = max([1.0] + [k.speedup_vs_seed for k in lin.accepted()])
    assert lin.speedup_of(lin.best_commit()) == best
    summary = RunSummary.load(path)
    assert summary.iterations == iterations and summary.accepted == len(accepted)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True, text=True).stdout
    assert status == ""


def resume(path: Path, iterations: int, **env) -> subprocess.CompletedProcess:
    return cli("optimize", "--resume", str(path), "--iterations", str(iterations), env=env)


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_killed_between_commit_and_journal(run):
    # Killed at the first accepted attempt, whichever it is: the offline agent's first
    # variant can be timed as slower on a loaded machine, and a kill at a rejected one
    # would leave no commit to lose.
    killed = resume(run, 4, **{CRASH_ENV: "before:finished/accepted:1"})
    assert killed.returncode == -signal.SIGKILL, f"no attempt of 4 was accepted: {killed.stdout[-2000:]}"
    tags = open_run(run).accepted()
    assert len(tags) == 1 and len(finished_records(run)) < 4  # committed, not journaled
    assert tags[0].attempt_id not in {r.attempt_id for r in finished_records(run)}
    done = resume(run, 4)
    assert done.returncode == 0, done.stderr
    assert_consistent(run, 4)
    restored = [r for r in finished_records(run) if r.restored]
    assert [r.commit for r in restored] == [k.commit for k in tags]  # the commit made before the kill survives
    assert "stopped (iterations) after 4 of 4 attempts" in " ".join(done.stdout.split())


def test_killed_after_start_then_extended_twice(run):
    killed = resume(run, 2, **{CRASH_ENV: "after:started:1"})
    assert killed.returncode == -signal.SIGKILL
    assert resume(run, 2).returncode == 0
    assert_consistent(run, 2)
    assert resume(run, 3).returncode == 0  # a larger --iterations extends the run
    assert_consistent(run, 3)
    sessions = [e for e in Journal(run).events() if e["event"] == "session"]
    assert len(sessions) == 3


def test_killed_during_an_evaluation(run):
    proc = popen_cli("optimize", "--resume", str(run), "--iterations", "2")
    wait_for(lambda: any((run / "attempts").glob("*/candidate.py")) or proc.poll() is not None)
    time.sleep(0.5)  # inside the evaluation
    proc.kill()
    proc.wait(10)
    interrupted = sorted(p.name for p in (run / "attempts").iterdir())
    done = resume(run, 2)
    assert done.returncode == 0, done.stderr
    assert_consistent(run, 2)
    set_aside = [p.name for p in (run / "attempts").glob("*.interrupted-*")]
    if not finished_records(run)[0].restored:  # the kill landed before any attempt finished
        assert set_aside and all(name.split(".")[0] in interrupted for name in set_aside)
        for name in set_aside:
            assert (run / "attempts" / name / "candidate.py").is_file()  # kept, never deleted


def test_killed_during_creation(tmp_path):
    seed = tiny_seed(tmp_path)
    target = tmp_path / "new-run"
    # An empty audit cache of its own: the kill lands in the seed's audit, not in a copy of one.
    empty_cache = {"TIK_AGENT_CACHE": str(tmp_path / "audit-cache")}
    proc = popen_cli("optimize", str(seed), "--agent", "offline", "--iterations", "1", "--rounds", "5",
                     "--run-dir", str(target), env=empty_cache)
    wait_for(lambda: (target / "run.json").is_file() or proc.poll() is not None)
    proc.kill()
    proc.wait(10)
    assert not (target / "evaluation.json").exists()  # the audit was not finished
    again = cli("optimize", str(seed), "--run-dir", str(target), env=empty_cache)
    assert again.returncode == 2 and "--resume" in again.stderr
    done = resume(target, 1, **empty_cache)
    assert done.returncode == 0, done.stderr
    assert_consistent(target, 1)
    assert open_run(target).trailers(open_run(target).root_commit())["Kind"] == "seed"


def test_ctrl_c_stops_within_seconds_and_resumes(run):
    proc = popen_cli("optimize", "--resume", str(run), "--iterations", "3")
    wait_for(lambda: any((run / "attempts").glob("*/candidate.py")) or proc.poll() is not None)
    time.sleep(0.5)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - start < 12
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    assert "stopped (interrupted)" in " ".join(out.split())
    assert f"continue the run with: tik-agent optimize --resume {run}" in out   # the command that resumes it
    done = resume(run, 3)
    assert done.returncode == 0, done.stderr
    assert_consistent(run, 3)


def test_resume_repairs_main_locks_and_journal(run):
    """The states a kill inside a commit can leave: tag made, main not moved, journal line missing, git lock."""
    config = RunConfig.load(run).extended(limits={"iterations": 1}, workers=None)
    session = setup.reopen(run, config)
    try:
        Optimizer(session, ScriptedAgent([FASTER])).run()
    finally:
        session.close()
    lin = open_run(run)
    [kernel] = lin.accepted()
    subprocess.run(["git", "update-ref", "refs/heads/main", lin.root_commit()], cwd=run, check=True)
    (run / ".git" / "index.lock").write_text("")
    journal = run / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(line for line in lines if '"finished"' not in line) + '{"event": "stop')

    session = setup.reopen(run, config)
    try:
        assert session.run.redo == []
        assert open_run(run).best_commit() == kernel.commit
        assert "ROWS_PER_PROGRAM = 16" in (run / "kernel.py").read_text()
        [record] = session.run.state.finished.values()
        assert record.restored and record.commit == kernel.commit and record.speedup == kernel.speedup_vs_seed
    finally:
        session.close()
    session = setup.reopen(run, config)  # a second resume restores nothing twice
    try:
        assert len(session.run.state.finished) == 1
        assert sum(1 for e in Journal(run).events() if e["event"] == "finished") == 1
    finally:
        session.close()


def test_a_run_in_use_is_refused(run):
    config = RunConfig.load(run)
    session = setup.reopen(run, config)
    try:
        busy = resume(run, 1)
        assert busy.returncode == 2 and "in use" in busy.stderr
    finally:
        session.close()


def _git(run: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=me", "-c", "user.email=me@here", *args], cwd=run, check=True,
                          capture_output=True, text=True).stdout.strip()


def _kept_branches(run: Path) -> list[str]:
    return [b for b in _git(run, "branch", "--format=%(refname:short)").split() if b.startswith("kept/")]


def test_resume_keeps_a_foreign_commit_and_an_uncommitted_edit(run, caplog):
    """The README sends people to RUN/kernel.py: what they commit or edit there survives a resume."""
    seed_text = (run / "kernel.py").read_text()
    (run / "kernel.py").write_text(seed_text + "# my commit\n")
    _git(run, "commit", "-q", "-am", "my own change")
    mine = _git(run, "rev-parse", "HEAD")
    (run / "kernel.py").write_text(seed_text + "# my commit\n# my uncommitted edit\n")
    (run / "notes.txt").write_text("untracked notes\n")

    with caplog.at_level("WARNING", logger="tik_agent"):
        setup.reopen(run, RunConfig.load(run)).close()

    [branch] = _kept_branches(run)
    assert any(branch in r.getMessage() and "1 commit not made by tik-agent" in r.getMessage()
               and "uncommitted edits to kernel.py" in r.getMessage() for r in caplog.records)
    assert _git(run, "show", f"{branch}:kernel.py") == (seed_text + "# my commit\n# my uncommitted edit").strip()
    assert _git(run, "rev-parse", f"{branch}~1") == mine            # the user's commit, unchanged
    lin = open_run(run)
    assert lin.best_commit() == lin.root_commit()                   # main is still the best kernel
    assert (run / "kernel.py").read_text() == seed_text
    assert (run / "notes.txt").read_text() == "untracked notes\n"   # untracked files are not touched
    assert _git(run, "status", "--porcelain", "--untracked-files=no") == ""


def test_resume_of_an_untouched_run_keeps_nothing(run, caplog):
    with caplog.at_level("WARNING", logger="tik_agent"):
        setup.reopen(run, RunConfig.load(run)).close()
    assert _kept_branches(run) == [] and not [r for r in caplog.records if "kept" in r.getMessage()]


def test_resume_from_another_branch_leaves_that_branch_alone(run):
    _git(run, "checkout", "-q", "-b", "mine")
    (run / "kernel.py").write_text((run / "kernel.py").read_text() + "# on my branch\n")
    _git(run, "commit", "-q", "-am", "on my branch")
    tip = _git(run, "rev-parse", "mine")
    setup.reopen(run, RunConfig.load(run)).close()
    assert _git(run, "rev-parse", "mine") == tip
    assert _git(run, "symbolic-ref", "--short", "HEAD") == "main"
