"""The attention seed's backward (dq, dk_cache, dv_cache) is judged on raw bits like
its forward: dq per token in every launch, dk/dv per cache slot wherever its
sequence has the same chunk, zeros where no sequence owns a slot."""

from dataclasses import replace

import pytest

from attention_seed import BACKWARD_CONTROLS, apply_backward_control, small_attention_backward
from shared import cached_reference
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.bitcheck import Check
from tik_agent.outcomes import Outcome
from tik_agent.judge.seedcheck import check_seed
from tik_agent.spec.cases import parity_cases
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

EXPECTED = {
    "dkdv-block-follows-batch": "cache slots of sequence",
    "dq-tile-follows-batch": "alone vs the full batch",
    "unowned-slots-nonzero": "no sequence owns",
}


def _invariance_cases(spec):
    return [c for c in parity_cases(spec) if c.invariance]


def test_the_spec_declares_the_gradients_the_issue_names():
    from tik_agent.spec.seeds import BUNDLED_DIR

    spec = load_spec(BUNDLED_DIR / "attention")
    assert [o.name for o in spec.checked_outputs] == ["output", "dq", "dk_cache", "dv_cache"]
    assert [i.role for i in spec.checked_inputs][-1] == "tokens"  # do, generated per token
    assert any(c.backward for c in spec.workload_for("cpu")) and any(c.backward for c in spec.workload_for("cuda"))


def test_the_seed_backward_passes_every_check(tmp_path, device):
    """Positive control: reference gradients (float64 autograd), determinism, invariance."""
    spec = load_spec(small_attention_backward(tmp_path))
    report = check_seed(spec, device, parity_cases(spec))
    assert report.passed, report.first_failure
    checks = {c for r in report.results for c in r.checks}
    assert {"reference", "invariance", "determinism"} <= checks


@pytest.mark.parametrize("name", sorted(BACKWARD_CONTROLS))
def test_check_seed_catches_a_backward_that_follows_the_batch(tmp_path, device, name):
    seed = small_attention_backward(tmp_path)
    apply_backward_control(seed, name)
    report = check_seed(load_spec(seed), device, _invariance_cases(load_spec(seed)))
    assert not report.passed, f"{name} was not caught"
    failure = report.first_failure
    assert failure.failed is Check.INVARIANCE and EXPECTED[name] in failure.message, failure.message


def test_a_forward_only_judge_would_pass_the_same_control(tmp_path, device):
    """Negative control for the test above: without the backward table the forward
    bits of the dk/dv control are the seed's, so only the backward checks catch it."""
    from attention_seed import small_attention

    seed = small_attention(tmp_path)
    apply_backward_control(seed, "dkdv-block-follows-batch")
    spec = load_spec(seed)
    assert spec.backward is None
    assert check_seed(spec, device, _invariance_cases(spec)).passed


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    seed = small_attention_backward(tmp_path_factory.mktemp("attention_bwd"))
    spec = load_spec(seed)
    options = EvalOptions(device="cpu", timeout_s=600, rounds=2, warmup=1)
    return seed, spec, options, cached_reference(spec, options)


@pytest.fixture(scope="module")
def seed_verdict(judged, tmp_path_factory):
    seed, spec, options, reference = judged
    candidate = tmp_path_factory.mktemp("candidate") / "kernel.py"
    candidate.write_text((seed / "kernel.py").read_text())
    return evaluate(spec, candidate, options, reference=reference)


def test_eval_times_the_training_step_of_the_seed_itself(seed_verdict):
    verdict = seed_verdict
    assert verdict.outcome is not Outcome.PARITY_FAILED and verdict.outcome is not Outcome.INTEGRITY_FAILED, \
        verdict.reason
    assert {c["name"] for c in verdict.timing} == {"mixed-small", "step-small"}


def test_eval_rejects_a_dk_reduction_that_follows_the_batch(judged, tmp_path):
    seed, spec, options, reference = judged
    (tmp_path / "kernel.py").write_text((seed / "kernel.py").read_text())
    # No timing: a parity failure never reaches it, and the seed's worker then computes no digests.
    verdict = evaluate(spec, apply_backward_control(tmp_path, "dkdv-block-follows-batch"),
                       replace(options, timing=False), reference=reference)
    assert verdict.outcome is Outcome.PARITY_FAILED, verdict.reason
    assert "[invariance]" in verdict.reason and "cache slots" in verdict.reason, verdict.reason


@pytest.fixture(scope="module")
def attention_package(judged, seed_verdict, tmp_path_factory):
    """The wheel's package for the small attention seed, certified by the evaluation above."""
    from packageutil import render_package

    seed = judged[0]
    return render_package(tmp_path_factory.mktemp("package"), seed, seed_verdict.to_dict())


