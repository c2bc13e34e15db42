"""The loop in process, with a scripted agent: promotion, the run on disk, budgets, workers, stops."""

from __future__ import annotations

import json
import logging
import re
import stat
import threading
import time

import pytest
from optimize_helpers import FASTER, NEUTRAL, SAME, WRONG_BITS, ScriptedAgent

from tik_agent.search import scheduler as scheduler_mod
from tik_agent.search import setup
from tik_agent.agents.base import AgentUnavailable, Proposal, Usage
from tik_agent.cli import run as cli
from tik_agent.cli.view_commands import _last_verdict
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import Journal, RunSummary, finished_records
from tik_agent.run.lineage import open_run
from tik_agent.search.interrupts import kill_sandboxes
from tik_agent.search.optimize import Optimizer
from tik_agent.search.executor import LocalExecutor
from tik_agent.judge.evaluate import evaluate
from tik_agent.run.runconfig import RunConfig

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

CONTRACT_TRAILERS = {"Attempt-Id", "Parent-Commit", "Speedup-Vs-Seed", "Speedup-Vs-Parent", "Parity-Cases",
                     "Device", "Agent", "Model", "Tokens-Input", "Tokens-Output"}


def optimize(path, agent, workers=None, executor=None, **limits):
    config = RunConfig.load(path).extended(limits=limits, workers=workers)
    session = setup.reopen(path, config)
    try:
        optimizer = Optimizer(session, agent, executor=executor)
        return optimizer.run()
    finally:
        session.close()


def outcomes(path):
    return {r.attempt_id: r.outcome for r in finished_records(path)}


def test_promotion_and_the_run_on_disk(run):
    agent = ScriptedAgent([FASTER, WRONG_BITS, None, NEUTRAL[2], SAME], usage=Usage(100, 20, 0.001))
    summary = optimize(run, agent, iterations=5)

    got = outcomes(run)
    assert got["a0001"] is Outcome.ACCEPTED
    assert got["a0002"] is Outcome.PARITY_FAILED
    assert got["a0003"] is Outcome.NO_CODE
    assert got["a0004"] in (Outcome.NOT_FASTER, Outcome.UNCONFIRMED)
    assert got["a0005"] is Outcome.DUPLICATE  # the parent itself is not evaluated again

    # summary.json
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk == summary.to_dict()
    for key in ("run_id", "seed", "agent", "model", "iterations", "accepted", "best_speedup", "tokens", "cost_usd",
                "stop_reason", "environment"):
        assert key in on_disk
    assert (summary.iterations, summary.accepted, summary.stop_reason) == (5, 1, "iterations")
    assert summary.best_speedup > 1.5 and summary.best_attempt == "a0001"
    assert on_disk["tokens"] == {"input": 500, "output": 100} and summary.cost_usd == pytest.approx(0.005)
    assert summary.environment["device"] == "cpu"

    # the lineage: one accepted commit on main, with the contract's files and trailers
    lin = open_run(run)
    [kernel] = lin.accepted()
    assert lin.best_commit() == kernel.commit and kernel.parent_commit == lin.root_commit()
    assert CONTRACT_TRAILERS <= set(kernel.trailers)
    # 5 grid cases and 3 above the workload (65, 128, 257), plus the cases each evaluation adds
    passed, total = map(int, kernel.trailers["Parity-Cases"].split("/"))
    assert passed == total >= 8 and kernel.trailers["Tokens-Input"] == "100"
    assert kernel.speedup_vs_seed == pytest.approx(summary.best_speedup, abs=1e-3)
    assert "ROWS_PER_PROGRAM = 16" in (run / "kernel.py").read_text()
    evaluation = json.loads(lin.file_at(kernel.commit, "evaluation.json"))
    assert evaluation["kind"] == "variant" and evaluation["attempt_id"] == "a0001"
    assert evaluation["parent_commit"] == lin.root_commit() and evaluation["outcome"] == "passed"
    confirm = json.loads((run / "attempts" / "a0001" / "confirm.json").read_text())
    assert evaluation["speedup"] == confirm["speedup"]  # speedups come from the confirming run
    seed_eval = json.loads(lin.file_at(lin.root_commit(), "evaluation.json"))
    assert seed_eval["kind"] == "seed" and seed_eval["speedup"] == 1.0 and seed_eval["schema"] == 1
    assert len(seed_eval["cases"]) >= 8 and seed_eval["timing"] and seed_eval["environment"]["device"] == "cpu"
    assert lin.trailers(lin.root_commit())["Kind"] == "seed"

    # every attempt kept, immutably
    files = {p.name: sorted(f.name for f in p.iterdir()) for p in (run / "attempts").iterdir()}
    assert {"candidate.py", "parent.py", "diff.patch", "prompt.md", "reply.md", "report.json", "confirm.json",
            "evaluation.json", "record.json", "rationale.txt"} == {
        f for f in files["a0001"] if not re.fullmatch(r"(report|confirm)-\d+\.json", f)}  # re-times if too noisy
    assert "confirm.json" not in files["a0002"] and "candidate.py" not in files["a0003"]
    for path in (run / "attempts").rglob("*"):
        assert path.is_dir() or not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    report = json.loads((run / "attempts" / "a0002" / "report.json").read_text())
    assert report["outcome"] == "parity_failed" and report["first_mismatch"]

    # journal: each attempt started once and finished once
    events = Journal(run).events()
    for kind in ("started", "finished"):
        ids = [e.get("attempt_id") or e["record"]["attempt_id"] for e in events if e["event"] == kind]
        assert sorted(ids) == ["a0001", "a0002", "a0003", "a0004", "a0005"]
    assert events[-1]["event"] == "stopped" and events[-1]["reason"] == "iterations"

    # what the agent was told
    assert sorted(c.attempt_index for c in agent.contexts) == [0, 1, 2, 3, 4]
    last = max(agent.contexts, key=lambda c: c.attempt_index)
    # each outcome exactly as recorded (not_faster and duplicate too), not translated
    recorded = {r.attempt_id: r.outcome for r in finished_records(run)}
    assert last.recent and all(f.outcome is recorded[f.attempt_id] for f in last.recent)
    assert any(f.outcome == "accepted" for f in last.recent)
    assert last.timing_table and last.device.startswith("CPU")


