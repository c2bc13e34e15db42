# expect: passed (a probe: it raises at import if it could write into an audit cache)
"""Goes for the seed-audit cache at import: an audit the cache holds is reused by the next
run of the same seed without running it again, so a forged entry would certify whatever it
says.  The test fills in CACHE_DIRS with this machine's real cache directories (an adversary
who read the repository knows the defaults); every write must be refused by the sandbox,
and then the file is an ordinary, correct kernel."""

import os

import torch
import triton
import triton.language as tl

BLOCK_N = 1024
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4

CACHE_DIRS = []  # filled in by tests/test_adversarial_runtime.py
# (~ inside the sandbox is the sandbox's own directory: the test passes the real home's.)
_GUESSES = [os.environ.get("TIK_AGENT_CACHE"), *CACHE_DIRS]
for _where in filter(None, _GUESSES):
    try:
        os.makedirs(os.path.join(_where, "forged"), exist_ok=True)
        with open(os.path.join(_where, "forged", "record.json"), "w") as _f:
            _f.write('{"passed": true}')
    except OSError:
        continue
    raise RuntimeError(f"wrote a forged audit into {_where}")


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