def test_the_wheel_verifies_a_sequences_kernel_and_routes_sdpa(attention_package):
    from packageutil import run_fresh

    root, name = attention_package
    facts = run_fresh(root, f"""
        import json
        import torch
        import torch.nn.functional as F
        import {name} as pkg
        from {name} import _cases, _verify
        from {name}.kernel import attention, attention_backward

        bits = lambda t: t.contiguous().view(torch.int32)
        report = pkg.verify()
        facts = {{"verify": report.passed, "verified": len(report.cases), "failures": report.failures[:3]}}

        # Negative control: a kernel whose rows change when a sequence runs alone.
        spec, certificate = _cases.load_spec(), _cases.load_certificate()
        case = next(c for c in _cases.certified_cases(certificate) if c.invariance and c.m > 1)
        def alone_differs(q, k, v, cu, lens, table, scale):
            out = attention(q, k, v, cu, lens, table, scale)
            return out if lens.shape[0] > 1 else out * (1 + 2 ** -20)
        bad = _verify._check_sequences_case(spec, case, alone_differs, attention, "cpu")
        facts["control"] = [bad.passed, bad.failed]

        # SDPA in a real module: the kernel's bits forward and backward, inside the block only.
        gen = torch.Generator().manual_seed(0)
        b, hq, hkv, s, d = 2, 4, 2, 20, 64
        q = torch.randn(b, hq, s, d, generator=gen).requires_grad_()
        k = torch.randn(b, hkv, s, d, generator=gen).requires_grad_()
        v = torch.randn(b, hkv, s, d, generator=gen).requires_grad_()
        do = torch.randn(b, hq, s, d, generator=gen)
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        stock = sdpa()
        gq, gk, gv = torch.autograd.grad(stock, (q, k, v), do)
        with pkg.enabled():
            routed = sdpa()
            rq, rk, rv = torch.autograd.grad(routed, (q, k, v), do)
        after = sdpa()
        # The same call, by hand: one sequence per batch row, blocks of PAGE positions.
        page, blocks = 16, 2
        def paged(t):
            t = F.pad(t.detach().transpose(1, 2), (0, 0, 0, 0, 0, blocks * page - s))
            return t.reshape(b * blocks, page, hkv, d).contiguous()
        cu = torch.arange(0, b * s + 1, s, dtype=torch.int32)
        lens = torch.full((b,), s, dtype=torch.int32)
        table = torch.arange(b * blocks, dtype=torch.int32).reshape(b, blocks)
        qp = q.detach().transpose(1, 2).reshape(b * s, hq, d).contiguous()
        direct = attention(qp, paged(k), paged(v), cu, lens, table, d ** -0.5)
        dq, dk, dv = attention_backward(qp, paged(k), paged(v), cu, lens, table,
                                        do.transpose(1, 2).reshape(b * s, hq, d).contiguous(), d ** -0.5)
        unpage = lambda t: t.reshape(b, blocks * page, hkv, d)[:, :s].transpose(1, 2)
        facts["forward"] = torch.equal(bits(routed.transpose(1, 2).reshape(b * s, hq, d)), bits(direct))
        facts["dq"] = torch.equal(bits(rq.transpose(1, 2).reshape(b * s, hq, d)), bits(dq))
        facts["dk"] = torch.equal(bits(rk), bits(unpage(dk)))
        facts["dv"] = torch.equal(bits(rv), bits(unpage(dv)))
        facts["close_to_stock"] = [float((x - y).abs().max()) for x, y in ((routed, stock), (rq, gq), (rk, gk), (rv, gv))]
        from torch.library import opcheck
        op = getattr(torch.ops, "{name}").attention.default
        bop = getattr(torch.ops, "{name}").attention_backward.default
        args = (qp.requires_grad_(), paged(k).requires_grad_(), paged(v).requires_grad_(), cu, lens, table, d ** -0.5)
        facts["opcheck"] = {{**opcheck(op, args), **{{"bwd_" + k: v for k, v in opcheck(
            bop, (*[a.detach() for a in args[:6]], do.transpose(1, 2).reshape(b * s, hq, d).contiguous(),
                  d ** -0.5)).items()}}}}
        facts["stock_differs"] = not torch.equal(bits(stock), bits(routed))
        facts["after_is_stock"] = torch.equal(bits(after), bits(stock))
        # Prefill = decode through SDPA: a decode step (one query, no mask) and a chunk of
        # five (the end-aligned mask, boolean or additive) give the last tokens the
        # bits of the full causal prefill; the chunk's gradient is the certified one.
        n = 5
        chunk_mask = torch.ones(n, s, dtype=torch.bool).tril(s - n)
        additive = torch.zeros(n, s).masked_fill(~chunk_mask, float("-inf"))
        def prefill_decode():
            full = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            step = F.scaled_dot_product_attention(q[:, :, -1:], k, v, enable_gqa=True)
            chunk = F.scaled_dot_product_attention(q[:, :, -n:], k, v, attn_mask=chunk_mask, enable_gqa=True)
            added = F.scaled_dot_product_attention(q[:, :, -n:], k, v, attn_mask=additive, enable_gqa=True)
            return full, step, chunk, added
        with pkg.enabled():
            full, step, chunk, added = prefill_decode()
            grads = torch.autograd.grad(chunk, (q, k, v), do[:, :, -n:])
        stock_grads = torch.autograd.grad(F.scaled_dot_product_attention(
            q[:, :, -n:], k, v, attn_mask=chunk_mask, enable_gqa=True), (q, k, v), do[:, :, -n:])
        facts["decode_is_prefill"] = torch.equal(bits(step), bits(full[:, :, -1:]))
        facts["chunk_is_prefill"] = [torch.equal(bits(t), bits(full[:, :, -n:])) for t in (chunk, added)]
        facts["chunk_grads_close"] = max(float((x - y).abs().max()) for x, y in zip(grads, stock_grads))
        facts["stock_decode_is_prefill"] = [torch.equal(bits(a), bits(b)) for a, b in zip(
            prefill_decode()[1:3], (full[:, :, -1:], full[:, :, -n:]))]
        errors = []
        with pkg.enabled():
            for bad_call in (lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                             lambda: F.scaled_dot_product_attention(q[:, :, -n:], k, v, is_causal=True,
                                                                    enable_gqa=True),
                             lambda: F.scaled_dot_product_attention(q[:, :, -n:], k, v, attn_mask=chunk_mask.tril(
                                 s - n - 1), enable_gqa=True),
                             lambda: F.scaled_dot_product_attention(q, k[:, :, :9], v[:, :, :9], attn_mask=None,
                                                                    enable_gqa=True),
                             lambda: F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                                                    enable_gqa=True)):
                try:
                    bad_call()
                    errors.append(None)
                except pkg.NotCertifiedError as exc:
                    errors.append(str(exc))
        facts["errors"] = errors
        # Prefix sharing: two sequences on one cache block; the forward reads it, the backward refuses.
        shared = table.clone()
        shared[1, 0] = shared[0, 0]
        try:
            bop(*[a.detach() for a in args[:5]], shared,
                do.transpose(1, 2).reshape(b * s, hq, d).contiguous(), d ** -0.5)
            facts["shared"] = None
        except pkg.NotCertifiedError as exc:
            facts["shared"] = str(exc)
        print(json.dumps(facts))
    """)
    assert facts["verify"] and facts["verified"] > 0, facts["failures"]
    assert facts["control"] == [False, "invariance"], facts
    assert facts["forward"] and facts["dq"] and facts["dk"] and facts["dv"], facts
    assert max(facts["close_to_stock"]) < 1e-4, facts
    assert facts["stock_differs"] and facts["after_is_stock"], facts
    assert facts["opcheck"] and set(facts["opcheck"].values()) == {"SUCCESS"}, facts["opcheck"]
    assert facts["decode_is_prefill"] and facts["chunk_is_prefill"] == [True, True], facts
    assert facts["chunk_grads_close"] < 1e-4, facts
    print("stock SDPA: decode step and chunk equal to the prefill's rows:", facts["stock_decode_is_prefill"])
    causal, top_left, other_mask, more_queries, dtype = facts["errors"]
    assert causal and "is_causal=False with 20 queries" in causal
    assert top_left and "top left" in top_left
    assert other_mask and "is another mask" in other_mask
    assert more_queries and "no more queries than keys" in more_queries
    assert facts["shared"] and "share a cache block" in facts["shared"], facts["shared"]
    assert dtype and "float64 is not certified" in dtype


def test_a_backward_that_counts_its_timed_calls_is_caught_by_the_training_cell_digests(judged):
    """Corpus: attention_bwd_counter.py skips dk/dv on two calls at the training shape."""
    from pathlib import Path

    from tik_agent.judge.evaluate import evaluate_sandboxed

    _, spec, options, reference = judged
    corpus = Path(__file__).parent / "adversarial" / "runtime" / "attention_bwd_counter.py"
    verdict = evaluate_sandboxed(spec, corpus, options, reference)
    assert verdict.outcome is Outcome.INTEGRITY_FAILED, verdict.reason
    assert verdict.reason.startswith("timing:step-small: [timed-call]"), verdict.reason
    assert all(c["passed"] for c in verdict.cases)  # parity alone would have let it through