@pytest.mark.parametrize("limits,usage,reason,attempts", [
    ({"iterations": 2}, Usage(0, 0, 0.0), "iterations", 2),
    ({"iterations": 10, "max_tokens": 1000}, Usage(500, 100, None), "tokens", 2),
    ({"iterations": 10, "max_cost_usd": 0.5}, Usage(10, 10, 0.3), "cost", 2),
    ({"iterations": 10, "patience": 2}, Usage(0, 0, 0.0), "patience", 2),
    ({"iterations": 10}, Usage(0, 0, 0.0), "exhausted", 3),
])
def test_budgets_stop_with_their_reason(run, limits, usage, reason, attempts):
    summary = optimize(run, ScriptedAgent([None], usage=usage), **limits)
    assert summary.stop_reason == reason
    # a budget is checked before an attempt starts; the lookahead may have one more in flight
    assert attempts <= summary.iterations <= attempts + 1
    assert RunSummary.load(run).stop_reason == reason


class OutOfMoves(ScriptedAgent):
    """An agent that knows it has no move left from any parent (as the offline agent says)."""

    def propose(self, context):
        self.contexts.append(context)
        return Proposal(None, "", Usage(0, 0, 0.0), "prompt", "", error="no move left", exhausted=True)


def test_an_agent_out_of_moves_stops_the_run_without_spending_attempts(run):
    """Negative control in test_budgets_stop_with_their_reason: an agent that only fails to give
    code, without saying it is out of moves, spends three attempts before the seed is set aside."""
    agent = OutOfMoves([None])
    summary = optimize(run, agent, iterations=10)
    assert summary.stop_reason == "exhausted" and summary.iterations == 0
    assert len(agent.contexts) == 1 and finished_records(run) == []


def test_a_repeated_candidate_is_not_evaluated_twice(run):
    summary = optimize(run, ScriptedAgent([NEUTRAL[0]]), iterations=6)
    got = [r.outcome.value for r in finished_records(run)]
    assert got.count("duplicate") == 3 and summary.stop_reason == "exhausted"  # nothing new from the seed
    assert len(list((run / "attempts").glob("*/report.json"))) == 1


def test_time_budget(run):
    class Slow(ScriptedAgent):
        def propose(self, context):
            time.sleep(0.4)
            return super().propose(context)

    start = time.monotonic()
    summary = optimize(run, Slow([None]), iterations=100, time_s=0.5)
    assert summary.stop_reason == "time" and time.monotonic() - start < 10


