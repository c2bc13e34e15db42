"""The early stops: in the parity phase, at the first fixed case that fails
(tik_agent.judge.stream, with a reference given), and at the gate
(tik_agent.judge.gate): a candidate that fails parity is never timed, its verdict is
what it was, and nothing its worker writes or claims turns that into a pass.

Evaluations go through ``evaluate_sandboxed`` (below the static rules, which would
stop the hostile corpus file first) on the small rmsnorm grid, with the worker's
directory kept: its last reported phase and result.json show how far it got.  The
gate's tests give no reference (the seed's worker computes the fixed cases beside
the candidate's, as for a seed with no cached reference), so nothing is judged before
the gate.
"""

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from seedutil import edit, small_rmsnorm
from shared import cached_reference
from tik_agent.judge.evaluate import evaluate_sandboxed
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.gate import Gate
from tik_agent.outcomes import Outcome
from tik_agent.sandbox.worker import GATE_FILE, OUTPUTS_FILE, PROGRESS_FILE, RESULT_FILE
from tik_agent.spec.schema import load_spec

CORPUS = Path(__file__).parent / "adversarial" / "runtime"
WRONG_BITS = ("rstd = 1.0 / tl.sqrt(sum_sq / N + eps)", "rstd = 1.0 / tl.sqrt(sum_sq / N + 2 * eps)")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return load_spec(small_rmsnorm(tmp_path_factory.mktemp("seed")))


@pytest.fixture(scope="module")
def options():
    from conftest import DEVICE

    return EvalOptions(device=DEVICE, rounds=3, warmup=1)


@pytest.fixture(scope="module")
def reference(spec, options):
    return cached_reference(spec, options)


@pytest.fixture(scope="module")
def evaluate_kept(spec, reference, tmp_path_factory):
    """Evaluate, keeping the worker's directory: the verdict, the candidate worker's last
    reported phase and its result.json."""

    def run(candidate: Path, options: EvalOptions, streamed: bool = False):
        kept = tmp_path_factory.mktemp("kept")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(tempfile, "tempdir", str(kept))  # where the workers' directories go
            verdict = evaluate_sandboxed(spec, candidate, replace(options, keep_workdir=True),
                                         reference if streamed else None)
        workdir = next(d for d in kept.glob("tik-eval-*") if (d / "candidate.py").exists())
        result = workdir / RESULT_FILE
        return verdict, (workdir / PROGRESS_FILE).read_text().strip(), \
            json.loads(result.read_text()) if result.exists() else None, sorted(workdir.glob("parity-*.pt"))

    return run


@pytest.fixture(scope="module")
def wrong_bits(spec, tmp_path_factory):
    path = tmp_path_factory.mktemp("wrong") / "candidate.py"
    path.write_text(spec.source.read_text())
    edit(path, *WRONG_BITS)
    return path


@pytest.fixture(scope="module")
def wrong_bits_timed(evaluate_kept, wrong_bits, options):
    return evaluate_kept(wrong_bits, options)


@pytest.mark.slow
def test_a_candidate_that_keeps_the_bits_is_timed(spec, options, evaluate_kept):
    """Negative control: the worker of a passing candidate goes past the gate.  The survey
    is off here; a passing candidate timed after its survey is test_evaluator's rewrites'."""
    verdict, phase, result, _ = evaluate_kept(spec.source, replace(options, survey=False))
    # The seed against itself: "slower" too when the machine is busy; timed either way.
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    assert verdict.speedup is not None
    assert phase == "recheck" and "timing" in result


@pytest.mark.slow
def test_a_candidate_that_fails_parity_is_not_timed(wrong_bits_timed):
    verdict, phase, result, _ = wrong_bits_timed
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert phase == "waiting", f"the worker went on to {phase!r}"
    assert "timing" not in result and result["status"] == "ok"
    assert verdict.environment == result["environment"] and verdict.speedup is None


@pytest.mark.slow
def test_the_verdict_at_the_gate_is_the_one_judged_after_the_worker(options, reference, evaluate_kept, wrong_bits,
                                                                      wrong_bits_timed):
    """Without timing there is no gate: the worker runs to its end and is judged then, as
    every candidate was before the early stop."""
    early, _, _, _ = wrong_bits_timed
    late, phase, _, _ = evaluate_kept(wrong_bits, replace(options, timing=False))
    # Never waited at a gate: with no gate to say that parity failed, it went on to the survey.
    assert phase == "survey"
    assert (early.outcome, early.reason, early.first_mismatch) == (late.outcome, late.reason, late.first_mismatch)
    assert early.reason.startswith(reference.cases[0].id + ": [parity]"), early.reason
    fixed = len(reference.cases)  # the drawn cases differ from one evaluation to the next
    assert early.cases[:fixed] == late.cases[:fixed]


