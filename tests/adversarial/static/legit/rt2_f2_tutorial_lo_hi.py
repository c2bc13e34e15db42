"""Causal flash attention forward; the key range's end is chosen by a constexpr: tutorial-style lo, hi = 0, seqlen_k / lo, hi = 0, (start_m + 1) * BLOCK_M under a constexpr."""

import torch
import triton
import triton.language as tl

BLOCK_M = 64
BLOCK_N = 64


@triton.jit
def _attn_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr, seqlen_q, seqlen_k, sm_scale,
    stride_qm, stride_kn, stride_vn, stride_om,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < seqlen_q, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.44269504
    if CAUSAL:
        lo, hi = 0, (start_m + 1) * BLOCK_M
    else:
        lo, hi = 0, seqlen_k
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < seqlen_k, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(cols[None, :] < seqlen_k, qk, float("-inf"))
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < seqlen_k, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seqlen_q)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    seqlen_q, head_dim = q.shape
    seqlen_k = k.shape[0]
    o = torch.empty_like(q)
    grid = (triton.cdiv(seqlen_q, BLOCK_M),)
    _attn_fwd[grid](
        q, k, v, o, seqlen_q, seqlen_k, head_dim ** -0.5,
        q.stride(0), k.stride(0), v.stride(0), o.stride(0),
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal,
    )  # fmt: skip
    return o
