"""Fused residual add + RMSNorm, as serving engines run it between layers:
new_residual = x + residual; y = rms_norm(new_residual) * weight.  Returns (y, new_residual).

Numerical contract (what every variant must keep, bit for bit):
the sum ``x + residual`` is taken in fp32 and rounded once to the input dtype:
that rounded value is ``new_residual``, and the norm is computed from it (read
back as fp32), exactly what a separate add followed by the rmsnorm seed would
see.  Each row is reduced on its own, over the columns in chunks of
``BLOCK_N``: chunk k adds ``r[k*BLOCK_N + j]^2`` into fp32 lane j, and after
the last chunk one ``tl.sum`` adds the lanes.  ``BLOCK_N`` is part of the
numerics and fixed.  ``ROWS_PER_PROGRAM`` only decides how many rows one
program walks side by side; every row keeps its own lanes.

Every NaN either output holds is the one canonical NaN: a NaN made by
``inf - inf`` or ``inf * 0`` takes its sign from the code path that made it
(numpy's vector or scalar loop under the interpreter), which would let the
rows per program reach the bits.

The second pass recomputes the rounded sum from the inputs instead of reading
``new_residual`` back: the same operations give the same bits, and a program
never depends on the visibility of its own stores.

Backward contract (``add_rms_norm_backward``): with ``s`` the rounded sum,
``g = dnew_residual + w * dy * rstd - s * coef`` where
``coef = sum(s * w * dy) * rstd^3 / N``, both row sums over ``BLOCK_N`` fp32
lanes merged by one ``tl.sum`` like the forward's; ``dx`` and ``dresidual`` are
both ``g`` (the add passes its gradient through), per row and so batch
invariant.  ``dweight`` sums ``dy * s * rstd`` over the batch in fixed chunks
of ``ROW_CHUNK`` rows (one ``tl.sum`` per chunk, missing rows adding 0.0), the
chunk sums added in ascending order: ``ROW_CHUNK`` never depends on M, so
dweight has the seed's bits at every batch size.  NaNs are canonical here too.
dweight runs in two passes, as the rmsnorm seed's does: one program per chunk of
rows and ``DW_BLOCK_N`` columns writes the chunk's column sums, then one program
per ``DW_COMBINE_N`` columns adds them in ascending chunk order (the same additions
in the same order as one accumulator walking the chunks), so a GPU is full at any
width.  Under the interpreter ``BWD_ROWS_PER_PROGRAM``, ``DW_BLOCK_N`` and
``DW_COMBINE_N`` only distribute the work; ``DW_COMBINE_N_GPU`` is the last one's
value on a GPU (the compile-only replay, on CPU tensors, applies it).  On sm_90
(the TTGIR of triton 3.6.0 and 3.9.0, 4 warps) ``DW_BLOCK_N`` is part of the
numerics: at 512 a chunk's 16-row sum is split over two warps (``warpsPerCTA =
[2, 2]``), at 1024 and 2048 each column's rows stay in one thread (``[1, 4]``),
another tree.  So the seed's 512 is fixed there, like ``BLOCK_N``.  dx's row sums
keep one layout at 1 and 4 rows a program, and the combine is element-wise: those
two only distribute the work on sm_90 too (tests/test_compile_only.py).
"""

import torch
import triton
import triton.language as tl

BLOCK_N = 1024
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4
ROW_CHUNK = 16
DW_BLOCK_N = 512
BWD_ROWS_PER_PROGRAM = 4
DW_COMBINE_N = 512
DW_COMBINE_N_GPU = 128
# The combine's loads in flight ahead of its adds (a GPU's software pipeline), and one warp
# a program on a GPU, so that each thread loads four columns at once (16 bytes).
DW_COMBINE_STAGES = 32
DW_COMBINE_WARPS = 4
DW_COMBINE_WARPS_GPU = 1


