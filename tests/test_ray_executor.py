"""Evaluations on a Ray cluster (a local one this module starts, 2 CPU slots): the same verdicts as
a local slot, nodes checked, an actor killed mid-evaluation, Ctrl-C, a killed driver resumed."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from optimize_helpers import FASTER, SAME, WRONG_BITS, ScriptedAgent, cli, popen_cli, template_run

from tik_agent.cli.app import run as cli_in_process
from tik_agent.errors import UsageError
from tik_agent.outcomes import Outcome
from tik_agent.search import setup
from tik_agent.run.journal import Journal, RunSummary, finished_records
from tik_agent.run.lineage import open_run
from tik_agent.run.runconfig import RunConfig
from tik_agent.search.executor import LocalExecutor
from tik_agent.search.optimize import Optimizer
from tik_agent.search.ray_node import SeedBundle, unpack

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# The [ray] extra is part of `make test`'s install: on CI a missing Ray fails, elsewhere it skips.
if os.environ.get("CI") != "true":
    pytest.importorskip("ray")
import ray  # noqa: E402

from tik_agent.search.ray_executor import RayExecutor, node_mismatch, run_environment  # noqa: E402

ENDLESS = ("    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)",
           "    while M > 0:\n        M = M + 1\n    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)")


@pytest.fixture(scope="module")
def template():
    """The tiny seed's run (as optimize_helpers makes it) with 3 timing rounds: quicker evaluations."""
    return template_run("template-ray", rounds=3)


@pytest.fixture(scope="module")
def cluster():
    """One small local Ray cluster for the module: 2 CPUs, no dashboard, a small object store."""
    if ray.is_initialized():
        ray.shutdown()
    ctx = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024**2, log_to_driver=False,
                   configure_logging=False)
    yield ctx.address_info["address"]
    ray.shutdown()


def open_session(path: Path, workers: int = 1, **limits):
    config = RunConfig.load(path).extended(limits=limits, workers=workers)
    return setup.reopen(path, config)


def write_candidate(session, tmp_path: Path, name: str, edit) -> Path:
    old, new = edit
    source = session.run.spec.source.read_text()
    assert not old or old in source
    d = tmp_path / name
    d.mkdir()
    (d / "candidate.py").write_text(source.replace(old, new, 1) if old else source)
    return d / "candidate.py"


def wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def finished_ids(path: Path) -> list[str]:
    return [e["record"]["attempt_id"] for e in Journal(path).events() if e["event"] == "finished"]


# ---------------------------------------------------------------------------- without a cluster


