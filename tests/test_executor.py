"""One evaluator per GPU: slot assignment from fake device lists, pinning, warm caches, pairing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from optimize_helpers import FASTER, NEUTRAL, ScriptedAgent

from tik_agent.errors import UsageError
from tik_agent.errors import SpecError
from tik_agent.judge import evaluate as evaluate_mod
from tik_agent.judge import workerbox as workerbox_mod
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome
from tik_agent.search import setup
from tik_agent.run.journal import finished_records
from tik_agent.run.runconfig import RunConfig
from tik_agent.sandbox.process import SandboxResult
from tik_agent.search.executor import LocalExecutor, assign_gpus, visible_devices
from tik_agent.search.optimize import Optimizer
from tik_agent.sandbox import forkserver
from tik_agent.spec.seeds import resolve

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


def never(*_):
    raise AssertionError("the device count must not be read when CUDA_VISIBLE_DEVICES is set")


@pytest.mark.parametrize("raw,expected", [
    ("2,3", ["2", "3"]),
    (" 1 , 0 ", ["1", "0"]),
    ("GPU-5c3e,GPU-77aa", ["GPU-5c3e", "GPU-77aa"]),
    ("MIG-1f2e", ["MIG-1f2e"]),
    ("3,-1,2", ["3"]),          # CUDA ignores everything after an invalid entry
    ("1,,2", ["1"]),
    ("", []),
])
def test_visible_devices_follow_the_parents_list(raw, expected):
    assert visible_devices({"CUDA_VISIBLE_DEVICES": raw}, never) == expected


def test_visible_devices_without_the_variable_count_the_devices():
    assert visible_devices({}, lambda: 3) == ["0", "1", "2"]
    assert visible_devices({}, lambda: 0) == []
    with pytest.raises(UsageError, match="listed twice"):
        visible_devices({"CUDA_VISIBLE_DEVICES": "1,1"}, never)


def test_assign_gpus_gives_each_worker_its_own_gpu():
    assert assign_gpus(2, ["4", "6", "7"]) == ["4", "6"]
    with pytest.raises(UsageError, match=r"--workers 3 on cuda: .* only 2 visible \(4,6\)"):
        assign_gpus(3, ["4", "6"])
    with pytest.raises(UsageError, match="no GPU is visible"):
        assign_gpus(1, [])


def test_slots_on_cuda_pin_one_gpu_each_and_run_at_once(tmp_path):
    """Three workers on a fake node: three evaluations at the same time, each on its own GPU of the
    parent's list; a fourth waits for a slot."""
    seen, lock, barrier = [], threading.Lock(), threading.Barrier(3, timeout=10)

    def fake_evaluate(spec, candidate, options, reference=None, parent=None):
        with lock:
            seen.append((options.cuda_device, options.warm_cache))
        barrier.wait()  # breaks (and fails the test) unless three run concurrently
        return "verdict"

    ex = LocalExecutor("cuda", 3, warm_cache=tmp_path, environ={"CUDA_VISIBLE_DEVICES": "5,2,7,1"},
                       device_count=never, evaluate_fn=fake_evaluate)
    assert ex.slots == 3 and ex.names == ["cuda:5", "cuda:2", "cuda:7"]
    slots = [ex.acquire() for _ in range(3)]
    threads = [threading.Thread(target=s.evaluate, args=(None, Path("c.py"), EvalOptions(device="cuda")))
               for s in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(d for d, _ in seen) == ["2", "5", "7"]
    assert {w for _, w in seen} == {str(tmp_path)}
    got = []
    waiter = threading.Thread(target=lambda: got.append(ex.acquire()))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got, "a fourth evaluation took a GPU that was in use"
    ex.release(slots[1])
    waiter.join(5)
    assert got == [slots[1]]


def test_cpu_slots_pin_nothing():
    ex = LocalExecutor("cpu", 2, environ={"CUDA_VISIBLE_DEVICES": "0"}, device_count=never)
    slot = ex.acquire()
    assert slot.cuda_device is None and slot.warm_cache is None and ex.slots == 2
    with pytest.raises(UsageError, match="--workers: must be at least 1"):
        LocalExecutor("cpu", 0)


def test_the_worker_gets_its_gpu_and_a_fresh_copy_of_the_warm_cache(tmp_path, monkeypatch):
    warm = tmp_path / "warm"
    (warm / "ab12").mkdir(parents=True)
    (warm / "ab12" / "kernel.cubin").write_bytes(b"seed binary")
    saved = tmp_path / "saved"
    calls = []

    def fake_run(argv, workdir, limits, env, **_):
        cache = Path(env["TRITON_CACHE_DIR"])
        calls.append((env.get("CUDA_VISIBLE_DEVICES"), (cache / "ab12" / "kernel.cubin").read_bytes()))
        (cache / "ab12" / "kernel.cubin").write_bytes(b"poisoned by the candidate")
        return SandboxResult(0, False, None, 0.1, "", "")

    monkeypatch.setattr(workerbox_mod, "run_sandboxed", fake_run)
    monkeypatch.setenv(forkserver.SWITCH, "0")  # the seed's worker goes through the fake too
    spec = resolve("rmsnorm")
    reference = evaluate_mod.Reference({}, {}, "", [])
    options = EvalOptions(device="cpu", timing=False, cuda_device="GPU-77aa", warm_cache=str(warm))
    # The fake runs nothing, so the first worker of each evaluation (the seed's, for the
    # drawn cases) comes back without a result: bad input, raised before the candidate's.
    for _ in range(2):
        with pytest.raises(SpecError):
            evaluate(spec, spec.source, options, reference=reference)
    # each evaluation saw the seed's binary, never what the previous sandbox wrote
    # (each evaluation may start the seed's worker beside the candidate's: every worker counts)
    assert len(calls) >= 2 and all(call == ("GPU-77aa", b"seed binary") for call in calls)
    assert (warm / "ab12" / "kernel.cubin").read_bytes() == b"seed binary"
    with pytest.raises(SpecError):
        evaluate(spec, spec.source, EvalOptions(device="cpu", timing=False, save_cache=str(saved),
                                                warm_cache=str(warm)), reference=reference)
    assert (saved / "ab12" / "kernel.cubin").read_bytes() == b"poisoned by the candidate"  # kept as the worker left it
    no_pin = []
    monkeypatch.setattr(workerbox_mod, "run_sandboxed",
                        lambda argv, workdir, limits, env, **_: no_pin.append(env.get("CUDA_VISIBLE_DEVICES", "unset"))
                        or SandboxResult(1, False, None, 0.1, "", ""))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(SpecError):
        evaluate(spec, spec.source, EvalOptions(device="cpu", timing=False), reference=reference)
    assert no_pin and set(no_pin) == {"3"}  # unpinned evaluations keep the parent's list, as before


def test_an_attempt_is_evaluated_and_confirmed_on_one_gpu(run):
    """Two fake GPUs: every attempt's first and confirming evaluation run in the same slot, and both
    slots are used."""
    by_attempt: dict[str, set] = {}
    lock = threading.Lock()

    def recording(spec, candidate, options, reference=None, parent=None):
        with lock:
            by_attempt.setdefault(Path(candidate).parent.name, set()).add(options.cuda_device)
        return evaluate(spec, candidate, options, reference=reference, parent=parent)

    config = RunConfig.load(run).extended(limits={"iterations": 3}, workers=2)
    session = setup.reopen(run, config)
    try:
        ex = LocalExecutor("cuda", 2, environ={"CUDA_VISIBLE_DEVICES": "0,1"}, device_count=never,
                           evaluate_fn=recording)
        Optimizer(session, ScriptedAgent([FASTER, *NEUTRAL]), executor=ex).run()
    finally:
        session.close()
    records = finished_records(run)
    assert any(r.outcome.value == "accepted" for r in records), "no attempt was confirmed"
    assert by_attempt and all(len(gpus) == 1 for gpus in by_attempt.values()), by_attempt
    assert set().union(*by_attempt.values()) == {"0", "1"}


def test_the_parent_reads_device_properties_in_a_child():
    """On cuda the parent asks a child (reading properties starts CUDA in the reader); the child's
    answer is the same record the parent would have read itself."""
    import sys

    from tik_agent.backends import device as devices

    here = devices.environment("cpu")
    child = devices.probe_environment("cpu", in_child=True)
    assert devices.binding(child) == devices.binding(here) and child["executable"] == sys.executable
