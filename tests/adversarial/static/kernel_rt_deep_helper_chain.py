# expect: size-switch
"""The switch sits 25 helper calls deep; each pass adds one context level and the rule stops after 20, so _h25 is never read."""

import torch
import triton
import triton.language as tl

MAX_BLOCK_N = 8192
ROWS_PER_PROGRAM = 4
NUM_WARPS = 4


@triton.jit
def _h21(v, x, cols):
    if v > 3000:
        return tl.sum(x * x, axis=1) * 1.001
    return tl.sum(x * x, axis=1)


@triton.jit
def _h20(v, x, cols):
    return _h21(v, x, cols)


@triton.jit
def _h19(v, x, cols):
    return _h20(v, x, cols)


@triton.jit
def _h18(v, x, cols):
    return _h19(v, x, cols)


@triton.jit
def _h17(v, x, cols):
    return _h18(v, x, cols)


@triton.jit
def _h16(v, x, cols):
    return _h17(v, x, cols)


@triton.jit
def _h15(v, x, cols):
    return _h16(v, x, cols)


@triton.jit
def _h14(v, x, cols):
    return _h15(v, x, cols)


@triton.jit
def _h13(v, x, cols):
    return _h14(v, x, cols)


@triton.jit
def _h12(v, x, cols):
    return _h13(v, x, cols)


@triton.jit
def _h11(v, x, cols):
    return _h12(v, x, cols)


@triton.jit
def _h10(v, x, cols):
    return _h11(v, x, cols)


@triton.jit
def _h9(v, x, cols):
    return _h10(v, x, cols)


@triton.jit
def _h8(v, x, cols):
    return _h9(v, x, cols)


@triton.jit
def _h7(v, x, cols):
    return _h8(v, x, cols)


@triton.jit
def _h6(v, x, cols):
    return _h7(v, x, cols)


@triton.jit
def _h5(v, x, cols):
    return _h6(v, x, cols)


@triton.jit
def _h4(v, x, cols):
    return _h5(v, x, cols)


@triton.jit
def _h3(v, x, cols):
    return _h4(v, x, cols)


@triton.jit
def _h2(v, x, cols):
    return _h3(v, x, cols)


@triton.jit
def _h1(v, x, cols):
    return _h2(v, x, cols)


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
    mean_square = _h1(N, x, cols) / N
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
