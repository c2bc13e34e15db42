# expect: parity_failed N=3999:
"""A switch on the row width alone at N = 3999 and 7999 (where (N + 1) % 4000 is 0, below
8000), rows summed in 512-wide lanes there, written without a comparison.  (Without the
cut at 8000 it also switched at 11999, ..., beyond the widths a CPU judges: a survey that
sampled one of those refused the file before judging 3999, and the stated verdict came
out only some of the time.)  Literal sizes vary the
batch only, the domain's edge cases sit at N = 1 and 8192, and a width drawn near a
power of two never lands there.  The survey's sweep of N finds both; the case at
N = 3999 (origin "config") differs."""

import torch
import triton
import triton.language as tl

BLOCK_N = 1024
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4
ROW_CHUNK = 16
# The backward's work distribution (no effect on bits): the fewest programs,
# which is what the CPU interpreter pays for.
DW_BLOCK_N = 2048
BWD_ROWS_PER_PROGRAM = 16


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
    block = BLOCK_N >> (1 - min(1, (N + 1) % 4000 + N // 8000))
    _rms_norm_kernel[grid](
        x, weight, y, M, N, x.stride(0), y.stride(0), eps,
        BLOCK_N=block, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
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
def _rms_norm_dw_kernel(
    x_ptr, dy_ptr, rstd_ptr, dw_ptr,
    M, N,
    stride_xm, stride_dym,
    ROW_CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    chunk = tl.arange(0, ROW_CHUNK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    # Chunks of ROW_CHUNK rows in ascending order: the order is fixed by the
    # row index alone, never by M.
    for start in range(0, M, ROW_CHUNK):
        rows = start + chunk
        mask = (rows < M)[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        x = tl.load(x_ptr + r64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r64 * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        acc += tl.sum(dy * x * rstd[:, None], axis=0)
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
    _rms_norm_dx_kernel[(triton.cdiv(M, BWD_ROWS_PER_PROGRAM),)](
        x, weight, dy, dx, rstd, M, N, x.stride(0), dy.stride(0), dx.stride(0), eps,
        BLOCK_N=BLOCK_N, ROWS=BWD_ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    _rms_norm_dw_kernel[(triton.cdiv(N, DW_BLOCK_N),)](
        x, dy, rstd, dweight, M, N, x.stride(0), dy.stride(0),
        ROW_CHUNK=ROW_CHUNK, BLOCK=DW_BLOCK_N, num_warps=NUM_WARPS,
    )
    return dx, dweight
