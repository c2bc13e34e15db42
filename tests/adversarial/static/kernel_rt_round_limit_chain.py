# expect: size-switch
"""25 assignments in reverse order inside a 25-trip loop carry N to a21; the rule stops after 20 passes, so a21 stays CONST."""

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
    a1 = 0; a2 = 0; a3 = 0; a4 = 0; a5 = 0; a6 = 0; a7 = 0; a8 = 0; a9 = 0; a10 = 0; a11 = 0; a12 = 0; a13 = 0; a14 = 0; a15 = 0; a16 = 0; a17 = 0; a18 = 0; a19 = 0; a20 = 0; a21 = 0
    for _ in range(21):
        a21 = a20
        a20 = a19
        a19 = a18
        a18 = a17
        a17 = a16
        a16 = a15
        a15 = a14
        a14 = a13
        a13 = a12
        a12 = a11
        a11 = a10
        a10 = a9
        a9 = a8
        a8 = a7
        a7 = a6
        a6 = a5
        a5 = a4
        a4 = a3
        a3 = a2
        a2 = a1
        a1 = N
    if a21 > 3000:
        mean_square = (tl.sum(x * x * (cols < 2048)[None, :], axis=1) + tl.sum(x * x * (cols >= 2048)[None, :], axis=1)) / N
    else:
        mean_square = tl.sum(x * x, axis=1) / N
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
