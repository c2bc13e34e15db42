"""A worker waiting at the gate (tik_agent.sandbox.worker) whose parent died: found on this
machine, a worker of a SIGKILLed optimize run still sleeping at its gate 1 h 47 min later
under an orphaned bwrap (its --die-with-parent had not taken it down).  The wait is now
bounded by the worker's own wall limit, which the parent puts in the request."""

import json
import time

import pytest

from tik_agent.sandbox.worker import GateTimeout, _wait_at_gate


def _quiet(*_):
    pass


def test_a_gate_that_never_opens_ends_the_wait_at_the_workers_own_limit(tmp_path):
    start = time.monotonic()
    with pytest.raises(GateTimeout, match="the evaluation that started this worker is gone"):
        _wait_at_gate(tmp_path, {"gate": "gate"}, _quiet, wall_seconds=0.3)
    assert 0.3 <= time.monotonic() - start < 5


def test_an_open_gate_is_read_as_before(tmp_path):
    (tmp_path / "gate").write_text(json.dumps({"proceed": True, "graph_calls": {"x": 1}}))
    assert _wait_at_gate(tmp_path, {"gate": "gate"}, _quiet, wall_seconds=0.3) == {"proceed": True,
                                                                                    "graph_calls": {"x": 1}}
    assert _wait_at_gate(tmp_path, {}, _quiet, wall_seconds=0.3) == {"proceed": True, "graph_calls": {}}


def test_the_parent_puts_the_workers_wall_limit_in_its_request(tmp_path, monkeypatch):
    from tik_agent.judge import workerbox

    written = {}

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        written.update(json.loads((tmp_path / workerbox.REQUEST_FILE).read_text()))
        raise Stop

    box = workerbox.WorkerBox.__new__(workerbox.WorkerBox)
    box.dir = tmp_path
    monkeypatch.setattr(workerbox, "scrubbed_environment", stop)
    from tik_agent.judge.options import EvalOptions

    with pytest.raises(Stop):
        box.run({"mode": "candidate", "cases": []}, EvalOptions(device="cpu"), _Watch(), wall=123.0)
    assert written["wall_seconds"] == 123.0


class _Watch:
    label = ""
    cases = ""
