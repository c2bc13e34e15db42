"""Causal attention over a paged KV cache: one entry for prefill, chunked prefill,
decode and the training forward alike.

Calling convention (the one serving engines use for unified Triton attention):
``q`` (T, Hq, D) holds the new tokens of every sequence, packed;
``k_cache``/``v_cache`` (num_blocks, P, Hkv, D) are paged; ``cu_seqlens_q``
(num_seqs + 1,) int32 are offsets into ``q``; ``seq_lens`` (num_seqs,) int32 is
each sequence's whole context including its new tokens, which are its last
positions; ``block_table`` (num_seqs, max_blocks) int32 maps a sequence's
logical cache block to a physical one.  A new token at absolute position ``p``
attends to positions ``0..p`` of its own sequence.  Grouped-query heads: query
head ``h`` reads KV head ``h // (Hq // Hkv)``.

Numerical contract (what every variant must keep, bit for bit):
each (token, query head) row is computed on its own.  Its context is walked in
KV tiles of ``TILE`` positions at fixed absolute positions ``[0, TILE)``,
``[TILE, 2 TILE)``, ... in ascending order, and only up to the tile holding its
own position: no split-KV, and the tiles never depend on the page size, the
number of sequences, the other sequences' lengths or where the token sits in
the launch.  Per tile, in fp32: the score of position j is
``tl.sum(q * scale * k_j)`` over the head dim (masked positions are -inf);
the running maximum ``m`` and sum ``l`` and the accumulator ``acc`` are
rescaled by ``exp(m_old - m_new)`` (an online softmax); the tile adds
``tl.sum(p * v, axis=tile)``; the output is ``acc / l``, every NaN written as
the one canonical NaN.  A tile that holds no
position of the row leaves ``m``, ``l`` and ``acc`` untouched, so how many rows
share a program (``BLOCK_Q`` tokens times ``HEADS_PER_PROGRAM`` heads) never
reaches the bits.  ``TILE`` is therefore part of the numerics and fixed; the
decode of one token, a prefill chunk and a full-sequence forward all go through
this same loop.

Every load is converted to fp32 straight away: softmax and accumulation are
fp32 for fp32, bf16 and fp16 inputs (and the CPU interpreter's bf16 arithmetic
is wrong).  Positions a row may not see are never loaded, so garbage, NaN or
another sequence's data in cache slots it does not own cannot reach it.
"""

import torch
import triton
import triton.language as tl

