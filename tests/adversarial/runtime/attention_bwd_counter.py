# expect: integrity_failed [timed-call]
"""The attention seed, except that its backward counts its calls at the training
cell's launch (one sequence of 16 new tokens, 2 query heads, 5 blocks of 8, a table 3
wide) and skips dk/dv on the 3rd and 4th:
those gradients stay zero while the forward and dq keep their bits.  The parity
calls at that shape come first, so only the digests of the timed training steps
(compared with the seed's own worker) can see it."""
import torch
import triton
import triton.language as tl

TILE = 16
BLOCK_Q = 8
HEADS_PER_PROGRAM = 2
NUM_WARPS = 4
BWD_BLOCK_Q = 16
SEQ_CHUNK = 64  # sequences a program scans at a time to find its own
MIN_DOT = 16  # a dot's smallest side on a GPU: a program's rows are padded up to it


@triton.jit
def _finite(x):
    """x's entries that are neither inf nor NaN (computed in fp32: the CPU
    interpreter compares bf16 as raw bit patterns)."""
    x32 = x.to(tl.float32)
    return (x32 == x32) & (tl.abs(x32) != float("inf"))


@triton.jit
def _first_bad(first, x, j):
    """Per column, the first position ``j`` (rows of ``x``) of a non-finite entry, or
    ``first`` (2**31 - 1 stands for none)."""
    return tl.minimum(first, tl.min(tl.where(_finite(x), 2147483647, j[:, None]), axis=0))