def test_two_workers_evaluate_in_parallel(run):
    summary = optimize(run, ScriptedAgent(NEUTRAL), workers=2, iterations=4)
    records = finished_records(run)
    assert summary.iterations == 4 and sorted(r.attempt_id for r in records) == ["a0001", "a0002", "a0003", "a0004"]
    spans = sorted((r.finished_at - r.eval_s, r.finished_at) for r in records)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), "no two evaluations overlapped"


def test_interrupt_kills_evaluations_and_leaves_the_attempt_to_redo(run):
    agent = ScriptedAgent([FASTER, *NEUTRAL])
    config = RunConfig.load(run).extended(limits={"iterations": 3}, workers=None)
    session = setup.reopen(run, config)
    evaluating = threading.Event()

    def evaluate_then_tell(spec, candidate, options, **kwargs):
        # The real sandboxed evaluation, announced as it starts: the interrupt below lands
        # inside a0001's evaluation however slow the machine is (polling the live view for
        # the stage could miss it on a contended CI machine, and then a0001 finished).
        evaluating.set()
        return evaluate(spec, candidate, options, **kwargs)

    executor = LocalExecutor(config.device, config.workers, evaluate_fn=evaluate_then_tell)
    optimizer = Optimizer(session, agent, executor=executor)

    def interrupt_when_evaluating():
        evaluating.wait(timeout=300)
        time.sleep(1.0)   # the worker is starting or running: either way it is killed
        interrupted_at.append(time.monotonic())
        optimizer.interrupt()

    interrupted_at: list[float] = []
    threading.Thread(target=interrupt_when_evaluating, daemon=True).start()
    try:
        summary = optimizer.run()
    finally:
        session.close()
    # Measured from the interrupt, not from the start: on a busy machine reaching the
    # evaluation takes longer, stopping must not.
    assert summary.stop_reason == "interrupted" and interrupted_at
    assert time.monotonic() - interrupted_at[0] < 15
    assert kill_sandboxes() == 0  # nothing left running
    assert summary.iterations == 0 and RunSummary.load(run).stop_reason == "interrupted"
    session = setup.reopen(run, config)
    try:
        assert session.run.redo == ["a0001", "a0002"]  # the one evaluating, the one waiting for a slot
        # Which of the two threads took the one slot first is the scheduler's race: the one
        # evaluating kept its candidate, the one waiting never proposed, neither has a verdict.
        aside = [run / "attempts" / f"{a}.interrupted-1" for a in ("a0001", "a0002")]
        assert [(d / "candidate.py").is_file() for d in aside].count(True) == 1
        assert not any((d / "report.json").exists() for d in aside)
    finally:
        session.close()


def test_an_unavailable_agent_pauses_then_stops(run, monkeypatch):
    monkeypatch.setattr(scheduler_mod, "AGENT_RETRY_S", (0.1, 0.1))

    class Flaky(ScriptedAgent):
        calls = 0

        def propose(self, context):
            Flaky.calls += 1
            if Flaky.calls <= 2:
                raise AgentUnavailable("rate limited", transient=True)
            return super().propose(context)

    summary = optimize(run, Flaky([None]), iterations=2)
    assert summary.stop_reason == "iterations" and summary.iterations == 2
    assert sorted(r.attempt_id for r in finished_records(run)) == ["a0001", "a0002"]

    class Down(ScriptedAgent):
        def propose(self, context):
            time.sleep(0.5)   # as an SDK's own tries take time: the other thread takes its attempt meanwhile
            raise AgentUnavailable("invalid x-api-key", transient=False)

    logger = logging.getLogger("tik_agent")
    handler = _Collect()
    logger.addHandler(handler)  # the CLI tests may have turned propagation off
    try:
        summary = optimize(run, Down([None]), iterations=5)
    finally:
        logger.removeHandler(handler)
    assert summary.stop_reason == "agent_unavailable" and summary.iterations == 2
    # Both attempt threads met the failure; the stop is said once.
    stops = [m for m in handler.messages if m.startswith("the agent is unavailable: invalid x-api-key; stopping")]
    assert len(stops) == 1, handler.messages


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_a_bug_stops_the_run_with_reason_error(run, caplog):
    class Broken(ScriptedAgent):
        def propose(self, context):
            raise RuntimeError("boom")

    logger = logging.getLogger("tik_agent")
    logger.addHandler(caplog.handler)  # the CLI tests may have turned propagation off
    try:
        summary = optimize(run, Broken([None]), iterations=3)
    finally:
        logger.removeHandler(caplog.handler)
    assert summary.stop_reason == "error" and summary.iterations == 0
    assert "boom" in caplog.text



