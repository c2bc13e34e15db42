"""The attention drop-in on padded batches, at the SDPA call itself: every real token gets
the bits (forward, dq, dk, dv) of its sequence alone and unpadded; padded queries get zeros
and no gradient; every mask that is not causal within each row's real tokens is refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bitassert import assert_same_bits
from hfutil import bundled_dropins

pytestmark = pytest.mark.slow  # attention kernels and their backward under the interpreter

B, HQ, HKV, S, D = 3, 4, 2, 12, 64
# (lo, hi) of each row's real keys: row 0 unpadded, row 1 left-padded, row 2 by the test.
SPANS = {"left": (7, 12), "right": (0, 6), "both": (2, 9)}


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    return bundled_dropins(tmp_path_factory.mktemp("dropins")).packages["attention"]


def _inputs(length=S, hq=HQ):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(B, hq, length, D, generator=gen)
    k, v = torch.randn(B, HKV, S, D, generator=gen), torch.randn(B, HKV, S, D, generator=gen)
    return q, k, v, torch.randn(B, hq, length, D, generator=gen)


def _padded_mask(spans, additive=False):
    """The mask transformers builds: causal, ending at the last key, and each row's key padding."""
    j = torch.arange(S)
    valid = torch.stack([(j >= lo) & (j < hi) for lo, hi in spans])
    mask = (j[None, :] <= j[:, None])[None] & valid[:, None, :]
    mask = mask[:, None]  # [B, 1, L, S]
    return torch.zeros(mask.shape).masked_fill(~mask, float("-inf")) if additive else mask


def _grads(out, tensors, do):
    return torch.autograd.grad(out, tensors, do)


@pytest.mark.parametrize("padding,additive", [("left", False), ("right", False), ("both", False), ("both", True)])
def test_each_real_token_gets_the_bits_of_its_sequence_alone(attention, padding, additive):
    spans = [(0, S), (4, S), SPANS[padding]]
    q, k, v, do = (t.requires_grad_() if n < 3 else t for n, t in enumerate(_inputs()))
    with attention.enabled():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=_padded_mask(spans, additive), enable_gqa=True)
        dq, dk, dv = _grads(out, (q, k, v), do)
        for row, (lo, hi) in enumerate(spans):
            cut = (slice(row, row + 1), slice(None), slice(lo, hi))
            alone = F.scaled_dot_product_attention(q[cut], k[cut], v[cut], is_causal=True, enable_gqa=True)
            aq, ak, av = _grads(alone, (q, k, v), do[cut])
            for name, got, want in (("out", out, alone), ("dq", dq, aq[cut]), ("dk", dk, ak[cut]), ("dv", dv, av[cut])):
                assert_same_bits(want, got[cut], f"{padding} row {row} {name}")
            pad = torch.ones(S, dtype=torch.bool)
            pad[lo:hi] = False
            for name, t in (("out", out), ("dq", dq), ("dk", dk), ("dv", dv)):
                assert not t[row, :, pad].any(), f"row {row}: {name} at padded positions is not zero"


def test_transformers_gqa_forms_give_the_grouped_bits(attention):
    """A left-padded decode step: transformers' packed form (pack_gqa: the query heads of one token
    as L rows, a mask with one query row) and its repeated KV heads (repeat_kv) give the bits of
    the grouped call, which are the bits of each row's sequence alone."""
    spans = [(0, S), (5, S), (9, S)]
    q, k, v, _ = _inputs(length=1)
    j = torch.arange(S)
    mask = torch.stack([(j >= lo) for lo, _ in spans])[:, None, None, :]  # [B, 1, 1, S]
    group = HQ // HKV
    with attention.enabled():
        grouped = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        packed = F.scaled_dot_product_attention(q.reshape(B, HKV, group, D), k, v, attn_mask=mask)
        repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                                  attn_mask=mask)
        alone = [F.scaled_dot_product_attention(q[r:r + 1], k[r:r + 1, :, lo:], v[r:r + 1, :, lo:], enable_gqa=True)
                 for r, (lo, _) in enumerate(spans)]
    assert_same_bits(grouped, packed.reshape(grouped.shape), "packed decode")
    assert_same_bits(grouped, repeated, "repeated KV heads")
    assert_same_bits(grouped, torch.cat(alone), "each row alone")


def _refusal(attention, mask, length=S, **kw) -> str:
    q, k, v, _ = _inputs(length=length)
    with attention.enabled(), pytest.raises(attention.NotCertifiedError) as caught:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, **kw)
    return str(caught.value)


def test_other_masks_are_refused_with_their_reason(attention):
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    off_by_one = torch.ones(S, S, dtype=torch.bool).tril(-1)          # no query sees its own key
    reason = _refusal(attention, off_by_one)
    assert "query 0 (key position 0): it sees keys none" in reason and "sees 0..0" in reason, reason
    bidirectional = torch.ones(S, S, dtype=torch.bool)
    reason = _refusal(attention, bidirectional)
    assert "query 0 (key position 0): it sees keys 0..11" in reason, reason
    window = causal & ~torch.ones(S, S, dtype=torch.bool).tril(-4)     # the last 4 keys
    reason = _refusal(attention, window)
    assert "query 4 (key position 4): it sees keys 1..4" in reason and "sees 0..4" in reason, reason
    holes = causal.clone()
    holes[:, 5] = False
    assert "have holes" in _refusal(attention, holes)
    per_head = causal.expand(B, HQ, S, S).clone()
    per_head[0, 1, 3, 2] = False
    assert "differs between heads" in _refusal(attention, per_head)
    bias = torch.zeros(S, S).masked_fill(~causal, float("-inf")) + 0.5 * causal
    assert "values other than 0 and -inf" in _refusal(attention, bias)
    assert "both is_causal=True and an attn_mask" in _refusal(attention, causal, is_causal=True)
    # Every refusal names the contract, so a user knows what the kernel accepts.
    assert "causal attention aligned at the end, within each row's real tokens" in _refusal(attention, window)
    # A head dim the certificate does not hold (tiny configs' default hidden / heads) is refused by name.
    small = torch.randn(1, 2, 4, 32)
    with attention.enabled(), pytest.raises(attention.NotCertifiedError, match=r"head dim 32 is not certified"):
        F.scaled_dot_product_attention(small, small, small, is_causal=True)


def test_stock_sdpa_is_not_what_the_kernel_computes_at_padded_queries(attention):
    """Control: the routed call is the kernel's, not torch's (whose padded queries are not zeros
    where a right-padded row's queries still see its keys)."""
    spans = [(0, S), (4, S), SPANS["right"]]
    q, k, v, _ = _inputs()
    mask = _padded_mask(spans)
    stock = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    with attention.enabled():
        routed = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert stock[2, :, 6:].abs().sum() > 0 and routed[2, :, 6:].abs().sum() == 0
    assert torch.allclose(stock[:2, :, 4:], routed[:2, :, 4:], atol=1e-5)  # the real tokens: the same attention