@triton.jit
def _add_rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr,
    M, N,
    stride_xm, stride_rm, stride_ym, stride_sm,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    rows64 = rows.to(tl.int64)[:, None]
    x_rows, r_rows = x_ptr + rows64 * stride_xm, r_ptr + rows64 * stride_rm
    y_rows, s_rows = y_ptr + rows64 * stride_ym, s_ptr + rows64 * stride_sm

    # Pass 1: the rounded sum, stored, and its sum of squares per fp32 lane.
    lanes = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        s = x + r
        s = tl.where(s != s, float("nan"), s).to(s_ptr.dtype.element_ty)
        tl.store(s_rows + c[None, :], s, mask=mask)
        s32 = s.to(tl.float32)
        lanes += s32 * s32
    sum_sq = tl.sum(lanes, axis=1)
    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)

    # Pass 2: the same rounded sum, recomputed, times rstd and the weight.
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        s32 = x + r
        s32 = tl.where(s32 != s32, float("nan"), s32).to(s_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        y = s32 * rstd[:, None] * w[None, :]
        y = tl.where(y != y, float("nan"), y)
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    """(rms_norm(x + residual) * weight, x + residual) for 2-D x and residual (M, N), weight (N,)."""
    if x.dim() != 2 or residual.shape != x.shape:
        raise ValueError(f"add_rms_norm: x and residual must be 2-D (M, N) alike, got {tuple(x.shape)}, {tuple(residual.shape)}")
    if weight.shape != (x.shape[1],):
        raise ValueError(f"add_rms_norm: weight must have shape ({x.shape[1]},), got {tuple(weight.shape)}")
    x, residual, weight = x.contiguous(), residual.contiguous(), weight.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    new_residual = torch.empty_like(x)
    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)
    _add_rms_norm_kernel[grid](
        x, residual, weight, y, new_residual, M, N,
        x.stride(0), residual.stride(0), y.stride(0), new_residual.stride(0), eps,
        BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    return y, new_residual


@triton.jit
def _rounded_sum(x_ptr, r_ptr, offs, mask, s_dtype):
    """x + residual in fp32, rounded once to the dtype and read back as fp32; NaNs canonical."""
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    return tl.where(s != s, float("nan"), s).to(s_dtype).to(tl.float32)


@triton.jit
def _add_rms_norm_dx_kernel(
    x_ptr, r_ptr, w_ptr, dy_ptr, ds_ptr, dx_ptr, dr_ptr, rstd_ptr,
    M, N,
    stride_xm, stride_rm, stride_dym, stride_dsm, stride_dxm, stride_drm,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    r64 = rows.to(tl.int64)[:, None]
    # The forward's sum of squares (same lanes, same order) and each row's
    # sum of s * w * dy, both over BLOCK_N lanes merged by one tl.sum.
    lanes_sq = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    lanes_dot = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        s = _rounded_sum(x_ptr + r64 * stride_xm, r_ptr + r64 * stride_rm, c[None, :], mask,
                         dx_ptr.dtype.element_ty)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r64 * stride_dym + c[None, :], mask=mask, other=0.0).to(tl.float32)
        lanes_sq += s * s
        lanes_dot += s * w[None, :] * dy
    rstd = 1.0 / tl.sqrt(tl.sum(lanes_sq, axis=1) / N + eps)
    coef = tl.sum(lanes_dot, axis=1) * rstd * rstd * rstd / N
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        s = _rounded_sum(x_ptr + r64 * stride_xm, r_ptr + r64 * stride_rm, c[None, :], mask,
                         dx_ptr.dtype.element_ty)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r64 * stride_dym + c[None, :], mask=mask, other=0.0).to(tl.float32)
        ds = tl.load(ds_ptr + r64 * stride_dsm + c[None, :], mask=mask, other=0.0).to(tl.float32)
        g = ds + (w[None, :] * dy * rstd[:, None] - s * coef[:, None])
        g = tl.where(g != g, float("nan"), g).to(dx_ptr.dtype.element_ty)
        tl.store(dx_ptr + r64 * stride_dxm + c[None, :], g, mask=mask)
        tl.store(dr_ptr + r64 * stride_drm + c[None, :], g, mask=mask)


