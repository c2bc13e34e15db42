# expect: size-switch
"""64 dummy call signatures fill the rule's context table; later callers of _sum_sq share one union context, where width = N (size) joins width = pid (index) and reads as mixed."""

import torch
import triton
import triton.language as tl

MAX_BLOCK_N = 8192
ROWS_PER_PROGRAM = 4
NUM_WARPS = 4


@triton.jit
def _d(a, b, c):
    return a


@triton.jit
def _filler(p):
    i = tl.program_id(0)
    d = tl.load(p)
    z = _d(p, p, p)
    z = _d(p, p, i)
    z = _d(p, p, d)
    z = _d(p, p, 0)
    z = _d(p, i, p)
    z = _d(p, i, i)
    z = _d(p, i, d)
    z = _d(p, i, 0)
    z = _d(p, d, p)
    z = _d(p, d, i)
    z = _d(p, d, d)
    z = _d(p, d, 0)
    z = _d(p, 0, p)
    z = _d(p, 0, i)
    z = _d(p, 0, d)
    z = _d(p, 0, 0)
    z = _d(i, p, p)
    z = _d(i, p, i)
    z = _d(i, p, d)
    z = _d(i, p, 0)
    z = _d(i, i, p)
    z = _d(i, i, i)
    z = _d(i, i, d)
    z = _d(i, i, 0)
    z = _d(i, d, p)
    z = _d(i, d, i)
    z = _d(i, d, d)
    z = _d(i, d, 0)
    z = _d(i, 0, p)
    z = _d(i, 0, i)
    z = _d(i, 0, d)
    z = _d(i, 0, 0)
    z = _d(d, p, p)
    z = _d(d, p, i)
    z = _d(d, p, d)
    z = _d(d, p, 0)
    z = _d(d, i, p)
    z = _d(d, i, i)
    z = _d(d, i, d)
    z = _d(d, i, 0)
    z = _d(d, d, p)
    z = _d(d, d, i)
    z = _d(d, d, d)
    z = _d(d, d, 0)
    z = _d(d, 0, p)
    z = _d(d, 0, i)
    z = _d(d, 0, d)
    z = _d(d, 0, 0)
    z = _d(0, p, p)
    z = _d(0, p, i)
    z = _d(0, p, d)
    z = _d(0, p, 0)
    z = _d(0, i, p)
    z = _d(0, i, i)
    z = _d(0, i, d)
    z = _d(0, i, 0)
    z = _d(0, d, p)
    z = _d(0, d, i)
    z = _d(0, d, d)
    z = _d(0, d, 0)
    z = _d(0, 0, p)
    z = _d(0, 0, i)
    z = _d(0, 0, d)
    z = _d(0, 0, 0)


@triton.jit
def _sum_sq(width, x, cols):
    if width > 3000:
        return tl.sum(x * x * (cols < 2048)[None, :], axis=1) + tl.sum(x * x * (cols >= 2048)[None, :], axis=1)
    return tl.sum(x * x, axis=1)


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean_square = _sum_sq(N, x, cols) / N
    unused = _sum_sq(pid, x, cols)
    rstd = 1.0 / tl.sqrt(mean_square + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"expected a 2D input, got shape {tuple(x.shape)}")
    x = x.contiguous()
    M, N = x.shape
    block_n = triton.next_power_of_2(N)
    if block_n > MAX_BLOCK_N:
        raise ValueError(f"rows of {N} elements exceed {MAX_BLOCK_N}")
    assert weight.shape == (N,), "weight must match the last dimension"
    y = torch.empty_like(x)
    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)
    _rms_norm_kernel[grid](
        x, weight, y, M, N, x.stride(0), y.stride(0), eps,
        BLOCK_N=block_n, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )  # fmt: skip
    return y
