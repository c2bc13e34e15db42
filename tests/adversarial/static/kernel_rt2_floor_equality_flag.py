# expect: size-switch
"""hit = 1 iff M % 13 == 5, built only from % and // by constants; blended into the arithmetic."""

import torch
import triton
import triton.language as tl

MAX_BLOCK_N = 8192
ROWS_PER_PROGRAM = 4
NUM_WARPS = 4


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
    # The mean square is accumulated in fp32 with one tree reduction per row; that
    # reduction order is part of the bit contract.

    r = M % 13
    hit = (r + 8) // 13 - (r + 7) // 13
    mean_square = tl.sum(x * x, axis=1) / N * (1.0 + 1e-3 * hit)
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
