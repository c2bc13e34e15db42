"""Negative controls: attention kernels that break prefill/decode parity must be
caught by check-seed and by eval, each for the reason it breaks."""

import pytest

from attention_seed import CONTROLS, apply_control, small_attention
from seedutil import copy_seed
from shared import cached_reference
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.bitcheck import Check
from tik_agent.outcomes import Outcome
from tik_agent.judge.seedcheck import check_seed
from tik_agent.spec.cases import parity_cases
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

# What the first failure says, per control (the invariance case is where
# prefill and decode meet; the reference catches reads of foreign data first).
EXPECTED = {
    "split-kv-decode": (Check.INVARIANCE, ("forward", "decoded alone")),
    "tile-follows-batch": (Check.INVARIANCE, ("alone vs the full batch",)),
    "separate-decode-path": (Check.INVARIANCE, ("alone",)),
    "reads-other-sequence": (None, ()),
    "padding-dependent": (None, ()),
}


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_check_seed_catches(tmp_path, device, name):
    seed = small_attention(tmp_path)
    apply_control(seed, name)
    spec = load_spec(seed)
    # The invariance case only (the parity cases run the same launch as its full batch).
    report = check_seed(spec, device, [c for c in parity_cases(spec) if c.invariance])
    assert not report.passed, f"{name} was not caught"
    failure = report.first_failure
    check, words = EXPECTED[name]
    if check is not None:
        assert failure.failed is check and any(w in failure.message for w in words), failure.message
    else:
        assert failure.failed in (Check.INVARIANCE, Check.REFERENCE, Check.DETERMINISM), failure.message


def test_the_small_seed_itself_passes(tmp_path, device):
    """The positive control for the tests above."""
    spec = load_spec(small_attention(tmp_path))
    assert check_seed(spec, device, [c for c in parity_cases(spec) if c.invariance]).passed


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    seed = small_attention(tmp_path_factory.mktemp("attention"))
    spec = load_spec(seed)
    options = EvalOptions(device="cpu", timeout_s=600, timing=False)
    return seed, spec, options, cached_reference(spec, options)


@pytest.mark.parametrize("name", ["split-kv-decode", "padding-dependent"])
def test_eval_rejects(small, tmp_path, name):
    seed, spec, options, reference = small
    candidate = apply_control(copy_seed("attention", tmp_path), name)
    verdict = evaluate(spec, candidate, options, reference=reference)
    assert verdict.outcome in (Outcome.PARITY_FAILED, Outcome.INTEGRITY_FAILED), verdict.reason
    assert "[invariance]" in verdict.reason or "[parity]" in verdict.reason or "[determinism]" in verdict.reason