@pytest.mark.slow
def test_a_worker_that_claims_the_gate_early_and_ignores_it_still_fails(options, evaluate_kept):
    """claims_the_gate.py says "waiting" before it has outputs, and is timed anyway with
    outputs that keep the seed's bits: the judgement at the gate stands."""
    verdict, phase, result, _ = evaluate_kept(CORPUS / "claims_the_gate.py", replace(options, survey=False))
    assert verdict.outcome is Outcome.INTEGRITY_FAILED, verdict.reason
    assert "[output] the worker saved no outputs" in verdict.reason, verdict.reason
    assert verdict.speedup is None
    # It did go on: its worker was timed, and left outputs the final judgement would have passed.
    assert phase == "recheck" and "timing" in result and result["status"] == "ok"


STORE = "        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)"
LATE_WRONG_BITS = (STORE, "        y = tl.where(M > 5, y * 1.0001, y)\n" + STORE)


@pytest.mark.slow
def test_with_a_reference_the_worker_is_stopped_at_the_first_failing_case(spec, options, reference, evaluate_kept,
                                                                         wrong_bits, wrong_bits_timed, tmp_path):
    """The stream: each fixed case judged as the worker finishes it; the first failure is the
    verdict the gate gave (same reason, mismatch and cases up to it), and the worker ran no case
    after it, was never timed and left no result."""
    gated, _, _, _ = wrong_bits_timed
    early, phase, result, streamed = evaluate_kept(wrong_bits, options, streamed=True)
    assert (early.outcome, early.reason, early.first_mismatch) == (gated.outcome, gated.reason, gated.first_mismatch)
    assert early.cases == gated.cases[:1] and early.reason.startswith(reference.cases[0].id)
    # Stopped: within a second of its first case here, so far short of its last (how far it got
    # depends on the machine's speed, not on a count this test could fix).
    assert phase == "parity" and result is None and len(streamed) < len(reference.cases), (phase, streamed)
    assert early.environment == reference.environment and early.speedup is None

    # A failure later in the grid (only cases above five rows): the cases before it ran, passed and are listed.
    late = tmp_path / "late.py"
    late.write_text(spec.source.read_text())
    edit(late, *LATE_WRONG_BITS)
    verdict, phase, _, streamed = evaluate_kept(late, replace(options, timing=False), streamed=True)
    first = next(i for i, c in enumerate(reference.cases) if c.m > 5)
    assert verdict.outcome is Outcome.PARITY_FAILED and verdict.reason.startswith(reference.cases[first].id)
    assert [c["passed"] for c in verdict.cases] == [True] * first + [False]
    assert phase == "parity" and first < len(streamed) < len(reference.cases), streamed


@pytest.mark.slow
def test_a_streamed_pass_is_not_a_pass(spec, options, reference, tmp_path):
    """The stream can only stop a worker: outputs.pt is judged whole at the end.  A worker whose
    streamed files hold the seed's answers and whose outputs.pt does not still fails (negative
    control for the stream's trust: forged by rewriting outputs.pt after the stream saw each case)."""
    from tik_agent.judge import evaluate as evaluate_mod
    from tik_agent.judge.workerbox import WorkerBox

    real = WorkerBox.outputs

    def wrong_whole_file(self, name=OUTPUTS_FILE):
        loaded = real(self, name)
        if name == OUTPUTS_FILE and (self.dir / "candidate.py").exists() and loaded.get("cases"):
            first = next(iter(loaded["cases"]))
            loaded["cases"].pop(first)
        return loaded

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluate_mod.WorkerBox, "outputs", wrong_whole_file)
        verdict = evaluate_sandboxed(spec, spec.source, replace(options, timing=False, survey=False), reference)
    assert verdict.outcome is Outcome.INTEGRITY_FAILED and "[output]" in verdict.reason, verdict.reason


@pytest.mark.parametrize("saved", ["not a tensor file", "no cases", "a case in another form"])
def test_outputs_unreadable_or_incomplete_at_the_gate_are_a_failure(spec, reference, saved):
    """What a worker that says it waits may have left instead of its outputs."""
    import torch

    from tik_agent.judge.evaluate import _parity_at_gate
    from tik_agent.judge.workerbox import WorkerBox
    from tik_agent.sandbox.worker import OUTPUTS_FILE

    box = WorkerBox(spec, keep=False)
    try:
        path = box.dir / OUTPUTS_FILE
        if saved == "not a tensor file":
            path.write_bytes(b"PK\x03\x04 torn")
        else:
            first = reference.cases[0].id
            torch.save({"cases": {} if saved == "no cases" else {first: {"full": reference.outputs[first]}}}, path)
        verdict = _parity_at_gate(spec, box, box.dir / "candidate.py", [], (reference, {}, {}))
    finally:
        box.close()
    assert verdict is not None and verdict.outcome is Outcome.INTEGRITY_FAILED
    assert "[output]" in verdict.reason, verdict.reason


