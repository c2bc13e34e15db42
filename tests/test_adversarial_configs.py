"""The configuration corpus (tests/adversarial/configs, issue 21 item 3): launchers that
switch at sizes no case of the grid, the literals or the domain draws, each refused or
caught by the configuration survey (tik_agent.judge.configs), and an honest heuristic
accepted with its changes judged (the negative control).

Every file passes the static rules and goes through ``evaluate`` whole, without timing
(each is about bits), on the run-time corpus's spec, whose reference is shared.  The
first line of each file names the expected outcome and fragments of the reason.
"""

from pathlib import Path

import pytest

from seedutil import corpus_rmsnorm
from shared import cached_reference
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome
from tik_agent.sandbox.static import check_source
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations under the interpreter

CORPUS = Path(__file__).parent / "adversarial" / "configs"
NAMES = sorted(p.name for p in CORPUS.glob("*.py"))


def _expectation(path: Path) -> tuple[Outcome, list[str]]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path.name
    outcome, *fragments = first.removeprefix("# expect: ").split(" ", 1)
    return Outcome(outcome), fragments


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return load_spec(corpus_rmsnorm(tmp_path_factory.mktemp("rmsnorm")))


@pytest.fixture(scope="module")
def verdicts(spec):
    from conftest import DEVICE

    options = EvalOptions(device=DEVICE, timing=False)
    reference = cached_reference(spec, options)
    return {name: evaluate(spec, CORPUS / name, options, reference) for name in NAMES}


def test_the_corpus_holds_each_kind_of_switch():
    assert {"sparse_batch_switch.py", "rare_batch_switch.py", "rare_width_switch.py", "beyond_judged_batch.py",
            "catches_a_failing_launch.py", "honest_rows_heuristic.py", "joint_switch.py", "long_string_switch.py",
            "numel_flag_switch.py", "cand_chunks.py", "far_narrow_line.py"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_file_passes_the_static_rules(name):
    """So that what stops it is the survey, not its source."""
    assert check_source((CORPUS / name).read_text(), name, entry=("rms_norm", "rms_norm_backward")) == []


@pytest.mark.parametrize("name", NAMES)
def test_each_file_gets_its_stated_verdict_from_the_survey(verdicts, name):
    verdict = verdicts[name]
    outcome, fragments = _expectation(CORPUS / name)
    assert verdict.outcome is outcome, verdict.reason
    config = [c for c in verdict.cases if c["params"]["origin"] == "config"]
    if outcome is Outcome.PASSED:
        assert config and all(c["passed"] for c in verdict.cases)  # its changes were judged, and held
        return
    assert all(f in verdict.reason for f in fragments), verdict.reason
    if outcome is Outcome.PARITY_FAILED:
        failed = [c for c in verdict.cases if not c["passed"]]
        assert failed and all(c["params"]["origin"] == "config" for c in failed), verdict.reason
        # Every case the grid had before passed: only the survey's case tells it apart.
        assert all(c["passed"] for c in verdict.cases if c["params"]["origin"] != "config")
    elif outcome is Outcome.INTEGRITY_FAILED:
        assert verdict.reason.startswith("[config] "), verdict.reason


def test_without_the_survey_the_rare_switch_passes(spec):
    """The negative control of the survey itself: the same evaluation with it off accepts
    the rare batch switch, which is wrong at M = 1000."""
    from conftest import DEVICE

    options = EvalOptions(device=DEVICE, timing=False, survey=False)
    verdict = evaluate(spec, CORPUS / "rare_batch_switch.py", options, cached_reference(spec, options))
    assert verdict.outcome is Outcome.PASSED, verdict.reason
