"""A wheel of a seed with several outputs (add_rmsnorm: y and new_residual): the op
returns both, verify() judges each on raw bits, autograd takes both gradients."""

from __future__ import annotations

import pytest

from packageutil import render_package, run_fresh
from seedutil import copy_seed, shrink_grid

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict:
    seed = copy_seed("add_rmsnorm", tmp_path_factory.mktemp("seed"))
    shrink_grid(seed, batch_sizes="[1, 3]", dims={"N": "[300]"})
    root, name = render_package(tmp_path_factory.mktemp("package"), seed)
    return run_fresh(root, f"""
        import json
        import torch
        from torch.library import opcheck
        import {name} as pkg
        from {name} import _cases, _verify
        from {name}.kernel import add_rms_norm, add_rms_norm_backward

        bits = lambda t: t.contiguous().view(torch.int32)
        report = pkg.verify()
        facts = {{"verify": report.passed, "verified": len(report.cases), "failures": report.failures[:3]}}

        # Negative controls: the second output alone follows the batch; one output instead of two.
        spec, certificate = _cases.load_spec(), _cases.load_certificate()
        case = next(c for c in _cases.certified_cases(certificate) if c.invariance and c.m > 1)
        def residual_follows_batch(x, residual, weight, eps=1e-6):
            y, s = add_rms_norm(x, residual, weight, eps)
            return y, (s if x.shape[0] == 1 else s * (1 + 2 ** -10))
        bad = _verify._check_case(spec, case, residual_follows_batch, add_rms_norm, "cpu")
        facts["control"] = [bad.passed, bad.failed, bad.message]
        one = _verify._check_case(spec, case, lambda *a, **k: add_rms_norm(*a, **k)[0], add_rms_norm, "cpu")
        facts["one_output"] = [one.passed, one.failed, one.message]

        op = getattr(torch.ops, "{name}").add_rms_norm
        bop = getattr(torch.ops, "{name}").add_rms_norm_backward
        gen = torch.Generator().manual_seed(5)
        x0, r0 = torch.randn(4, 300, generator=gen), torch.randn(4, 300, generator=gen)
        w0, dy, dr = torch.randn(300, generator=gen), torch.randn(4, 300, generator=gen), torch.randn(4, 300, generator=gen)
        direct = add_rms_norm(x0, r0, w0)
        through = op(x0, r0, w0)
        facts["op"] = [isinstance(through, tuple), len(through)] + [torch.equal(bits(a), bits(b)) for a, b in zip(through, direct)]
        x, r, w = (t.clone().requires_grad_() for t in (x0, r0, w0))
        y, s = op(x, r, w)
        torch.autograd.backward((y, s), (dy, dr))
        expected = add_rms_norm_backward(x0, r0, w0, dy, dr, 1e-6)
        facts["grads"] = [torch.equal(bits(g), bits(e)) for g, e in zip((x.grad, r.grad, w.grad), expected)]
        args = tuple(t.clone().requires_grad_() for t in (x0, r0, w0))
        facts["opcheck"] = {{**opcheck(op.default, args), **{{"bwd_" + k: v for k, v in opcheck(
            bop.default, (x0, r0, w0, dy, dr)).items()}}}}
        print(json.dumps(facts))
    """)


def test_verify_judges_both_outputs(facts):
    assert facts["verify"] and facts["verified"] > 0, facts["failures"]


def test_verify_catches_a_second_output_that_follows_the_batch(facts):
    passed, failed, message = facts["control"]
    assert not passed and failed == "invariance" and "new_residual" in message, facts["control"]


def test_verify_refuses_a_kernel_that_returns_one_output(facts):
    passed, failed, message = facts["one_output"]
    assert not passed and failed == "output" and "a tuple of 2 tensors" in message, facts["one_output"]


def test_the_op_returns_both_outputs_and_their_gradients_are_the_kernels(facts):
    assert facts["op"] == [True, 2, True, True], facts["op"]
    assert facts["grads"] == [True, True, True], facts["grads"]
    assert facts["opcheck"] and set(facts["opcheck"].values()) == {"SUCCESS"}, facts["opcheck"]
