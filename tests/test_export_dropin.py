"""Drop-in installation: ``with pkg.enabled():`` routes a real torch module's calls
to the certified kernel, bit for bit, and only inside the block."""

from __future__ import annotations

import pytest

from exportutil import PACKAGE, shared_unpacked
from packageutil import render_package, run_fresh
from tik_agent.spec.seeds import BUNDLED_DIR

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.fixture(scope="module")
def rms_facts():
    return run_fresh(shared_unpacked(), f"""
        import json
        import torch
        import {PACKAGE} as pkg
        from {PACKAGE}.kernel import rms_norm, rms_norm_backward

        bits = lambda t: t.view(torch.int32)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.RMSNorm(40, eps=1e-6))
        x = torch.randn(2, 3, 24)
        facts = {{"enabled_before": pkg.is_enabled()}}
        h = model[0](x).detach().requires_grad_()
        stock = model[1](h)
        with pkg.enabled():
            facts["enabled_inside"] = pkg.is_enabled()
            routed = model[1](h)
            dy = torch.randn_like(routed)
            routed.backward(dy)
        direct = rms_norm(h.detach().reshape(-1, 40), model[1].weight.detach(), 1e-6).reshape(h.shape)
        dx, dw = rms_norm_backward(h.detach().reshape(-1, 40), model[1].weight.detach(), dy.reshape(-1, 40), 1e-6)
        facts["forward_same"] = torch.equal(bits(routed), bits(direct))
        facts["dx_same"] = torch.equal(bits(h.grad.reshape(-1, 40)), bits(dx))
        facts["dweight_same"] = torch.equal(bits(model[1].weight.grad), bits(dw))
        facts["enabled_after"] = pkg.is_enabled()
        after = model[1](h)
        facts["after_is_stock"] = torch.equal(bits(after), bits(stock))
        facts["stock_differs_from_kernel"] = not torch.equal(bits(stock), bits(direct))
        errors = []
        with pkg.enabled():
            for bad in (lambda: torch.nn.functional.rms_norm(h.double(), (40,), model[1].weight.double()),
                        lambda: torch.nn.functional.rms_norm(h, (40,))):
                try:
                    bad()
                    errors.append(None)
                except pkg.NotCertifiedError as exc:
                    errors.append(str(exc))
        facts["errors"] = errors
        print(json.dumps(facts))
    """)


def test_switch_is_on_inside_the_block_only(rms_facts):
    assert rms_facts["enabled_before"] is False and rms_facts["enabled_inside"] is True
    assert rms_facts["enabled_after"] is False


def test_routed_module_gives_the_kernels_bits_forward_and_backward(rms_facts):
    assert rms_facts["forward_same"] and rms_facts["dx_same"] and rms_facts["dweight_same"]


def test_outside_the_block_torch_runs_its_own_kernel(rms_facts):
    assert rms_facts["after_is_stock"]
    # Otherwise the check above could not tell routed from stock.
    assert rms_facts["stock_differs_from_kernel"]


def test_calls_outside_the_contract_raise_a_clear_error(rms_facts):
    dtype_error, weight_error = rms_facts["errors"]
    assert dtype_error and "torch.float64 is not certified" in dtype_error
    assert weight_error and "with a weight" in weight_error


def test_matmul_drop_in_routes_linear_forward_and_gradients(tmp_path):
    root, name = render_package(tmp_path, BUNDLED_DIR / "matmul")
    facts = run_fresh(root, f"""
        import json
        import torch
        import {name} as pkg
        from {name}.kernel import matmul, matmul_backward

        bits = lambda t: t.view(torch.int32)
        torch.manual_seed(0)
        layer = torch.nn.Linear(40, 24)
        x = torch.randn(7, 40, requires_grad=True)
        with pkg.enabled():
            y = layer(x)
            dy = torch.randn_like(y)
            y.backward(dy)
        w = layer.weight.detach()
        direct = matmul(x.detach(), w.t().contiguous()) + layer.bias.detach()
        dx, dwt = matmul_backward(x.detach(), w.t().contiguous(), dy)
        facts = {{"forward": torch.equal(bits(y), bits(direct)), "dx": torch.equal(bits(x.grad), bits(dx)),
                 "dw": torch.equal(bits(layer.weight.grad), bits(dwt.t().contiguous()))}}
        try:
            with pkg.enabled():
                layer.double()(x.double().detach())
        except pkg.NotCertifiedError as exc:
            facts["error"] = str(exc)
        print(json.dumps(facts))
    """)
    assert facts["forward"] and facts["dx"], facts
    assert facts["dw"], facts
    assert "float64 is not certified" in facts["error"]


def test_logprobs_drop_in_routes_the_log_softmax_gather_idiom(tmp_path):
    root, name = render_package(tmp_path, BUNDLED_DIR / "logprobs")
    facts = run_fresh(root, f"""
        import json
        import torch
        import torch.nn.functional as F
        import {name} as pkg
        from {name}.kernel import token_logprobs, token_logprobs_backward

        bits = lambda t: t.view(torch.int32)
        gen = torch.Generator().manual_seed(0)
        V = 2500  # two of the kernel's vocabulary chunks
        logits = (torch.randn(2, 3, V, generator=gen) * 4).requires_grad_()
        ids = torch.randint(0, V, (2, 3), generator=gen)
        dy = torch.randn(2, 3, generator=gen)
        stock = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        with pkg.enabled():
            inside = pkg.is_enabled()
            routed = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
            by_method = logits.log_softmax(-1).gather(dim=-1, index=ids[..., None]).squeeze(-1)
            by_f = torch.gather(F.log_softmax(logits, dim=-1, dtype=torch.float32), -1, ids[..., None]).squeeze(-1)
            other_dim = torch.log_softmax(logits, dim=0).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
            routed.backward(dy)
        flat = logits.detach().reshape(-1, V)
        direct = token_logprobs(flat, ids.reshape(-1)).reshape(2, 3)
        (dlogits,) = token_logprobs_backward(flat, ids.reshape(-1), dy.reshape(-1))
        after = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        stock_other = torch.log_softmax(logits, dim=0).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        facts = {{"inside": inside, "after_off": not pkg.is_enabled(),
                 "forward": torch.equal(bits(routed), bits(direct)),
                 "method": torch.equal(bits(by_method), bits(direct)), "functional": torch.equal(bits(by_f), bits(direct)),
                 "dlogits": torch.equal(bits(logits.grad.reshape(-1, V)), bits(dlogits)),
                 "other_dim_is_stock": torch.equal(bits(other_dim), bits(stock_other)),
                 "after_is_stock": torch.equal(bits(after), bits(stock)),
                 "stock_differs": not torch.equal(bits(stock), bits(direct))}}
        errors = []
        with pkg.enabled():
            for bad in (lambda: torch.log_softmax(logits.double(), -1).gather(-1, ids[..., None]),
                        lambda: torch.log_softmax(logits, -1).gather(-1, torch.stack([ids, ids], -1))):
                try:
                    bad()
                    errors.append(None)
                except pkg.NotCertifiedError as exc:
                    errors.append(str(exc))
        facts["errors"] = errors
        print(json.dumps(facts))
    """)
    assert facts["inside"] and facts["after_off"], facts
    assert facts["forward"] and facts["method"] and facts["functional"], facts
    assert facts["dlogits"], facts
    assert facts["other_dim_is_stock"] and facts["after_is_stock"], facts
    assert facts["stock_differs"], facts  # otherwise the checks above could not tell routed from stock
    dtype_error, shape_error = facts["errors"]
    assert dtype_error and "float64 is not certified" in dtype_error
    assert shape_error and "one id per row" in shape_error