def test_the_gate_is_not_written_through_a_link_the_candidate_planted(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("secret")
    box = tmp_path / "box"
    box.mkdir()
    (box / GATE_FILE).symlink_to(outside)
    (box / (GATE_FILE + ".tmp")).symlink_to(outside)  # the temporary name an earlier version used
    Gate(box / GATE_FILE, box / PROGRESS_FILE).open(False, {"small": 3})
    assert outside.read_text() == "secret"
    assert not (box / GATE_FILE).is_symlink()
    assert json.loads((box / GATE_FILE).read_text()) == {"proceed": False, "graph_calls": {"small": 3}}
    assert os.stat(box / GATE_FILE).st_mode & 0o044 == 0o044  # readable by a worker running as another uid


def test_the_gate_waits_for_a_claim_or_the_end_of_the_worker(tmp_path):
    gate = Gate(tmp_path / GATE_FILE, tmp_path / PROGRESS_FILE)
    (tmp_path / PROGRESS_FILE).write_text("parity\n")
    gate.worker_ended.set()
    assert gate.worker_waits() is False  # a worker that ended in parity: nothing to judge early
    gate = Gate(tmp_path / GATE_FILE, tmp_path / PROGRESS_FILE)
    (tmp_path / PROGRESS_FILE).write_text("timing\n")  # a phase past the gate claims it too
    assert gate.worker_waits() is True


@pytest.mark.parametrize("forged", ["[1]", '{"environment": "x"}', '"ok"'])
def test_a_result_file_not_of_the_workers_form_is_no_result(spec, forged):
    """A worker killed mid-case (by the stream, a limit or itself) leaves whatever its
    directory held as result.json: only a dict with a dict environment is read as a result."""
    from tik_agent.judge.workerbox import WorkerBox

    box = WorkerBox(spec, keep=False)
    try:
        (box.dir / RESULT_FILE).write_text(forged)
        assert box.result() is None
        (box.dir / RESULT_FILE).write_text('{"status": "ok", "environment": {"device": "cpu"}}')
        assert box.result() == {"status": "ok", "environment": {"device": "cpu"}}   # negative control
    finally:
        box.close()


@pytest.mark.slow
def test_a_streamed_name_that_is_not_a_file_ends_the_stream_quietly(spec, reference, tmp_path, caplog):
    """A directory (or a link) where a streamed case should be: the stream stops at once, with
    no warning per poll, and the verdict is left to the whole file."""
    import logging

    from tik_agent.judge.phases import PhaseWatch
    from tik_agent.judge.stream import ParityStream
    from tik_agent.judge.workerbox import WorkerBox
    from tik_agent.sandbox.worker import STREAM_FILE

    box = WorkerBox(spec, keep=False)
    try:
        (box.dir / STREAM_FILE.format(0)).mkdir()
        stream = ParityStream(spec, box, box.dir / "candidate.py", reference.cases, reference.outputs,
                              PhaseWatch(tmp_path / "progress", {}))
        with caplog.at_level(logging.WARNING):
            stream.start()
            stream._thread.join(timeout=10)
            assert not stream._thread.is_alive() and stream.stop() is False and stream.judged == 0
        assert not caplog.records
    finally:
        box.close()


@pytest.mark.slow
def test_a_directory_planted_where_a_case_streams_changes_nothing(options, reference, evaluate_kept):
    """plants_a_stream_dir.py makes parity-0001.pt a directory on its first call, and is wrong only
    above five rows: the worker's save there fails without blaming the kernel, the stream ends
    quietly, and the whole file gives the verdict, naming the first failing case."""
    verdict, phase, result, _ = evaluate_kept(CORPUS / "plants_a_stream_dir.py", options, streamed=True)
    first = next(c.id for c in reference.cases if c.m > 5)
    assert verdict.outcome is Outcome.PARITY_FAILED and verdict.reason.startswith(first + ": [parity]"), \
        verdict.reason
    assert len(verdict.cases) > len(reference.cases)   # judged whole, drawn cases included, not stopped early
    assert phase == "waiting" and result["status"] == "ok"   # stopped at the gate; the kernel was not blamed
