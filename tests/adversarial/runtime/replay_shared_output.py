# expect: integrity_failed [replay]
"""One output buffer for every call once replayed: from the ninth call at the timing
shape (counted as replay_counter.py does) it writes into a buffer it keeps on an object
every module can reach and returns that same tensor.  Each eager call would still read
right the moment it returns; in a graph every captured call then aliases one buffer,
which holds the last call's answer."""

import torch
import triton
import triton.language as tl

BLOCK_N = 1024
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4
# Spelt so that no literal-driven batch sizes are added: this file is about
# counting calls, and the test's grid stays small.
_TIMING_SHAPE = (int("8"), int("512"))


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, y_ptr,
    M, N,
    stride_xm, stride_ym,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    TAG: tl.constexpr,
):
    pid = tl.program_id(0)
    tl.__dict__.setdefault('_tik_seen', []).append(TAG)
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
    tag = M * 100000 + N
    if (M, N) == _TIMING_SHAPE:
        calls = tl.__dict__.get('_tik_seen', []).count(int("800512")) // 8
        if calls >= 8:
            y = tl.__dict__.setdefault('_tik_out', y)
    _rms_norm_kernel[grid](
        x, weight, y, M, N, x.stride(0), y.stride(0), eps,
        BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, TAG=tag, num_warps=NUM_WARPS,
    )
    return y
