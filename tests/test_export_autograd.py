"""The exported op's autograd: the certified backward entry, through torch.ops, the
package's function, opcheck, a float64 gradient check and torch.compile; and a
package whose seed has no backward entry, which refuses a call that needs a gradient."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exportutil import PACKAGE, shared_unpacked
from packageutil import render_package, run_fresh
from seedutil import copy_seed, edit

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
        from {PACKAGE}.kernel import rms_norm, rms_norm_backward

        op = torch.ops.{PACKAGE}.rms_norm
        bop = torch.ops.{PACKAGE}.rms_norm_backward
        bits = lambda t: t.view(torch.int32)
        gen = torch.Generator().manual_seed(3)
        x0, w0, dy = torch.randn(5, 40, generator=gen), torch.randn(40, generator=gen), torch.randn(5, 40, generator=gen)
        expected = rms_norm_backward(x0, w0, dy, 1e-6)
        facts = {{}}

        def grads(fn):
            x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
            out = fn(x, w)
            if out.grad_fn is None:  # the gradient was dropped: nothing to run backward through
                return [False, False]
            out.backward(dy)
            return [torch.equal(bits(x.grad), bits(expected[0])), torch.equal(bits(w.grad), bits(expected[1]))]

        facts["eager"] = grads(op)
        facts["package_function"] = grads(pkg.rms_norm)
        facts["kernel_file_control"] = grads(rms_norm)  # the launcher itself carries no gradient
        with torch.no_grad():
            quiet = pkg.rms_norm(x0.clone().requires_grad_(), w0)
        facts["no_grad"] = [quiet.requires_grad, torch.equal(bits(quiet), bits(rms_norm(x0, w0)))]
        facts["compiled"] = grads(torch.compile(lambda x, w: op(x, w) * 1.0, backend="aot_eager", fullgraph=True))
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        facts["opcheck_forward"] = {{k: v for k, v in opcheck(op.default, (x, w)).items()}}
        facts["opcheck_backward"] = {{k: v for k, v in opcheck(bop.default, (x0, w0, dy)).items()}}
        # float64 in and out; the kernel's math is fp32, which sets eps and the tolerances.  float64
        # lies outside the certified domain, so the op would refuse it: the check of the gradient's
        # wiring runs with the domain check lifted (the certificate's domain, not the math, is what
        # tests/test_export_domain.py checks).
        certified, pkg._domain.DOMAIN = pkg._domain.DOMAIN, None
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
        pkg._domain.DOMAIN = certified
        try:
            op(x64, w64)
            facts["float64_refused"] = False
        except pkg.NotCertifiedError:
            facts["float64_refused"] = True
        print(json.dumps(facts))
    """)


def test_backward_through_the_op_gives_the_kernels_bits(facts):
    assert facts["eager"] == [True, True]


@pytest.mark.slow
def test_the_package_function_carries_the_certified_gradient(facts):
    """``pkg.rms_norm`` goes through the op: x.grad and weight.grad are the backward entry's bits."""
    assert facts["package_function"] == [True, True]
    # Control: the kernel file's launcher, which the package once exported as is, drops it.
    assert facts["kernel_file_control"] == [False, False]
    assert facts["no_grad"] == [False, True]


def test_backward_under_torch_compile_gives_the_same_bits(facts):
    assert facts["compiled"] == [True, True]


def test_opcheck_passes_for_the_op_with_gradients_and_for_the_backward_op(facts):
    assert facts["opcheck_forward"] and all(v == "SUCCESS" for v in facts["opcheck_forward"].values())
    assert "test_autograd_registration" in facts["opcheck_forward"]
    assert all(v == "SUCCESS" for v in facts["opcheck_backward"].values())


def test_float64_gradient_check(facts):
    assert facts["float64_refused"] is True   # outside the certified domain: refused once it is back
    assert facts["gradcheck"] is True
    assert facts["gradcheck_control"] is False, "a 1% wrong dx should fail the gradient check"


def forward_only_seed(dest: Path) -> Path:
    """A user's seed with no backward entry: the rmsnorm copy without its [backward] table and
    training cells, under another name (so no drop-in kind claims it)."""
    seed = copy_seed("rmsnorm", dest)
    text = (seed / "spec.toml").read_text()
    text = text[: text.index("[backward]")] + text[text.index("[tunables]"):]
    # Each [[workload]] cell up to the next table; the tables after the cells ([tunables],
    # [domain]) stay.
    cells = re.compile(r"\[\[workload\]\]\n(?:[^\[\n].*\n|\n)*")
    text = cells.sub(lambda m: "" if "backward = true" in m.group(0) else m.group(0), text)
    (seed / "spec.toml").write_text(text)
    edit(seed / "spec.toml", 'name = "rmsnorm"', 'name = "rmsfwd"')
    return seed


@pytest.fixture(scope="module")
def forward_only(tmp_path_factory) -> dict:
    seed = forward_only_seed(tmp_path_factory.mktemp("seed"))
    root, name = render_package(tmp_path_factory.mktemp("package"), seed)
    return run_fresh(root, f"""
        import json
        import torch
        import {name} as pkg
        from {name}.kernel import rms_norm

        bits = lambda t: t.view(torch.int32)
        gen = torch.Generator().manual_seed(3)
        x0, w0 = torch.randn(5, 40, generator=gen), torch.randn(40, generator=gen)
        expected = rms_norm(x0, w0)
        facts = {{"name": "{name}"}}
        x, w = x0.clone().requires_grad_(), w0.clone()
        try:
            out = pkg.rms_norm(x, w)
            facts["needs_grad"] = ["returned", out.grad_fn is not None]
        except pkg.NotCertifiedError as exc:
            facts["needs_grad"] = ["raised", str(exc)]
        facts["is_runtime_error"] = issubclass(pkg.NotCertifiedError, RuntimeError)
        with torch.no_grad():
            quiet = pkg.rms_norm(x, w)
        facts["no_grad"] = [quiet.requires_grad, torch.equal(bits(quiet), bits(expected))]
        plain = pkg.rms_norm(x0, w0)
        facts["plain"] = [plain.requires_grad, torch.equal(bits(plain), bits(expected))]
        # The op itself refuses the same call at once, not at a later backward().
        try:
            out = getattr(torch.ops, "{name}").rms_norm(x, w)
            facts["op_needs_grad"] = ["returned", out.grad_fn is not None]
        except pkg.NotCertifiedError as exc:
            facts["op_needs_grad"] = ["raised", str(exc)]
        with torch.no_grad():
            facts["op_no_grad"] = torch.equal(bits(getattr(torch.ops, "{name}").rms_norm(x, w)), bits(expected))
        print(json.dumps(facts))
    """)


@pytest.mark.slow
def test_without_a_certified_backward_a_call_that_needs_a_gradient_is_refused(forward_only):
    kind, message = forward_only["needs_grad"]
    assert kind == "raised", forward_only["needs_grad"]
    name = forward_only["name"]
    assert f"{name}.rms_norm" in message and "no backward was certified" in message, message
    assert forward_only["is_runtime_error"]
    kind, message = forward_only["op_needs_grad"]
    assert kind == "raised" and "no backward was certified" in message, forward_only["op_needs_grad"]


@pytest.mark.slow
def test_without_a_certified_backward_calls_that_need_no_gradient_run(forward_only):
    # Control for the refusal above: it is about the gradient, not the call.
    assert forward_only["no_grad"] == [False, True]
    assert forward_only["plain"] == [False, True]
    assert forward_only["op_no_grad"] is True