@triton.jit
def _add_rms_norm_dw_chunks_kernel(
    x_ptr, r_ptr, dy_ptr, rstd_ptr, part_ptr,
    M, N,
    stride_xm, stride_rm, stride_dym,
    ROW_CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One chunk of ROW_CHUNK rows (fixed by the row index alone, never by M): its
    # column sums, by one tl.sum over the chunk's rows, missing rows adding 0.0.
    chunk_id = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    rows = chunk_id.to(tl.int64) * ROW_CHUNK + tl.arange(0, ROW_CHUNK)
    mask = (rows < M)[:, None] & col_ok[None, :]
    r64 = rows[:, None]
    s = _rounded_sum(x_ptr + r64 * stride_xm, r_ptr + r64 * stride_rm, cols[None, :], mask,
                     x_ptr.dtype.element_ty)
    dy = tl.load(dy_ptr + r64 * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
    part = tl.sum(dy * s * rstd[:, None], axis=0)
    tl.store(part_ptr + chunk_id.to(tl.int64) * N + cols, part, mask=col_ok)


@triton.jit
def _add_rms_norm_dw_combine_kernel(
    part_ptr, dw_ptr,
    chunks, N,
    BLOCK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # The chunks' column sums added in ascending chunk order into one fp32
    # accumulator per column, starting from 0.0.  On a GPU the loop is software
    # pipelined: the loads of the next STAGES - 1 chunks are in flight (cp.async)
    # while the adds go on in order, so the chain of adds does not wait on one load
    # at a time; the interpreter ignores STAGES.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    part = part_ptr + cols  # a pointer moved on by rows of N: 64-bit arithmetic
    for _ in tl.range(0, chunks, num_stages=STAGES):
        acc += tl.load(part, mask=col_ok, other=0.0)
        part += N
    acc = tl.where(acc != acc, float("nan"), acc)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=col_ok)


def add_rms_norm_backward(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor,
                          dnew_residual: torch.Tensor, eps: float = 1e-6):
    """Gradients (dx, dresidual, dweight) of :func:`add_rms_norm` for the upstream gradients
    ``dy`` and ``dnew_residual`` (both (M, N))."""
    if dy.shape != x.shape or dnew_residual.shape != x.shape:
        raise ValueError(f"add_rms_norm_backward: dy and dnew_residual must have x's shape {tuple(x.shape)}")
    x, residual, weight = x.contiguous(), residual.contiguous(), weight.contiguous()
    dy, dnew_residual = dy.contiguous(), dnew_residual.contiguous()
    M, N = x.shape
    dx = torch.empty_like(x)
    dresidual = torch.empty_like(x)
    rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
    dweight = torch.empty_like(weight)
    _add_rms_norm_dx_kernel[(triton.cdiv(M, BWD_ROWS_PER_PROGRAM),)](
        x, residual, weight, dy, dnew_residual, dx, dresidual, rstd, M, N,
        x.stride(0), residual.stride(0), dy.stride(0), dnew_residual.stride(0), dx.stride(0), dresidual.stride(0),
        eps, BLOCK_N=BLOCK_N, ROWS=BWD_ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    row_chunk = ROW_CHUNK  # part of the numerics: never a function of M
    chunks = triton.cdiv(M, row_chunk)
    part = torch.empty((chunks, N), dtype=torch.float32, device=x.device)
    _add_rms_norm_dw_chunks_kernel[(chunks, triton.cdiv(N, DW_BLOCK_N))](
        x, residual, dy, rstd, part, M, N, x.stride(0), residual.stride(0), dy.stride(0),
        ROW_CHUNK=row_chunk, BLOCK=DW_BLOCK_N, num_warps=NUM_WARPS,
    )
    combine = DW_COMBINE_N if x.device.type == "cpu" else DW_COMBINE_N_GPU
    _add_rms_norm_dw_combine_kernel[(triton.cdiv(N, combine),)](
        part, dweight, chunks, N, BLOCK=combine, STAGES=DW_COMBINE_STAGES,
        num_warps=DW_COMBINE_WARPS if x.device.type == "cpu" else DW_COMBINE_WARPS_GPU,
    )
    return dx, dresidual, dweight
