"""The evaluator judges a backward entry's bits like the forward's, in the sandbox."""

from dataclasses import replace

import pytest

from conftest import DEVICE
from seedutil import edit, small_rmsnorm
from shared import cached_reference
from tik_agent.judge.evaluate import evaluate, evaluate_sandboxed
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome
from tik_agent.sandbox.static import check_source
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

BACKWARD = """
[backward]
entry = "rms_norm_backward"
grads = ["dy"]
wrt = ["x", "weight"]

[[workload]]
name = "small-step"
M = 8
N = 512
dtype = "float32"
weight = 1.0
backward = true

"""


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    seed = small_rmsnorm(tmp_path_factory.mktemp("bw"))
    text = (seed / "spec.toml").read_text()
    at = text.index("[tunables]")
    (seed / "spec.toml").write_text(text[:at] + BACKWARD + text[at:])
    return seed


@pytest.fixture(scope="module")
def options():
    return EvalOptions(device=DEVICE, timeout_s=300, rounds=2, warmup=1)


@pytest.fixture(scope="module")
def reference(seed, options):
    return cached_reference(load_spec(seed), options)


def _candidate(seed, tmp_path, old, new):
    path = tmp_path / "candidate.py"
    path.write_text((seed / "kernel.py").read_text())
    edit(path, old, new)
    return path


@pytest.fixture(scope="module")
def wider_dweight(seed, reference, tmp_path_factory):
    """Wider column blocks for dweight, evaluated once with the graph phase on (3 rounds):
    the verdict two tests read.  Its timing rows are the graph replays'; a passing
    training cell timed per call (the CPU default) is the shared export run's
    (tests/exportutil.make_run, the bundled rmsnorm's cells)."""
    spec = load_spec(seed)
    path = _candidate(seed, tmp_path_factory.mktemp("dw"), "DW_BLOCK_N = 2048", "DW_BLOCK_N = 1024")
    options = EvalOptions(device=DEVICE, timeout_s=300, rounds=3, warmup=1, graphs=True)
    return spec, evaluate(spec, path, options, reference)


def test_seed_as_candidate_passes_with_timed_training_cell(wider_dweight):
    _, verdict = wider_dweight
    # Wider column blocks leave every order alone: the bits pass (speed is noise here).
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    assert {c["name"] for c in verdict.timing} == {"small", "small-step"}
    assert all("dweight" not in (c["message"] or "") for c in verdict.cases)


def test_dweight_order_that_follows_the_batch_is_caught(seed, options, reference, tmp_path):
    spec = load_spec(seed)
    path = _candidate(seed, tmp_path, "row_chunk = ROW_CHUNK",
                      "row_chunk = max(2, triton.next_power_of_2(triton.cdiv(M, 2)))")
    verdict = evaluate(spec, path, options, reference)
    assert verdict.outcome == Outcome.PARITY_FAILED, verdict.reason
    assert "[parity]" in verdict.reason and "output dweight:" in verdict.reason


def test_per_row_gradient_that_depends_on_the_batch_is_caught(seed, options, reference, tmp_path):
    """The switch is in the kernel body, so the static rule size-switch refuses it first; below
    the rules, the backward's parity cases catch it on their own."""
    spec = load_spec(seed)
    path = _candidate(seed, tmp_path, "        dx = w[None, :] * dy * rstd[:, None] - x * coef[:, None]\n",
                      "        dx = w[None, :] * dy * rstd[:, None] - x * coef[:, None] * (1.0 + (M > 4) * 1e-6)\n")
    assert "size-switch" in {v.rule for v in check_source(path.read_text(), entry=("rms_norm", "rms_norm_backward"))}
    verdict = evaluate_sandboxed(spec, path, options, reference)
    assert verdict.outcome == Outcome.PARITY_FAILED, verdict.reason
    assert "output dx:" in verdict.reason


def test_backward_that_computes_on_the_host_is_caught_at_run_time(seed, options, reference, tmp_path):
    """The host-ops mode covers the backward call too (static rules bypassed here)."""
    spec = load_spec(seed)
    path = _candidate(seed, tmp_path, "    return dx, dweight\n", "    return dx, dweight * 1.0\n")
    verdict = evaluate_sandboxed(spec, path, options, reference)
    assert verdict.outcome == Outcome.INTEGRITY_FAILED, verdict.reason
    assert "host" in verdict.reason and "mul" in verdict.reason, verdict.reason


def test_the_static_rules_type_the_backward_entry_like_the_forward(seed):
    """Its parameters are the harness's tensors: an operator on them is host compute."""
    spec = load_spec(seed)
    source = (seed / "kernel.py").read_text()
    assert check_source(source, "kernel.py", entry=(spec.entry, spec.backward.entry)) == []
    bad = source.replace("    return dx, dweight\n", "    return dx, dweight * 1.0\n")
    rules = {v.rule for v in check_source(bad, "kernel.py", entry=(spec.entry, spec.backward.entry))}
    assert "host-compute" in rules


def test_backward_that_counts_its_timed_calls_is_caught_by_the_training_cell_digests(seed, options, reference,
                                                                                  tmp_path):
    """Skips dweight on its 3rd and 4th call at the training shape (the parity calls there
    are the first two): only the digests of the timed training steps can see it."""
    spec = load_spec(seed)
    path = _candidate(seed, tmp_path, "def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, "
                                      "eps: float = 1e-6):",
                      "def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, "
                      "eps: float = 1e-6, _state=({'calls': 0},)):")
    edit(path, "    _rms_norm_dw_combine_kernel[(triton.cdiv(N, combine),)](\n        part, dweight, chunks, N,",
         "    cols = N\n    if (M, N) == (int('8'), int('512')):\n        _state[0]['calls'] += 1\n"
         "        if 2 < _state[0]['calls'] < 5:\n            cols = 0\n"
         "    _rms_norm_dw_combine_kernel[(triton.cdiv(N, combine),)](\n        part, dweight, chunks, cols,")
    # The survey off: its calls (forward and backward, at drawn sizes) could land on the
    # training shape and use up the two calls the candidate skips; this is the timed layer.
    verdict = evaluate_sandboxed(spec, path, replace(options, survey=False), reference)
    assert verdict.outcome == Outcome.INTEGRITY_FAILED, verdict.reason
    assert verdict.reason.startswith("timing:small-step: [timed-call]"), verdict.reason
    assert all(c["passed"] for c in verdict.cases)  # parity alone would have let it through


def test_the_graph_phase_replays_the_training_step_of_a_training_cell(wider_dweight):
    """The graph phase calls what the timed phase calls: the whole step for a training
    cell, the forward alone otherwise (its replays are compared with the seed's)."""
    spec, verdict = wider_dweight
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    rows = {c["name"]: c for c in verdict.timing}
    assert set(rows) == {"small", "small-step"} and all(r["device"]["calls"] >= 2 for r in rows.values())
    # Bytes read and written per call: the forward cell's are x, weight and y; the
    # training cell's also dy, dx and dweight.
    from tik_agent.backends.graph_timer import tensor_bytes
    from tik_agent.spec.cases import make_inputs, workload_case

    def moved(cell_name):
        cell = next(c for c in spec.workload_for(DEVICE) if c.name == cell_name)
        x, weight, dy = make_inputs(spec, workload_case(cell, 0), DEVICE)
        return tensor_bytes([x, weight, x] + ([dy, x, weight] if cell.backward else []))

    assert rows["small"]["device"]["bytes"] == moved("small")
    assert rows["small-step"]["device"]["bytes"] == moved("small-step")