class _Steps(ScriptedAgent):
    """Each step is a function of the parent's source (or None: no code), taken in the order
    the agent is asked: two started attempts may ask in either order."""

    def propose(self, context):
        from tik_agent.agents.base import Proposal

        self.contexts.append(context)
        step = self.script[(len(self.contexts) - 1) % len(self.script)]
        return Proposal(step(context.parent_source), "step", self.usage, "prompt", "reply")


def test_a_source_from_another_parent_reuses_the_earlier_verdict(run, monkeypatch):
    """The first proposal (seed + NUM_WARPS=1) is not faster; the second (seed + 16 rows) is
    accepted; the third, from the second, undoes the rows and sets NUM_WARPS=1 again, with a
    comment: the first's source from another parent.  Named in the order the agent was asked:
    the scheduler starts a0001 and a0002 together, and either may ask first (a0002 did in about
    one run in three here), so attempt ids are not the order of the steps."""
    # Proposals stay "quick" however loaded the machine: the third then takes the slot before its
    # parent is drawn, and so sees the second accepted (a loaded full run here measured the scripted
    # proposals over a second, and drew the third's parent beside the second's evaluation: the seed).
    monkeypatch.setattr(scheduler_mod, "SLOW_PROPOSAL_S", float("inf"))
    neutral = lambda src: src.replace(*NEUTRAL[0], 1)  # noqa: E731
    faster = lambda src: src.replace(*FASTER, 1)  # noqa: E731
    back = lambda src: neutral(src.replace(FASTER[1], FASTER[0], 1)) + "\n# the same kernel, restyled\n"  # noqa: E731
    agent = _Steps([neutral, faster, back])
    optimize(run, agent, iterations=3)
    first, second, third = (f"a{c.attempt_index + 1:04d}" for c in agent.contexts)  # index 0 is a0001
    records = {r.attempt_id: r for r in finished_records(run)}
    assert [records[a].parent_id for a in (first, second, third)] == ["seed", "seed", second]
    assert records[second].outcome is Outcome.ACCEPTED
    assert records[third].outcome is Outcome.DUPLICATE
    assert f"{first} from seed, {records[first].outcome.value}" in records[third].reason
    assert not (run / "attempts" / third / "report.json").exists()   # no evaluation spent on it
    assert [k.attempt_id for k in open_run(run).accepted()] == [second]
    # every later context tells the agent what the run has already seen
    assert len(agent.contexts[2].seen_sources) >= 3   # seed, the first, the second


# --------------------------------------------------------------------------- timing figures and noise


@pytest.mark.slow
def test_a_kernel_from_the_seed_is_one_measurement_shown_as_one_figure(run, capsys):
    """The seed is timed once, as the seed: no parent timing, and every view shows one figure."""
    optimize(run, ScriptedAgent([FASTER]), iterations=1)
    assert outcomes(run) == {"a0001": Outcome.ACCEPTED}
    for name in ("report.json", "confirm.json"):
        verdict = json.loads((run / "attempts" / "a0001" / name).read_text())
        assert not any("parent" in cell for cell in verdict["timing"])   # the seed was not timed twice
        assert verdict["speedup_vs_parent"] == verdict["speedup"]
    [kernel] = open_run(run).accepted()
    assert kernel.trailers["Speedup-Vs-Parent"] == kernel.trailers["Speedup-Vs-Seed"]
    assert float(kernel.trailers["Noise"]) >= 0

    capsys.readouterr()
    shown = {}
    for args in (["lineage", str(run)], ["show", str(run), "a0001"], ["show", str(run), "main"],
                 ["runs", str(run)]):
        assert cli(args) == 0
        out = shown[" ".join(args[::2])] = capsys.readouterr().out
        figures = re.findall(r"\d+\.\d+x(?: ±\S+)?", out)
        assert figures and all(" ±" in f for f in figures), (args, out)   # every speedup with its spread
        for line in out.splitlines():   # one measurement: never a second figure against the parent
            if "a0001" in line or line.startswith("evaluation:"):
                assert len(re.findall(r"\d+\.\d+x ±", line)) <= 1 and "parent" not in line, (args, line)
        if args[0] == "show":
            assert " parent " not in out.split("timing (median ms)")[1]   # no parent column in the table
            assert not re.search(r"x ±\S+ the parent", out)             # nor a figure against it
    assert re.search(r"a0001 \d+\.\d{3}x ±\S+ the seed ", shown["lineage"])
    assert re.search(r"evaluation: passed, parity \d+/\d+ (fixed )?parity cases( \([^)]*\))?, \d+\.\d{3}x ±\S+ the seed, noise", shown["show a0001"])


