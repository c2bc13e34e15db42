"""The run-time corpus (tests/adversarial/runtime): timing cheats and grid gaps, each
rejected by the run-time check made for it, with the static rules bypassed.

Every file there names its expected outcome on its first line.  The files are
evaluated through ``evaluate_sandboxed`` (everything below the static rules),
because the static rules may stop some of them first and this suite proves the
run-time layer on its own.  The spec is the small rmsnorm grid with a second
timing cell (M=5, N=384) that no parity case uses.
"""

import time
from dataclasses import replace
from pathlib import Path

import pytest

from seedutil import corpus_rmsnorm
from shared import cached_reference
from tik_agent.judge import phases
from tik_agent.judge.evaluate import evaluate_sandboxed
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

CORPUS = Path(__file__).parent / "adversarial" / "runtime"


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return load_spec(corpus_rmsnorm(tmp_path_factory.mktemp("seed")))


@pytest.fixture(scope="module")
def options():
    from conftest import DEVICE

    # The survey is off: this suite proves the run-time layer on its own.  Its
    # call counters would otherwise meet the survey's calls first (count_jit_state's
    # per-shape constexpr is refused there; hang_when_timed hangs there).
    return EvalOptions(device=DEVICE, rounds=3, warmup=1, survey=False)


@pytest.fixture(scope="module")
def reference(spec, options):
    return cached_reference(spec, options)


def _origin(spec, device, case_id: str) -> str:
    return next(c.origin for c in evaluation_cases(spec, device) if c.id == case_id)


def test_every_corpus_file_states_its_expectation():
    files = sorted(CORPUS.glob("*.py"))
    assert len(files) >= 8
    for f in files:
        assert f.read_text().startswith("# expect: "), f.name


def test_the_honest_seed_passes_every_timed_call_check(spec, options, reference):
    """Negative control: the checks below must not reject a kernel that keeps its bits."""
    verdict = evaluate_sandboxed(spec, spec.source, options, reference)
    # Every timed-call check runs for a "slower" verdict too: on a busy machine the seed against
    # itself may come out slower (1.40x at 31% noise once, under load); any check's failure is
    # another outcome.
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    assert verdict.speedup is not None and len(verdict.timing) == 2
    assert len(verdict.cases) > len(reference.cases)  # the drawn and literal cases ran too
    domain = {c.id for c in reference.cases if c.origin == "domain"}
    assert domain and domain <= {c["case"] for c in verdict.cases}   # every domain case, passed (the corpus's control)


@pytest.mark.parametrize("name", ["count_default_container.py", "count_jit_state.py"])
def test_call_counting_cheat_is_an_integrity_failure(spec, options, reference, name):
    if options.device != "cpu" and name == "count_jit_state.py":
        pytest.skip("a @triton.jit body runs as Python only under the CPU interpreter")
    verdict = evaluate_sandboxed(spec, CORPUS / name, options, reference)
    assert verdict.outcome is Outcome.INTEGRITY_FAILED, verdict.reason
    assert "timing:small: [timed-call]" in verdict.reason and "of cell small" in verdict.reason
    assert "differs from the seed" in verdict.reason and verdict.speedup is None
    assert all(c["passed"] for c in verdict.cases)  # parity alone would have let it through


def test_shape_detection_is_caught_at_the_timing_shape(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "shape_detect.py", options, reference)
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert verdict.reason.startswith("timing:tiny: [parity] all"), verdict.reason
    assert all(c["passed"] for c in verdict.cases)


def test_chunk_switch_above_the_grid_is_caught_by_an_above_grid_case(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "chunk_above_grid.py", options, reference)
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    case_id = verdict.reason.split(": [")[0]
    assert _origin(spec, options.device, case_id) == "above-grid", verdict.reason
    assert "[invariance]" in verdict.reason or "[parity]" in verdict.reason


def test_switch_on_a_literal_is_caught_by_the_sizes_around_it(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "literal_switch.py", options, reference)
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert verdict.reason.split(":M=")[1].split(",")[0] in ("41", "42"), verdict.reason
    failed = next(c for c in verdict.cases if not c["passed"])
    assert failed["case"] not in {c.id for c in reference.cases}  # not a fixed case: one added for the literal


def test_a_literal_passed_as_a_launch_keyword_is_caught_by_the_sizes_around_it(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "literal_kwarg.py", options, reference)
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert verdict.reason.split(":M=")[1].split(",")[0] in ("300", "301"), verdict.reason
    failed = next(c for c in verdict.cases if not c["passed"])
    assert failed["case"] not in {c.id for c in reference.cases}  # a case added for the keyword's 300


def test_a_kernel_that_takes_the_width_for_the_row_stride_is_caught_by_a_padded_sub_batch(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "row_stride.py", options, reference)
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert "[invariance] sub-batch (rows of a wider buffer)" in verdict.reason, verdict.reason


