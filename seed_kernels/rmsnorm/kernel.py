"""Batch-invariant RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, fp32 math.

Numerical contract (what every variant must keep, bit for bit):
each row is reduced on its own, over the columns in chunks of ``BLOCK_N``.
Chunk k adds ``x[k*BLOCK_N + j]^2`` into fp32 lane j; after the last chunk the
``BLOCK_N`` lanes are summed by one ``tl.sum``.  ``BLOCK_N`` is therefore part
of the numerics and is fixed: it never depends on M, N or the device.
``ROWS_PER_PROGRAM`` only decides how many rows one program walks through
side by side; each row keeps its own lanes, so it does not touch the order.

Inputs of any float dtype are converted to fp32 straight after loading: the
math is fp32 everywhere (and bf16 arithmetic is wrong in the CPU interpreter).

Backward contract (``rms_norm_backward``): ``dx`` is per row, reduced over the
columns exactly like the forward (``BLOCK_N`` lanes, one ``tl.sum``), so it is
batch invariant.  ``dweight`` sums ``dy * x * rstd`` over the batch: rows are
taken in fixed chunks of ``ROW_CHUNK`` (one ``tl.sum`` over a chunk's rows,
missing rows contributing 0.0), and the chunk sums are added in ascending order
into one fp32 accumulator per column.  ``ROW_CHUNK`` is part of the numerics and
never depends on M, so dweight has the same bits as the seed's at every batch
size.  dweight runs in two passes so that a GPU is full at any width: one program
per chunk of rows and ``DW_BLOCK_N`` columns writes the chunk's column sums, then
one program per ``DW_COMBINE_N`` columns adds them in ascending chunk order (the
same additions, in the same order, as one accumulator walking the chunks).

``BWD_ROWS_PER_PROGRAM`` (rows per dx program) and the column blocks only
distribute the work under the interpreter, which pays per program: on the CPU the
fewest programs.  On a GPU a dx program of 16 rows held 2 x 16 x 1024 fp32 lanes
(255 registers and spills on sm_90), so there it takes one row
(``BWD_ROWS_PER_PROGRAM_GPU``), the forward's tile; each ``NAME_GPU`` is what the
launcher takes on a GPU instead of ``NAME`` (the GPU check's compile-only replay,
which runs on CPU tensors, applies them).  On sm_90 a ``DW_BLOCK_N``
below 1024 changes the thread layout of the chunk's row sum (read in the TTGIR),
so a value under 1024 is another tree there.
"""

import torch
import triton
import triton.language as tl

