"""The seed's workers fork from a warm server on the CPU: the same bits and facts as a
fresh interpreter's, and the same limits, watchdog and failure reports."""

import json
import os
import signal
import time

import pytest

from tik_agent.bits import digest
from tik_agent.judge.evaluate import compute_reference
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.workerbox import WorkerBox
from tik_agent.sandbox import forkserver
from tik_agent.sandbox.process import SandboxLimits, scrubbed_environment
from tik_agent.sandbox.worker import REQUEST_FILE
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.seeds import resolve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spec():
    return resolve("rmsnorm")


def _reference(spec, monkeypatch, forks: str):
    monkeypatch.setenv(forkserver.SWITCH, forks)
    before = forkserver.runs_served()
    ref = compute_reference(spec, EvalOptions(device="cpu", timing=False), evaluation_cases(spec, "cpu")[:3])
    return ref, forkserver.runs_served() - before


def test_a_forked_seed_worker_gives_the_fresh_interpreters_bits_and_facts(spec, monkeypatch):
    fresh, fresh_forks = _reference(spec, monkeypatch, "0")
    forked, forks = _reference(spec, monkeypatch, "1")
    assert (fresh_forks, forks) == (0, 1)  # the switch decides which way the worker starts
    assert forked.environment == fresh.environment
    assert list(forked.outputs) == list(fresh.outputs) and len(fresh.outputs) == 3
    assert all(digest(forked.outputs[k]) == digest(fresh.outputs[k]) for k in fresh.outputs)


def test_only_the_seeds_workers_on_the_cpu_fork(spec, monkeypatch):
    monkeypatch.delenv(forkserver.SWITCH, raising=False)
    assert forkserver.enabled("cpu") and not forkserver.enabled("cuda")
    monkeypatch.setenv(forkserver.SWITCH, "0")
    assert not forkserver.enabled("cpu")
    monkeypatch.delenv(forkserver.SWITCH)
    # a candidate's worker never forks, whatever it asks for
    box = WorkerBox(spec, keep=False)
    try:
        (box.dir / "seed_kernel.py").write_bytes(spec.source.read_bytes())
        before = forkserver.runs_served()
        for mode in ("candidate", "reference"):
            request = {"mode": mode, "spec_dir": "spec", "kernel": "seed_kernel.py", "device": "cpu",
                       "cases": [], "guard": True}
            proc = box.run(request, EvalOptions(device="cpu", timing=False), box.watch({}), 120)
            assert proc.ok, proc.stderr
            assert box.forked is (mode == "reference") and forkserver.runs_served() - before == int(mode == "reference")
    finally:
        box.close()


def test_the_server_is_used_only_where_candidates_cannot_reach_it():
    from tik_agent.sandbox.isolation import Isolation

    assert forkserver.out_of_reach(Isolation("bwrap", ("user", "pid", "mount", "net")))
    assert forkserver.out_of_reach(Isolation("unshare", ("pid", "net")))
    assert forkserver.out_of_reach(Isolation("process", ("net",), landlock=True, seccomp=True))
    # seccomp stops ptrace, not the open of /proc/<server>/fd/<pipe> by the same uid
    assert not forkserver.out_of_reach(Isolation("process", ("net",), seccomp=True))
    assert not forkserver.out_of_reach(Isolation("process"))


def _request(box, gate_open: bool = False) -> None:
    """A request whose worker runs no case, then waits at a gate (open: it goes home at once)."""
    (box.dir / REQUEST_FILE).write_text(json.dumps({"mode": "candidate", "spec_dir": "spec",
                                                    "kernel": "seed_kernel.py", "device": "cpu", "cases": [],
                                                    "guard": False, "timing": {"gate": "gate"}}))
    if gate_open:
        (box.dir / "gate").write_text(json.dumps({"proceed": False, "graph_calls": {}}))


def _blocked_worker(spec, tmp_path):
    """A box whose worker runs no case, then waits at a gate nobody opens."""
    box = WorkerBox(spec, keep=False)
    (box.dir / "seed_kernel.py").write_bytes(spec.source.read_bytes())
    _request(box)
    env = scrubbed_environment({"TRITON_INTERPRET": "1"}, workdir=box.dir)
    return box, env