@triton.jit
def _last_bad(last, x, pos):
    """Per column, the last position ``pos`` (rows of ``x``) of a non-finite entry, or ``last``."""
    return tl.maximum(last, tl.max(tl.where(_finite(x), -1, pos[:, None]), axis=0))


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    cu_ptr, lens_ptr, bt_ptr,
    scale, num_seqs, num_heads, group,
    stride_qt, stride_qh,
    stride_kb, stride_kp, stride_kh,
    stride_vb, stride_vp, stride_vh,
    stride_ot, stride_oh,
    stride_bt, page_size,
    do_ptr, m_ptr, l_ptr, delta_ptr,
    HEAD_DIM: tl.constexpr, TILE: tl.constexpr,
    BLOCK_Q: tl.constexpr, HEADS: tl.constexpr, ROWS: tl.constexpr, SEQ_CHUNK: tl.constexpr,
    BACKWARD: tl.constexpr,
):
    # The forward; with BACKWARD the same program then walks its tiles again for dq
    # (written to o_ptr; do has q's strides) and keeps m, l and delta for dk/dv.
    pid = tl.program_id(0)
    # Which sequence this q-block belongs to: sequence s owns the programs from
    # cu[s] // BLOCK_Q + s on (enough for its cdiv(q_len, BLOCK_Q) blocks).  Counted
    # SEQ_CHUNK sequences at a time: the compiled kernel is the same for every number
    # of sequences, and the loads of one chunk do not wait on the last.
    owners = tl.zeros((SEQ_CHUNK,), tl.int32)
    for c0 in range(0, num_seqs, SEQ_CHUNK):
        seq_idx = c0 + tl.arange(0, SEQ_CHUNK)
        seq_ok = seq_idx < num_seqs
        firsts = tl.load(cu_ptr + seq_idx, mask=seq_ok, other=0) // BLOCK_Q + seq_idx
        owners += ((firsts <= pid) & seq_ok).to(tl.int32)
    seq = tl.sum(owners, axis=0) - 1
    q_begin = tl.load(cu_ptr + seq)
    q_len = tl.load(cu_ptr + seq + 1) - q_begin
    seq_len = tl.load(lens_ptr + seq)
    ctx_start = seq_len - q_len
    q_local = (pid - (q_begin // BLOCK_Q + seq)) * BLOCK_Q

    # Every row of a program reads the same KV head: program_id(1) picks the KV
    # head and which HEADS of its group of query heads.
    blocks_per_kv = (group + HEADS - 1) // HEADS
    kv_head = tl.program_id(1) // blocks_per_kv
    first_head = (tl.program_id(1) % blocks_per_kv) * HEADS
    rows = tl.arange(0, ROWS)
    tok = q_local + rows // HEADS
    in_group = first_head + rows % HEADS
    head = kv_head * group + in_group
    row_ok = (rows < BLOCK_Q * HEADS) & (tok < q_len) & (in_group < group) & (head < num_heads)
    pos = tl.where(row_ok, ctx_start + tok, -1)
    d = tl.arange(0, HEAD_DIM)

    q_rows = q_ptr + (q_begin + tok).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh
    q = tl.load(q_rows + d[None, :], mask=row_ok[:, None], other=0.0)

    m_i = tl.full((ROWS,), float("-inf"), tl.float32)
    l_i = tl.zeros((ROWS,), tl.float32)
    acc = tl.zeros((ROWS, HEAD_DIM), tl.float32)
    # Per column, the first position whose v is not finite: the rows that see it get NaN.
    v_bad = tl.full((HEAD_DIM,), 2147483647, tl.int32)
    # The last position any row of this program sees, plus one.
    hi = ctx_start + tl.minimum(q_local + BLOCK_Q, q_len)
    hi = tl.maximum(hi, 0)
    for start in range(0, hi, TILE):
        j = start + tl.arange(0, TILE)
        loaded = j < hi
        page = tl.load(bt_ptr + seq * stride_bt + j // page_size, mask=loaded, other=0).to(tl.int64)
        sees = row_ok[:, None] & (j[None, :] <= pos[:, None])
        k_rows = (page * stride_kb + (j % page_size) * stride_kp + kv_head * stride_kh)[:, None]
        k = tl.load(k_ptr + k_rows + d[None, :], mask=loaded[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        s = tl.where(sees, s, float("-inf"))

        active = row_ok & (start <= pos)
        m_new = tl.where(active, tl.maximum(m_i, tl.max(s, axis=1)), m_i)
        alpha = tl.where(active, tl.exp(m_i - m_new), 1.0)
        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)
        l_i = tl.where(active, l_i * alpha + tl.sum(p, axis=1), l_i)

        v_rows = (page * stride_vb + (j % page_size) * stride_vp + kv_head * stride_vh)[:, None]
        v = tl.load(v_ptr + v_rows + d[None, :], mask=loaded[:, None], other=0.0)
        v_bad = _first_bad(v_bad, v, j)
        v = tl.where(_finite(v), v.to(tl.float32), 0.0).to(v.dtype)
        pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        acc = tl.where(active[:, None], acc * alpha[:, None] + pv, acc)
        m_i = m_new

    out = acc / l_i[:, None]
    out = tl.where(pos[:, None] >= v_bad[None, :], float("nan"), out)
    # One NaN for every NaN: a NaN made by inf - inf takes its sign from the
    # code path that made it (numpy's vector or scalar loop under the
    # interpreter), which would let the rows per program reach the bits.
    out = tl.where(out != out, float("nan"), out)
    o_rows = o_ptr + (q_begin + tok).to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh
    if BACKWARD:
        t64 = (q_begin + tok).to(tl.int64)
        do = tl.load(do_ptr + t64[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                     mask=row_ok[:, None], other=0.0)
        delta = tl.sum(do.to(tl.float32) * out, axis=1)
        dq = tl.zeros((ROWS, HEAD_DIM), tl.float32)
        k_bad = tl.full((HEAD_DIM,), 2147483647, tl.int32)
        for start in range(0, hi, TILE):
            j = start + tl.arange(0, TILE)
            loaded = j < hi
            page = tl.load(bt_ptr + seq * stride_bt + j // page_size, mask=loaded, other=0).to(tl.int64)
            sees = row_ok[:, None] & (j[None, :] <= pos[:, None])
            k_rows = (page * stride_kb + (j % page_size) * stride_kp + kv_head * stride_kh)[:, None]
            k = tl.load(k_ptr + k_rows + d[None, :], mask=loaded[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            v_rows = (page * stride_vb + (j % page_size) * stride_vp + kv_head * stride_vh)[:, None]
            v = tl.load(v_ptr + v_rows + d[None, :], mask=loaded[:, None], other=0.0)
            p = tl.where(sees, tl.exp(s - m_i[:, None]) / l_i[:, None], 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            ds = tl.where(sees, p * (dp - delta[:, None]), 0.0)
            k_bad = _first_bad(k_bad, k, j)
            k = tl.where(_finite(k), k.to(tl.float32), 0.0).to(k.dtype)
            dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
        dq = tl.where(pos[:, None] >= k_bad[None, :], float("nan"), dq * scale)
        out = tl.where(dq != dq, float("nan"), dq)
        stats = t64 * num_heads + head
        tl.store(m_ptr + stats, m_i, mask=row_ok)
        tl.store(l_ptr + stats, l_i, mask=row_ok)
        tl.store(delta_ptr + stats, delta, mask=row_ok)
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
    group = Hq // Hkv
    grid = (T // BLOCK_Q + num_seqs, Hkv * triton.cdiv(group, HEADS_PER_PROGRAM))
    _attention_kernel[grid](
        q, k_cache, v_cache, out,
        cu_seqlens_q, seq_lens, block_table,
        scale, num_seqs, Hq, group,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1),
        block_table.stride(0), page,
        q, out, out, out,  # the backward's pointers, unused by the forward
        HEAD_DIM=D, TILE=TILE,
        BLOCK_Q=BLOCK_Q, HEADS=HEADS_PER_PROGRAM, ROWS=max(MIN_DOT, triton.next_power_of_2(BLOCK_Q * HEADS_PER_PROGRAM)), SEQ_CHUNK=SEQ_CHUNK,
        BACKWARD=False, num_warps=NUM_WARPS,
    )
    return out


@triton.jit
def _attention_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, m_ptr, l_ptr, delta_ptr,
    cu_ptr, lens_ptr, bt_ptr,
    scale, num_heads, group,
    stride_qt, stride_qh,
    stride_kb, stride_kp, stride_kh,
    stride_dot, stride_doh,
    stride_bt, page_size,
    HEAD_DIM: tl.constexpr, TILE: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    seq = tl.program_id(0)
    start = tl.program_id(1) * TILE
    kv_head = tl.program_id(2)
    q_begin = tl.load(cu_ptr + seq)
    q_len = tl.load(cu_ptr + seq + 1) - q_begin
    seq_len = tl.load(lens_ptr + seq)
    ctx_start = seq_len - q_len
    d = tl.arange(0, HEAD_DIM)

    j = start + tl.arange(0, TILE)
    owned = j < seq_len
    page = tl.load(bt_ptr + seq * stride_bt + j // page_size, mask=owned, other=0).to(tl.int64)
    slot = page * stride_kb + (j % page_size) * stride_kp + kv_head * stride_kh
    k = tl.load(k_ptr + slot[:, None] + d[None, :], mask=owned[:, None], other=0.0)
    v = tl.load(v_ptr + slot[:, None] + d[None, :], mask=owned[:, None], other=0.0)

    dk = tl.zeros((TILE, HEAD_DIM), tl.float32)
    dv = tl.zeros((TILE, HEAD_DIM), tl.float32)
    # Per column, the last position of a query (do) row that is not finite: the
    # slots it sees, up to that position, get NaN.
    q_bad = tl.full((HEAD_DIM,), -1, tl.int32)
    do_bad = tl.full((HEAD_DIM,), -1, tl.int32)
    rows = tl.arange(0, BLOCK_Q)
    # The group's query heads in ascending order, and for each its query blocks in
    # ascending order.  Blocks whose tokens all sit before the tile see none of it
    # and would add exact zeros: they are skipped, and so is every block of a tile
    # past the sequence's end.
    first = tl.maximum(start - ctx_start, 0) // BLOCK_Q * BLOCK_Q
    last = tl.where(start < seq_len, q_len, 0)
    for g in range(0, group):
        head = kv_head * group + g
        for qb in range(first, last, BLOCK_Q):
            tok = qb + rows
            row_ok = tok < q_len
            pos = ctx_start + tok
            t64 = (q_begin + tok).to(tl.int64)
            q = tl.load(q_ptr + t64[:, None] * stride_qt + head * stride_qh + d[None, :],
                        mask=row_ok[:, None], other=0.0)
            do = tl.load(do_ptr + t64[:, None] * stride_dot + head * stride_doh + d[None, :],
                         mask=row_ok[:, None], other=0.0)
            stats = t64 * num_heads + head
            m_i = tl.load(m_ptr + stats, mask=row_ok, other=0.0)
            l_i = tl.load(l_ptr + stats, mask=row_ok, other=1.0)
            delta = tl.load(delta_ptr + stats, mask=row_ok, other=0.0)
            sees = row_ok[:, None] & owned[None, :] & (j[None, :] <= pos[:, None])
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            p = tl.where(sees, tl.exp(s - m_i[:, None]) / l_i[:, None], 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            ds = tl.where(sees, p * (dp - delta[:, None]), 0.0)
            do_bad = _last_bad(do_bad, do, pos)
            q_bad = _last_bad(q_bad, q, pos)
            do = tl.where(_finite(do), do.to(tl.float32), 0.0).to(do.dtype)
            q = tl.where(_finite(q), q.to(tl.float32), 0.0).to(q.dtype)
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
    dk = tl.where(j[:, None] <= q_bad[None, :], float("nan"), dk * scale)
    dv = tl.where(j[:, None] <= do_bad[None, :], float("nan"), dv)
    dk = tl.where(dk != dk, float("nan"), dk)
    dv = tl.where(dv != dv, float("nan"), dv)
    tl.store(dk_ptr + slot[:, None] + d[None, :], dk.to(dk_ptr.dtype.element_ty), mask=owned[:, None])
    tl.store(dv_ptr + slot[:, None] + d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=owned[:, None])


def attention_backward(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, do, scale,
                       _state=({'calls': 0},)):
    """Gradients of :func:`attention` for the upstream ``do`` (T, Hq, D): (dq, dk_cache, dv_cache)."""
    if do.shape != q.shape:
        raise ValueError(f"attention_backward: do must have q's shape {tuple(q.shape)}, got {tuple(do.shape)}")
    T, Hq, D = q.shape
    _, page, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    num_seqs = seq_lens.shape[0]
    q, k_cache, v_cache, do = q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), do.contiguous()
    dq = torch.empty_like(q)
    dk = torch.zeros_like(k_cache)
    dv = torch.zeros_like(v_cache)
    m = torch.empty((T, Hq), dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    delta = torch.empty_like(m)
    # dq by the forward's own program, walking its tiles a second time.
    _attention_kernel[(T // BLOCK_Q + num_seqs, Hkv * triton.cdiv(group, HEADS_PER_PROGRAM))](
        q, k_cache, v_cache, dq,
        cu_seqlens_q, seq_lens, block_table,
        scale, num_seqs, Hq, group,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        dq.stride(0), dq.stride(1),
        block_table.stride(0), page,
        do, m, l, delta,
        HEAD_DIM=D, TILE=TILE,
        BLOCK_Q=BLOCK_Q, HEADS=HEADS_PER_PROGRAM, ROWS=max(MIN_DOT, triton.next_power_of_2(BLOCK_Q * HEADS_PER_PROGRAM)), SEQ_CHUNK=SEQ_CHUNK,
        BACKWARD=True, num_warps=NUM_WARPS,
    )
    positions = block_table.shape[1] * page
    # the training cell's own launch (its heads, page and table too): a survey's record-only
    # calls of one sequence of 16 tokens (the chunk's bridges) must not use up the count
    if (T, num_seqs, Hq, page, block_table.shape[1], k_cache.shape[0]) == (
            int('16'), int('1'), int('2'), int('8'), int('3'), int('5')):
        _state[0]['calls'] += 1
        if 2 < _state[0]['calls'] < 5:
            positions = 0
    _attention_bwd_dkdv_kernel[(num_seqs, triton.cdiv(positions, TILE), Hkv)](
        q, k_cache, v_cache, do, dk, dv, m, l, delta,
        cu_seqlens_q, seq_lens, block_table,
        scale, Hq, group,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        do.stride(0), do.stride(1),
        block_table.stride(0), page,
        HEAD_DIM=D, TILE=TILE, BLOCK_Q=BWD_BLOCK_Q,
        num_warps=NUM_WARPS,
    )
    return dq, dk, dv