class _FakeSlot:
    """Answers each evaluation with the next scripted verdict; notes its rounds and parent."""

    name, node = "fake", "here"

    def __init__(self, verdicts):
        self.verdicts = list(verdicts)
        self.calls = []

    def evaluate(self, spec, candidate, options, reference=None, parent=None):
        self.calls.append((options.rounds, parent))
        return self.verdicts.pop(0)


class _FakeExecutor:
    kind, slots = "local", 1

    def __init__(self, verdicts):
        self.slot = _FakeSlot(verdicts)

    def acquire(self):
        return self.slot

    def release(self, slot):
        pass

    def placement(self):
        return [(self.slot.name, self.slot.node)]

    def cancel(self):
        pass

    def close(self):
        pass


def timed(speedup, noise, low):
    """A passed verdict of a candidate from the seed: timed against the seed only."""
    return Verdict(Outcome.PASSED, None, speedup=speedup, speedup_low=low, noise=noise, cases=[{"passed": True}],
                   environment={"device": "cpu"})


def test_a_verdict_too_noisy_to_rank_is_retimed_with_more_rounds_then_decided(run):
    # 1.20x the seed, faster in every round, but 40% noise: neither a rejection nor a promotion.
    executor = _FakeExecutor([timed(1.20, 0.40, 1.05), timed(1.30, 0.02, 1.20), timed(1.31, 0.02, 1.21)])
    summary = optimize(run, ScriptedAgent([FASTER]), executor=executor, iterations=1)
    [record] = finished_records(run)
    assert record.outcome is Outcome.ACCEPTED and record.retimes == 1 and not record.noisy
    assert executor.slot.calls == [(5, None), (10, None), (10, None)]   # re-timed with twice the rounds
    assert sorted(p.name for p in (run / "attempts" / "a0001").glob("[rc]*.json")) == [
        "confirm.json", "record.json", "report-2.json", "report.json"]
    [kernel] = open_run(run).accepted()
    assert kernel.trailers["Noise-Retimes"] == "1" and kernel.trailers["Noise"] == "0.0200"
    assert kernel.trailers["Speedup-Vs-Parent"] == kernel.trailers["Speedup-Vs-Seed"] == "1.310"
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["noise_margin"] == 0.05 and on_disk["best_noise"] == 0.02
    assert on_disk["too_noisy"] == [{"attempt_id": "a0001", "retimes": 1, "noise": 0.02, "outcome": "accepted",
                                     "resolved": True}]
    assert summary.too_noisy == on_disk["too_noisy"]


def test_a_candidate_still_too_noisy_after_the_retimes_is_not_promoted_and_says_so(run):
    executor = _FakeExecutor([timed(1.20, 0.40, 1.05), timed(1.25, 0.35, 1.04), timed(1.21, 0.30, 1.03)])
    logger, handler = logging.getLogger("tik_agent"), _Collect()
    logger.addHandler(handler)  # the CLI tests may have turned propagation off
    try:
        optimize(run, ScriptedAgent([FASTER]), executor=executor, iterations=1)
    finally:
        logger.removeHandler(handler)
    [record] = finished_records(run)
    assert record.outcome is Outcome.NOT_FASTER and record.noisy and record.retimes == 2
    assert record.reason.startswith("too noisy to rank: 1.210x ±30% the seed") and "after 2 re-times" in record.reason
    assert [rounds for rounds, _ in executor.slot.calls] == [5, 10, 20]
    warnings = [m for m in handler.messages if m.startswith("a0001: too noisy to rank")]
    assert len(warnings) == 2 and "re-timing with 20 rounds (2 of 2)" in warnings[1]
    assert _last_verdict(run / "attempts" / "a0001")["speedup"] == 1.21   # show reads the deciding verdict
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["too_noisy"] == [{"attempt_id": "a0001", "retimes": 2, "noise": 0.30, "outcome": "not_faster",
                                     "resolved": False}]
    assert open_run(run).accepted() == []
