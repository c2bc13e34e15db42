"""The fused residual-add RMSNorm seed: two outputs, each correct and bit-stable."""

import pytest
import torch

from bitassert import assert_same_bits
from tik_agent.sandbox.harness import load_kernel
from tik_agent.spec.cases import Case, make_inputs, parity_cases
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

SPEC = load_spec(BUNDLED_DIR / "add_rmsnorm")


@pytest.fixture(scope="module")
def kernel():
    return load_kernel(SPEC.source, "test")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("n", [1000, 2100])
def test_outputs_match_an_add_then_a_norm(kernel, dtype, n):
    x, residual, weight = make_inputs(SPEC, Case(5, {"N": n}, dtype, "normal", 0))[:3]  # then dy, dnew_residual
    y, new_residual = kernel.add_rms_norm(x, residual, weight)
    # fp32 and fp16 stores round like torch under the interpreter: the sum's bits are torch's.
    assert_same_bits((x.float() + residual.float()).to(x.dtype), new_residual, "new_residual")
    s = x.double() + residual.double()
    expected = s * torch.rsqrt(s.pow(2).mean(dim=1, keepdim=True) + 1e-6) * weight.double()
    tol = 1e-5 if dtype == "float32" else 4e-3
    assert torch.allclose(y.double(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows", [2, 4, 16])
def test_rows_per_program_keep_both_outputs(kernel, dtype, rows, monkeypatch):
    """inf - inf and inf * 0 appear in the special regime: their NaNs are canonical."""
    inputs = make_inputs(SPEC, Case(7, {"N": 1000}, dtype, "special", 0))[:3]
    seed = kernel.add_rms_norm(*inputs)
    monkeypatch.setattr(kernel, "ROWS_PER_PROGRAM", rows)
    for name, a, b in zip(("y", "new_residual"), seed, kernel.add_rms_norm(*inputs)):
        assert_same_bits(a, b, f"{name} with ROWS_PER_PROGRAM={rows}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name, value", [("BWD_ROWS_PER_PROGRAM", 1), ("BWD_ROWS_PER_PROGRAM", 16),
                                         ("DW_BLOCK_N", 128), ("DW_BLOCK_N", 1024),
                                         ("DW_COMBINE_N", 128), ("DW_COMBINE_N", 32)])
def test_backward_work_distribution_keeps_every_gradient(kernel, dtype, name, value, monkeypatch):
    """Rows per dx program and columns per dweight program only distribute the work,
    NaNs from the special regime included."""
    inputs = make_inputs(SPEC, Case(7, {"N": 1000}, dtype, "special", 0))
    seed = kernel.add_rms_norm_backward(*inputs)
    monkeypatch.setattr(kernel, name, value)
    for grad, a, b in zip(("dx", "dresidual", "dweight"), seed, kernel.add_rms_norm_backward(*inputs)):
        assert_same_bits(a, b, f"{grad} with {name}={value}")


STORE = "        tl.store(s_rows + c[None, :], s, mask=mask)\n"
# The second output alone follows the batch: y is untouched, new_residual is not.
BATCH_VARIANT_RESIDUAL = "        tl.store(s_rows + c[None, :], (s.to(tl.float32) * (1.0 + 0.01 * (M > 1))).to(s_ptr.dtype.element_ty), mask=mask)\n"


def _small(tmp_path):
    from seedutil import copy_seed, shrink_grid

    seed = copy_seed("add_rmsnorm", tmp_path)
    shrink_grid(seed, batch_sizes="[1, 3]", dims={"N": "[1000]"})
    return seed


def test_check_seed_catches_a_batch_variant_second_output(tmp_path, device):
    from seedutil import edit
    from tik_agent.judge.bitcheck import Check
    from tik_agent.judge.seedcheck import check_seed

    seed = _small(tmp_path)
    edit(seed / "kernel.py", STORE, BATCH_VARIANT_RESIDUAL)
    spec = load_spec(seed)
    report = check_seed(spec, device, [c for c in parity_cases(spec) if c.invariance][:1])
    failure = report.first_failure
    assert failure is not None and failure.failed is Check.INVARIANCE
    assert "output new_residual" in failure.message, failure.message


def test_eval_judges_the_second_output_on_its_own_bits(tmp_path):
    from seedutil import copy_seed, edit
    from shared import cached_reference
    from tik_agent.judge.evaluate import evaluate
    from tik_agent.judge.options import EvalOptions
    from tik_agent.outcomes import Outcome

    spec = load_spec(_small(tmp_path / "seed"))
    candidate = copy_seed("add_rmsnorm", tmp_path / "candidate") / "kernel.py"
    # Zeros of the stored sum change sign: equal values, other bits, in the second output only.
    edit(candidate, STORE, "        tl.store(s_rows + c[None, :], tl.where(s == 0, -s, s), mask=mask)\n")
    options = EvalOptions(device="cpu", timeout_s=600, timing=False)
    # Given the reference, the worker stops at the first case that fails (the stream), as
    # an optimize run's evaluations do; the reason is the same per-case judgement.
    verdict = evaluate(spec, candidate, options, cached_reference(spec, options))
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert "output new_residual" in verdict.reason and "output y" not in verdict.reason, verdict.reason