BLOCK_N = 1024
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4
ROW_CHUNK = 16
# The backward's work distribution (see the docstring): the fewest programs on the CPU,
# whose interpreter pays per program; on a GPU dx rows that fit in registers and column
# sums over enough programs to fill the device.  DW_BLOCK_N stays at 2048 everywhere: on
# sm_90 a value below 1024 lays out the chunk's row sum differently (another tree).
DW_BLOCK_N = 2048
BWD_ROWS_PER_PROGRAM = 16
BWD_ROWS_PER_PROGRAM_GPU = 1
DW_COMBINE_N = 2048
DW_COMBINE_N_GPU = 128
# The combine's loads in flight ahead of its adds (a GPU's software pipeline), and one warp
# a program on a GPU, so that each thread loads four columns at once (16 bytes).
DW_COMBINE_STAGES = 32
DW_COMBINE_WARPS = 4
DW_COMBINE_WARPS_GPU = 1


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, y_ptr,
    M, N,
    stride_xm, stride_ym,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_ym

    # Sum of squares: per-lane fp32 accumulation, chunks in ascending order.
    lanes = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        lanes += x * x
    sum_sq = tl.sum(lanes, axis=1)
    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)

    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension of a 2-D ``x`` (M, N) with ``weight`` (N,)."""
    if x.dim() != 2:
        raise ValueError(f"rms_norm: x must be 2-D (M, N), got shape {tuple(x.shape)}")
    if weight.shape != (x.shape[1],):
        raise ValueError(f"rms_norm: weight must have shape ({x.shape[1]},), got {tuple(weight.shape)}")
    x = x.contiguous()
    weight = weight.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)
    _rms_norm_kernel[grid](
        x, weight, y, M, N, x.stride(0), y.stride(0), eps,
        BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    return y


@triton.jit
def _rms_norm_dx_kernel(
    x_ptr, w_ptr, dy_ptr, dx_ptr, rstd_ptr,
    M, N,
    stride_xm, stride_dym, stride_dxm,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    r64 = rows.to(tl.int64)[:, None]
    # The forward's sum of squares (same lanes, same order), and each row's
    # sum of x * w * dy, both over BLOCK_N lanes merged by one tl.sum.
    lanes_sq = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    lanes_dot = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        x = tl.load(x_ptr + r64 * stride_xm + c[None, :], mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r64 * stride_dym + c[None, :], mask=mask, other=0.0).to(tl.float32)
        lanes_sq += x * x
        lanes_dot += x * w[None, :] * dy
    rstd = 1.0 / tl.sqrt(tl.sum(lanes_sq, axis=1) / N + eps)
    coef = tl.sum(lanes_dot, axis=1) * rstd * rstd * rstd / N
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        x = tl.load(x_ptr + r64 * stride_xm + c[None, :], mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r64 * stride_dym + c[None, :], mask=mask, other=0.0).to(tl.float32)
        dx = w[None, :] * dy * rstd[:, None] - x * coef[:, None]
        tl.store(dx_ptr + r64 * stride_dxm + c[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_dw_chunks_kernel(
    x_ptr, dy_ptr, rstd_ptr, part_ptr,
    M, N,
    stride_xm, stride_dym,
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
    x = tl.load(x_ptr + r64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + r64 * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
    part = tl.sum(dy * x * rstd[:, None], axis=0)
    tl.store(part_ptr + chunk_id.to(tl.int64) * N + cols, part, mask=col_ok)


@triton.jit
def _rms_norm_dw_combine_kernel(
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
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=col_ok)


def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6):
    """Gradients (dx, dweight) of :func:`rms_norm` for the upstream gradient ``dy`` (M, N)."""
    if dy.shape != x.shape:
        raise ValueError(f"rms_norm_backward: dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    x, weight, dy = x.contiguous(), weight.contiguous(), dy.contiguous()
    M, N = x.shape
    dx = torch.empty_like(x)
    rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
    dweight = torch.empty_like(weight)
    on_cpu = x.device.type == "cpu"
    rows = BWD_ROWS_PER_PROGRAM if on_cpu else BWD_ROWS_PER_PROGRAM_GPU
    combine = DW_COMBINE_N if on_cpu else DW_COMBINE_N_GPU
    _rms_norm_dx_kernel[(triton.cdiv(M, rows),)](
        x, weight, dy, dx, rstd, M, N, x.stride(0), dy.stride(0), dx.stride(0), eps,
        BLOCK_N=BLOCK_N, ROWS=rows, num_warps=NUM_WARPS,
    )
    row_chunk = ROW_CHUNK  # part of the numerics: never a function of M
    chunks = triton.cdiv(M, row_chunk)
    part = torch.empty((chunks, N), dtype=torch.float32, device=x.device)
    _rms_norm_dw_chunks_kernel[(chunks, triton.cdiv(N, DW_BLOCK_N))](
        x, dy, rstd, part, M, N, x.stride(0), dy.stride(0),
        ROW_CHUNK=row_chunk, BLOCK=DW_BLOCK_N, num_warps=NUM_WARPS,
    )
    _rms_norm_dw_combine_kernel[(triton.cdiv(N, combine),)](
        part, dweight, chunks, N, BLOCK=combine, STAGES=DW_COMBINE_STAGES,
        num_warps=DW_COMBINE_WARPS if on_cpu else DW_COMBINE_WARPS_GPU,
    )
    return dx, dweight