TILE = 16
BLOCK_Q = 4
HEADS_PER_PROGRAM = 2
NUM_WARPS = 4


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    cu_ptr, lens_ptr, bt_ptr,
    scale, num_seqs, num_heads, group,
    stride_qt, stride_qh,
    stride_kb, stride_kp, stride_kh,
    stride_vb, stride_vp, stride_vh,
    stride_ot, stride_oh,
    stride_bt,
    PAGE: tl.constexpr, HEAD_DIM: tl.constexpr, TILE: tl.constexpr,
    BLOCK_Q: tl.constexpr, HEADS: tl.constexpr, SEQ_BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    # Which sequence this q-block belongs to: sequence s owns the programs from
    # cu[s] // BLOCK_Q + s on (enough for its cdiv(q_len, BLOCK_Q) blocks).
    seq_idx = tl.arange(0, SEQ_BLOCK)
    seq_ok = seq_idx < num_seqs
    firsts = tl.load(cu_ptr + seq_idx, mask=seq_ok, other=0) // BLOCK_Q + seq_idx
    seq = tl.sum(((firsts <= pid) & seq_ok).to(tl.int32), axis=0) - 1
    q_begin = tl.load(cu_ptr + seq)
    q_len = tl.load(cu_ptr + seq + 1) - q_begin
    seq_len = tl.load(lens_ptr + seq)
    ctx_start = seq_len - q_len
    q_local = (pid - (q_begin // BLOCK_Q + seq)) * BLOCK_Q

    rows = tl.arange(0, BLOCK_Q * HEADS)
    tok = q_local + rows // HEADS
    head = tl.program_id(1) * HEADS + rows % HEADS
    row_ok = (tok < q_len) & (head < num_heads)
    pos = tl.where(row_ok, ctx_start + tok, -1)
    kv_head = head // group
    d = tl.arange(0, HEAD_DIM)

    q_rows = q_ptr + (q_begin + tok).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh
    q = tl.load(q_rows + d[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    q = q * scale

    m_i = tl.full((BLOCK_Q * HEADS,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_Q * HEADS,), tl.float32)
    acc = tl.zeros((BLOCK_Q * HEADS, HEAD_DIM), tl.float32)
    # The last position any row of this program sees, plus one.
    hi = ctx_start + tl.minimum(q_local + BLOCK_Q, q_len)
    hi = tl.maximum(hi, 0)
    for start in range(0, hi, TILE):
        j = start + tl.arange(0, TILE)
        page = tl.load(bt_ptr + seq * stride_bt + j // PAGE, mask=j < hi, other=0).to(tl.int64)
        sees = row_ok[:, None] & (j[None, :] <= pos[:, None])
        k_off = (page * stride_kb + (j % PAGE) * stride_kp)[None, :, None] + kv_head[:, None, None] * stride_kh
        k = tl.load(k_ptr + k_off + d[None, None, :], mask=sees[:, :, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k, axis=2)
        s = tl.where(sees, s, float("-inf"))

        active = row_ok & (start <= pos)
        m_new = tl.where(active, tl.maximum(m_i, tl.max(s, axis=1)), m_i)
        alpha = tl.where(active, tl.exp(m_i - m_new), 1.0)
        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)
        l_i = tl.where(active, l_i * alpha + tl.sum(p, axis=1), l_i)

        v_off = (page * stride_vb + (j % PAGE) * stride_vp)[None, :, None] + kv_head[:, None, None] * stride_vh
        v = tl.load(v_ptr + v_off + d[None, None, :], mask=sees[:, :, None], other=0.0).to(tl.float32)
        pv = tl.sum(p[:, :, None] * v, axis=1)
        acc = tl.where(active[:, None], acc * alpha[:, None] + pv, acc)
        m_i = m_new

    out = acc / l_i[:, None]
    # One NaN for every NaN: a NaN made by inf - inf takes its sign from the
    # code path that made it (numpy's vector or scalar loop under the
    # interpreter), which would let the rows per program reach the bits.
    out = tl.where(out != out, float("nan"), out)
    o_rows = o_ptr + (q_begin + tok).to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh
    tl.store(o_rows + d[None, :], out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


def attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale):
    """Causal paged attention; returns (T, Hq, D) in q's dtype."""
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"attention: q must be (T, Hq, D) and the caches (blocks, P, Hkv, D) alike, got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    T, Hq, D = q.shape
    _, page, Hkv, Dk = k_cache.shape
    if Dk != D or Hq % Hkv != 0 or D not in (64, 128):
        raise ValueError(f"attention: head dims {D}/{Dk} must match and be 64 or 128; Hq={Hq} a multiple of Hkv={Hkv}")
    num_seqs = seq_lens.shape[0]
    if cu_seqlens_q.shape != (num_seqs + 1,) or block_table.dim() != 2 or block_table.shape[0] != num_seqs:
        raise ValueError(f"attention: cu_seqlens_q {tuple(cu_seqlens_q.shape)} and block_table "
                         f"{tuple(block_table.shape)} do not match {num_seqs} sequences")
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    out = torch.empty((T, Hq, D), dtype=q.dtype, device=q.device)
    grid = (T // BLOCK_Q + num_seqs, triton.cdiv(Hq, HEADS_PER_PROGRAM))
    _attention_kernel[grid](
        q, k_cache, v_cache, out,
        cu_seqlens_q, seq_lens, block_table,
        scale, num_seqs, Hq, Hq // Hkv,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1),
        block_table.stride(0),
        PAGE=page, HEAD_DIM=D, TILE=TILE,
        BLOCK_Q=BLOCK_Q, HEADS=HEADS_PER_PROGRAM, SEQ_BLOCK=triton.next_power_of_2(num_seqs),
        num_warps=NUM_WARPS,
    )
    return out