def test_a_literal_too_large_to_test_is_refused(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "literal_too_large.py", options, reference)
    assert verdict.outcome is Outcome.REJECTED_STATIC
    assert "[grid-literal] compares with 100000" in verdict.reason and "8193" in verdict.reason


def test_a_hang_in_the_timing_phase_is_killed_with_its_phase_named(spec, options, reference, monkeypatch):
    monkeypatch.setattr(phases, "FLOOR_S", 8.0)
    monkeypatch.setattr(phases, "FACTOR", 4.0)
    start = time.monotonic()
    verdict = evaluate_sandboxed(spec, CORPUS / "hang_when_timed.py", options, reference)
    assert verdict.outcome is Outcome.TIMEOUT, verdict.reason
    assert "the timing phase ran past its" in verdict.reason, verdict.reason
    assert time.monotonic() - start < 200


def test_the_request_is_gone_before_the_candidate_loads(spec, options, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "read_request.py", replace(options, timing=False),
                                 reference)
    assert verdict.passed, verdict.reason  # it raises at import if request.json is still there


def _not_full_here() -> bool:
    import os
    import shutil

    from tik_agent.sandbox import isolation

    return (isolation.best().report().level != "full" and shutil.which("bwrap") is None
            and os.environ.get("CI") != "true")


@pytest.mark.skipif(_not_full_here(), reason="no full isolation here: the sandbox's filesystem boundary is absent")
def test_the_audit_cache_is_out_of_a_candidates_reach(spec, options, reference, tmp_path):
    """A forged entry in the seed-audit cache would certify the next run's seed unseen: the
    candidate, told the real cache directories, writes into none of them."""
    from tik_agent.judge.auditcache import cache_root

    dirs = [str(cache_root()), str(Path.home() / ".cache" / "tik-agent")]
    for d in dirs:
        Path(d).mkdir(parents=True, exist_ok=True)
    before = {d: sorted(p.name for p in Path(d).iterdir()) for d in dirs}
    source = (CORPUS / "forge_audit_cache.py").read_text()
    candidate = tmp_path / "forge_audit_cache.py"
    candidate.write_text(source.replace("CACHE_DIRS = []", f"CACHE_DIRS = {dirs!r}"))
    verdict = evaluate_sandboxed(spec, candidate, replace(options, timing=False), reference)
    assert verdict.passed, verdict.reason  # it raises at import if any write went through
    assert {d: sorted(p.name for p in Path(d).iterdir()) for d in dirs} == before
    # Negative control: the same import, unsandboxed and aimed at a directory of the test's, writes.
    prelude = source[:source.index("@triton.jit")]
    guesses = next(line for line in prelude.splitlines() if line.startswith("_GUESSES = "))
    aimed = prelude.replace(guesses, f"_GUESSES = [{str(tmp_path / 'cache')!r}]")
    with pytest.raises(RuntimeError, match="wrote a forged audit"):
        exec(compile(aimed, "forge_audit_cache.py", "exec"), {})
    assert (tmp_path / "cache" / "forged" / "record.json").is_file()


@pytest.mark.skipif(_not_full_here(), reason="no full isolation here: the sandbox's process boundary is absent")
def test_the_seeds_fork_server_is_out_of_a_candidates_reach(spec, options, reference):
    """With a fork server running for this process, a candidate that looks for it to hand it a
    job of its own (its file run as a seed, outside the sandbox) finds none of its pipes."""
    from tik_agent.sandbox import forkserver

    if not forkserver.enabled(options.device):
        pytest.skip("no fork server on this device")
    server = forkserver._server()
    assert server is not None and not server.dead
    verdict = evaluate_sandboxed(spec, CORPUS / "reach_the_forkserver.py",
                                 replace(options, timing=False), reference)
    assert verdict.passed, verdict.reason  # it raises at import if it opened a write end of a server pipe
    # Negative control: the same probe, unsandboxed, finds this process's server and opens its pipe.
    source = (CORPUS / "reach_the_forkserver.py").read_text()
    with pytest.raises(RuntimeError, match=f"pipes are writable: .*'{server.proc.pid}/"):
        exec(compile(source[:source.index("@triton.jit")], "reach_the_forkserver.py", "exec"), {})


def test_a_finalizer_left_in_a_cycle_does_not_run_in_the_seeds_timed_calls(spec, options, reference):
    """gc_finalizer.py leaves about a second of CPU work in a cyclic generator after each
    call of the tiny cell; without the collector paused inside timed regions it runs in
    the seed's next timed call (rounds 1 and 3 of 3), and the seed's median there takes
    the second."""
    verdict = evaluate_sandboxed(spec, CORPUS / "gc_finalizer.py", options, reference)
    # Its bits are honest; whether its own (noisy) time comes out faster or slower is not the point.
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    tiny = next(c for c in verdict.timing if c["name"] == "tiny")
    assert tiny["seed"]["median_ms"] < 500, tiny  # the honest seed takes tens of ms at M=5, N=384
