"""The domain corpus (tests/adversarial/domain, issue 21): kernels that were right on every
case the grid drew before and wrong on inputs the seed accepts, each rejected by the
domain case made for its class, and honest kernels accepted (negative controls).

Every file names its expected outcome and fragments of the reason (each must appear) on
its first line.
They are evaluated once, in one module-scoped batch, below the static rules
(``evaluate_sandboxed``: the run-time layer on its own) and without timing (each
class is about bits), except a file expected to be refused on its source
(``rejected_static``), which goes through ``evaluate`` and never runs: the rmsnorm files on the run-time corpus's spec, whose
reference is shared with tests/test_adversarial_runtime.py, the logprobs file on a
small logprobs spec.
"""

from pathlib import Path

import pytest

from seedutil import corpus_rmsnorm, small_logprobs
from shared import cached_reference
from tik_agent.judge.evaluate import evaluate, evaluate_sandboxed
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations under the interpreter

CORPUS = Path(__file__).parent / "adversarial" / "domain"
LOGPROBS_FILES = ("ignore_index_neighbour.py",)


def _expectation(path: Path) -> tuple[set[Outcome], list[str]]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path.name
    outcome, *fragments = first.removeprefix("# expect: ").split()
    return {Outcome(o) for o in outcome.split("_or_")} if "_or_" in outcome else {Outcome(outcome)}, fragments


@pytest.fixture(scope="module")
def options():
    from conftest import DEVICE

    return EvalOptions(device=DEVICE, timing=False)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, options):
    """Every corpus file's verdict, and the logprobs seed's as a control (honest_rows2.py is
    the rmsnorm one; tests/test_adversarial_runtime.py evaluates the rmsnorm seed on the same
    spec, domain cases included), evaluated once."""
    rows = load_spec(corpus_rmsnorm(tmp_path_factory.mktemp("rmsnorm")))
    logprobs = load_spec(small_logprobs(tmp_path_factory.mktemp("logprobs")))
    out = {}
    for spec, names in ((rows, [p.name for p in sorted(CORPUS.glob("*.py")) if p.name not in LOGPROBS_FILES]),
                        (logprobs, list(LOGPROBS_FILES))):
        reference = cached_reference(spec, options)
        fixed = {c.id: c.origin for c in evaluation_cases(spec, options.device)}
        for name in names:
            static = Outcome.REJECTED_STATIC in _expectation(CORPUS / name)[0]
            judge = evaluate if static else evaluate_sandboxed
            out[name] = (judge(spec, CORPUS / name, options, reference), fixed)
    out["logprobs seed"] = (evaluate_sandboxed(logprobs, logprobs.source, options, cached_reference(logprobs, options)),
                            {c.id: c.origin for c in evaluation_cases(logprobs, options.device)})
    return out


def test_every_class_of_the_issue_has_a_file_with_its_expectation():
    names = {p.name for p in CORPUS.glob("*.py")}
    assert {"nonbatch_switch.py", "transposed_unit_stride.py", "mixed_weight_rounding.py", "unaligned_switch.py",
            "ignore_index_neighbour.py", "ignored_eps.py", "rms_band_shortcut.py", "int32_offsets.py",
            "int32_offsets_copied.py", "honest_rows2.py"} <= names
    for name in names:
        _expectation(CORPUS / name)


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.py")))
def test_each_file_gets_its_stated_verdict_from_a_domain_case(verdicts, name):
    verdict, fixed = verdicts[name]
    outcomes, fragments = _expectation(CORPUS / name)
    assert verdict.outcome in outcomes, verdict.reason
    if verdict.outcome is Outcome.PASSED:
        assert any(fixed[c["case"]] == "domain" for c in verdict.cases if c["case"] in fixed)
        assert all(c["passed"] for c in verdict.cases)
        return
    assert all(f in verdict.reason for f in fragments), verdict.reason
    if verdict.outcome is Outcome.REJECTED_STATIC:
        assert not verdict.cases   # refused on its source: nothing ran
        return
    case = verdict.reason.split(": ")[0]
    assert fixed.get(case) == "domain", verdict.reason   # a fixed case of the domain's axes caught it
    # Every case the grid had before domains passed: only the domain's axis tells it apart.
    assert all(c["passed"] for c in verdict.cases if fixed.get(c["case"], "domain") != "domain"), verdict.reason


def test_the_logprobs_seed_passes_every_domain_case(verdicts):
    verdict, fixed = verdicts["logprobs seed"]
    assert verdict.outcome is Outcome.PASSED, verdict.reason
    domain = [c for c in verdict.cases if fixed.get(c["case"]) == "domain"]
    assert domain and all(c["passed"] for c in domain)


def test_a_worker_that_faults_on_a_huge_view_names_the_case(verdicts):
    """int32_offsets.py either faults (the worker dies; the verdict names the case it was
    running) or reads other memory (parity): either way the huge view's case is named."""
    verdict, _ = verdicts["int32_offsets.py"]
    assert verdict.reason.startswith("par:M=3,N=256:bfloat16:normal:s0:huge-rows:x: "), verdict.reason
    if verdict.outcome is Outcome.CRASHED:
        assert "the worker died (signal" in verdict.reason
