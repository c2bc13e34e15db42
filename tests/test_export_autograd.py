"""The exported op's autograd: the certified backward entry, through torch.ops,
opcheck, a float64 gradient check and torch.compile."""

from __future__ import annotations

import pytest

from exportutil import PACKAGE, shared_unpacked
from packageutil import run_fresh

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.fixture(scope="module")
def unpacked():
    return shared_unpacked()


@pytest.fixture(scope="module")
def facts(unpacked) -> dict:
    return run_fresh(unpacked, f"""
        import json
        import torch
        from torch.library import opcheck
        import {PACKAGE} as pkg
        from {PACKAGE}.kernel import rms_norm_backward

        op = torch.ops.{PACKAGE}.rms_norm
        bop = torch.ops.{PACKAGE}.rms_norm_backward
        bits = lambda t: t.view(torch.int32)
        gen = torch.Generator().manual_seed(3)
        x0, w0, dy = torch.randn(5, 40, generator=gen), torch.randn(40, generator=gen), torch.randn(5, 40, generator=gen)
        expected = rms_norm_backward(x0, w0, dy, 1e-6)
        facts = {{}}

        def grads(fn):
            x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
            fn(x, w).backward(dy)
            return [torch.equal(bits(x.grad), bits(expected[0])), torch.equal(bits(w.grad), bits(expected[1]))]

        facts["eager"] = grads(op)
        facts["compiled"] = grads(torch.compile(lambda x, w: op(x, w) * 1.0, backend="aot_eager", fullgraph=True))
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        facts["opcheck_forward"] = {{k: v for k, v in opcheck(op.default, (x, w)).items()}}
        facts["opcheck_backward"] = {{k: v for k, v in opcheck(bop.default, (x0, w0, dy)).items()}}
        # float64 in and out; the kernel's math is fp32, which sets eps and the tolerances.
        x64 = torch.randn(3, 8, dtype=torch.float64, generator=gen, requires_grad=True)
        w64 = torch.randn(8, dtype=torch.float64, generator=gen, requires_grad=True)
        facts["gradcheck"] = torch.autograd.gradcheck(lambda x, w: op(x, w), (x64, w64), eps=1e-3, atol=2e-3, rtol=2e-3)
        # Negative control: a backward 1% off in dx must fail the same check.
        class Off(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                return op(x, w)

            @staticmethod
            def backward(ctx, g):
                dx, dw = bop(*ctx.saved_tensors, g)
                return dx * 1.01, dw

        facts["gradcheck_control"] = torch.autograd.gradcheck(Off.apply, (x64, w64), eps=1e-3, atol=2e-3, rtol=2e-3,
                                                               raise_exception=False)
        print(json.dumps(facts))
    """)


def test_backward_through_the_op_gives_the_kernels_bits(facts):
    assert facts["eager"] == [True, True]


def test_backward_under_torch_compile_gives_the_same_bits(facts):
    assert facts["compiled"] == [True, True]


def test_opcheck_passes_for_the_op_with_gradients_and_for_the_backward_op(facts):
    assert facts["opcheck_forward"] and all(v == "SUCCESS" for v in facts["opcheck_forward"].values())
    assert "test_autograd_registration" in facts["opcheck_forward"]
    assert all(v == "SUCCESS" for v in facts["opcheck_backward"].values())


def test_float64_gradient_check(facts):
    assert facts["gradcheck"] is True
    assert facts["gradcheck_control"] is False, "a 1% wrong dx should fail the gradient check"