def _once_waiting(box, action):
    """A watchdog that calls ``action()`` once, when the worker reports it waits at the gate."""
    done = []

    def watchdog():
        progress = box.dir / "progress"
        if not done and progress.is_file() and progress.read_text().strip() == "waiting":
            done.append(action())
        return None

    return watchdog


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_watchdog_and_the_wall_clock_limit_kill_a_forked_worker(spec, tmp_path):
    box, env = _blocked_worker(spec, tmp_path)
    try:
        started = time.monotonic()
        calls = []
        result = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=120), env,
                                        watchdog=lambda: calls.append(1) or ("enough" if len(calls) > 4 else None))
        assert result.timed_out and result.watchdog_reason == "enough"
        assert result.returncode is None and result.signal == signal.SIGKILL
        assert time.monotonic() - started < forkserver.REAP_GRACE_SECONDS  # killed, not waited out
        _request(box)
        result = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=3), env)
        assert result.timed_out and result.watchdog_reason is None and result.signal == signal.SIGKILL
        # the negative control: the same worker with its gate open finishes on its own
        _request(box, gate_open=True)
        result = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=120), env)
        assert result.ok and not result.timed_out, result.stderr
    finally:
        box.close()


def test_a_worker_that_raises_exits_1_with_its_trace_in_stderr(spec, tmp_path):
    box, env = _blocked_worker(spec, tmp_path)
    try:
        (box.dir / REQUEST_FILE).unlink()
        result = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=120), env)
        assert result.returncode == 1 and not result.timed_out
        assert "FileNotFoundError" in result.stderr and "request.json" in result.stderr
    finally:
        box.close()


def test_a_dead_server_fails_its_workers_and_the_next_worker_starts_a_new_one(spec, tmp_path):
    box, env = _blocked_worker(spec, tmp_path)
    try:
        server = forkserver._server()
        workers = []

        def kill_the_server():
            workers.extend(_waiting_pids(box.dir))
            os.kill(server.proc.pid, signal.SIGKILL)

        result = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=120), env,
                                        watchdog=_once_waiting(box, kill_the_server))
        assert result is None and server.dead  # not the seed's failure: the caller starts it fresh
        # its child had the death signal set against the server: nothing is left waiting at the gate
        assert len(workers) == 1
        deadline = time.monotonic() + 10
        while not _gone(int(workers[0])) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(int(workers[0]))
        _request(box, gate_open=True)
        again = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=120), env)
        assert again.ok and forkserver._server() is not server
    finally:
        box.close()


def _waiting_pids(workdir):
    """Processes whose working directory is ``workdir`` (the worker, while it lives)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.readlink(f"/proc/{pid}/cwd") == str(workdir):
                    found.append(pid)
            except OSError:
                pass
    return found


def test_a_stop_kills_the_forked_workers_and_leaves_the_server(spec, tmp_path):
    """kill_sandboxes (Ctrl-C twice, a cancelled Ray evaluation) takes the seed's forked workers
    as it takes sandboxed children; the server is not one of them and serves the next worker."""
    from tik_agent.search.interrupts import kill_sandboxes, sandbox_groups

    box, env = _blocked_worker(spec, tmp_path)
    try:
        server = forkserver._server()
        seen = []

        def stop():
            seen.append((sorted(sandbox_groups()), [int(p) for p in _waiting_pids(box.dir)]))
            seen.append(kill_sandboxes())

        result = forkserver.run_trusted(box.dir, SandboxLimits(wall_seconds=120), env,
                                        watchdog=_once_waiting(box, stop))
        (groups, worker), killed = seen
        assert len(groups) == 1 and groups == worker  # the forked worker, by the directory it works in
        assert server.proc.pid not in groups and killed == 1
        assert result.signal == signal.SIGKILL and not result.timed_out
        assert sandbox_groups() == [] and not server.dead and forkserver._server() is server
    finally:
        box.close()