def test_without_ray_the_ray_executor_is_a_one_line_usage_error(monkeypatch, tmp_path, capsys):
    import logging

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    logger = logging.getLogger("tik_agent")  # the CLI installs its handler on pytest's captured stderr
    for attr in ("handlers", "propagate", "level"):
        monkeypatch.setattr(logger, attr, getattr(logger, attr))
    target = tmp_path / "r"
    code = cli_in_process(["optimize", "rmsnorm", "--agent", "offline", "--executor", "ray", "--run-dir", str(target)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install 'tik-agent[ray]'" in err, err
    assert not target.exists()
    assert cli_in_process(["optimize", "rmsnorm", "--ray-address", "x:1", "--run-dir", str(target)]) == 2
    assert "only with --executor ray" in capsys.readouterr().err


def test_a_node_that_differs_is_named_by_its_field(tmp_path):
    run_env = {"device": "cpu", "torch": "2.13.0", "triton": "3.9.0", "python": "3.11.9", "tik_agent": "0.1"}
    assert node_mismatch(run_env, dict(run_env)) is None
    assert node_mismatch(run_env, {**run_env, "triton": "3.6.0"}) == "triton='3.6.0' (the run's is '3.9.0')"
    assert node_mismatch(run_env, {k: v for k, v in run_env.items() if k != "python"}).startswith("python=None")
    assert set(run_environment({"torch": "x", "driver": None})) == {"python", "tik_agent", "torch", "driver"}


def test_the_seed_is_unpacked_once_per_node(run, tmp_path):
    session = setup.reopen(run, RunConfig.load(run))
    try:
        bundle = SeedBundle.pack(session.run.spec, session.reference, "cpu")
    finally:
        session.close()
    first, unpacked = unpack(bundle, tmp_path)
    again, unpacked_again = unpack(bundle, tmp_path)
    assert unpacked and not unpacked_again and first == again
    assert (first / "seed" / "kernel.py").read_bytes() == (run / ".git" / "tik-seed" / "kernel.py").read_bytes()
    assert bundle.digest == SeedBundle("cpu", dict(bundle.files), bundle.reference, None).digest
    assert bundle.digest != SeedBundle("cuda", dict(bundle.files), bundle.reference, None).digest


# ---------------------------------------------------------------------------- on the cluster


def test_ray_verdicts_are_the_local_ones(cluster, run, tmp_path):
    """The same candidates through a local slot and a Ray slot: the same outcome and reason, the same
    fixed cases passed; a timeout is killed inside the actor and leaves no sandbox behind.  Untimed:
    a timed verdict of the seed's copy (passed, or a cell 1.05x slower) is a measurement and differs
    between two local runs too; timed verdicts through Ray are the other tests' accepted variants."""
    import dataclasses

    session = open_session(run)
    ex = RayExecutor.for_session(session, 1)
    try:
        local, remote = LocalExecutor("cpu", 1).acquire(), ex.acquire()
        assert remote.node == ray.util.get_node_ip_address() and ex.unpacked_on == [remote.node]
        parent, options = session.run.spec.source, dataclasses.replace(session.options, timing=False)
        fixed = {c.id for c in session.reference.cases}
        for name, edit, want in (("same", SAME, Outcome.PASSED), ("wrong", WRONG_BITS, Outcome.PARITY_FAILED)):
            candidate = write_candidate(session, tmp_path, name, edit)
            with ThreadPoolExecutor(1) as pool:  # both at once: the test's time, not the verdicts, is shared
                here = pool.submit(local.evaluate, session.run.spec, candidate, options, session.reference, parent)
                there = remote.evaluate(session.run.spec, candidate, options, session.reference, parent)
                here = here.result()
            assert here.outcome is there.outcome is want, (here.reason, there.reason)
            assert here.reason == there.reason and here.candidate_sha256 == there.candidate_sha256
            assert ({c["case"]: c["passed"] for c in here.cases if c["case"] in fixed}
                    == {c["case"]: c["passed"] for c in there.cases if c["case"] in fixed})
            assert here.first_mismatch == there.first_mismatch and len(here.cases) == len(there.cases)
        endless = write_candidate(session, tmp_path, "endless", ENDLESS)
        quick = dataclasses.replace(session.options, timeout_s=6.0, timing=False)
        start = time.monotonic()
        there = remote.evaluate(session.run.spec, endless, quick, session.reference, parent)
        assert there.outcome is Outcome.TIMEOUT and "wall-clock limit" in there.reason, there.reason
        assert time.monotonic() - start < 60
        assert ray.get(remote.actor.sandboxes.remote()) == 0  # the candidate's process was killed on the node
    finally:
        ex.close()
        session.close()


def test_a_node_with_another_environment_is_refused(cluster, run):
    session = setup.reopen(run, RunConfig.load(run))
    try:
        bundle = SeedBundle.pack(session.run.spec, session.reference, "cpu")
        expected = dict(run_environment(session.run.config.binding), torch="0.0-other")
        with pytest.raises(UsageError) as err:
            RayExecutor(bundle, 1, expected, reference_sha256=session.reference.seed_sha256)
    finally:
        session.close()
    message = str(err.value)
    assert "\n" not in message and "refused: torch=" in message and "(the run's is '0.0-other')" in message
    wait_for(lambda: ray.available_resources().get("CPU", 0) == 2, 30)  # the refused actor was stopped


def test_an_actor_killed_mid_evaluation_is_redone_once(cluster, run):
    session = open_session(run, iterations=1)
    ex = RayExecutor.for_session(session, 1)
    optimizer = Optimizer(session, ScriptedAgent([FASTER]), executor=ex)
    [first_actor] = ex.actors()
    victim: list[str] = []

    def evaluating() -> list[str]:
        return [t.attempt_id for t in optimizer.snapshot().in_flight if t.stage in ("evaluating", "confirming")]

    def kill_when_evaluating():
        wait_for(lambda: ray.get(first_actor.sandboxes.remote()) > 0 and evaluating())
        victim.extend(evaluating())  # one slot: one attempt is evaluating, in the actor
        ray.kill(first_actor)

    killer = threading.Thread(target=kill_when_evaluating)
    killer.start()
    try:
        summary = optimizer.run()
    finally:
        killer.join()
        ex.close()
        session.close()
    assert summary.stop_reason == "iterations" and summary.iterations == 1 and victim == ["a0001"]
    assert finished_ids(run) == ["a0001"]  # redone, counted once, nothing lost
    started = [e["attempt_id"] for e in Journal(run).events() if e["event"] == "started"]
    assert started == ["a0001", "a0001"]
    assert (run / "attempts" / "a0001.interrupted-1" / "candidate.py").is_file()  # the lost try, kept aside
    assert [r.outcome.value for r in finished_records(run)] == ["accepted"]  # on the replacement actor
    [node] = json.loads((run / "summary.json").read_text())["nodes"]
    assert node["lost"] == 1 and node["evaluations"] == 2 and summary.executor == "ray"  # evaluated, confirmed


def test_ctrl_c_cancels_the_remote_evaluation(cluster, run):
    session = open_session(run, iterations=2)
    ex = RayExecutor.for_session(session, 1)
    # An endless candidate: only the cancel can end its evaluation before the run's 120 s limit.
    optimizer = Optimizer(session, ScriptedAgent([ENDLESS]), executor=ex)
    [actor] = ex.actors()
    left: list[int] = []

    def interrupt_when_evaluating():
        wait_for(lambda: any(t.stage == "evaluating" for t in optimizer.snapshot().in_flight))
        wait_for(lambda: ray.get(actor.sandboxes.remote()) > 0, 60)  # a worker runs on the node
        optimizer.interrupt()
        wait_for(lambda: ray.get(actor.sandboxes.remote()) == 0, 15)
        left.append(0)

    stopper = threading.Thread(target=interrupt_when_evaluating)
    stopper.start()
    start = time.monotonic()
    try:
        summary = optimizer.run()
        stopper.join()
    finally:
        ex.close()
        session.close()
    assert left == [0]  # the remote sandboxes were killed, not left to finish
    assert summary.stop_reason == "interrupted" and summary.iterations == 0 and time.monotonic() - start < 60
    again = setup.reopen(run, RunConfig.load(run))
    again.close()
    assert again.run.redo[:1] == ["a0001"]


def test_an_offline_run_on_ray_accepts_a_variant(cluster, run):
    done = cli("optimize", "--resume", str(run), "--iterations", "2", "--workers", "2", "--executor", "ray",
               "--ray-address", cluster, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = RunSummary.load(run)
    assert summary.accepted >= 1 and summary.iterations == 2 and summary.executor == "ray", summary
    [node] = summary.nodes
    assert sorted(node["slots"]) == ["ray:0", "ray:1"] and node["evaluations"] >= 2
    assert node["evaluations_per_min"] > 0
    assert f"ray node {node['node']}: 2 slot(s)" in " ".join(done.stdout.split())
    assert open_run(run).accepted()


def test_a_killed_driver_resumes_on_ray(cluster, run):
    """SIGKILL the driver in the middle of an evaluation on an actor: Ray stops the orphaned actor (and
    its sandbox with it), and --resume redoes the attempt once."""
    args = ["optimize", "--resume", str(run), "--iterations", "1", "--executor", "ray"]
    proc = popen_cli(*args, env={"RAY_ADDRESS": cluster})
    wait_for(lambda: (run / "attempts" / "a0001" / "candidate.py").is_file() or proc.poll() is not None)
    wait_for(lambda: ray.available_resources().get("CPU", 2) < 2 or proc.poll() is not None)  # the actor is up
    time.sleep(1.0)
    proc.kill()
    proc.communicate(timeout=30)
    assert not finished_ids(run)
    # The dead driver's actor is gone with it: the cluster has both CPUs for the resume.
    wait_for(lambda: ray.available_resources().get("CPU", 0) == 2, 60)
    done = cli(*args, env={"RAY_ADDRESS": cluster}, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert finished_ids(run) == ["a0001"]
    assert (run / "attempts" / "a0001.interrupted-1" / "candidate.py").is_file()
    summary = RunSummary.load(run)
    assert summary.iterations == 1 and summary.executor == "ray" and summary.nodes[0]["evaluations"] >= 1
    accepted = {k.attempt_id for k in open_run(run).accepted()}
    assert accepted == {r.attempt_id for r in finished_records(run) if r.outcome.value == "accepted"}
