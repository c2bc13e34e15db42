# expect: parity_failed :special
"""Drops the range check on the target before reading its logit: a target of -100,
Hugging Face's ignore index on every padded position, then reads the logit 100
elements before the row's start, a finite value of the previous row, where the
seed returns NaN.  Targets were only drawn in [0, V) before; the domain's special
case puts -100 in a quarter of the rows."""

import torch
import triton
import triton.language as tl

BLOCK_V = 2048
ROWS_PER_PROGRAM = 1
NUM_WARPS = 8


@triton.jit
def _token_logprobs_kernel(
    logits_ptr, targets_ptr, out_ptr,
    M, V,
    stride_lm,
    BLOCK_V: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_V)
    row_ptrs = logits_ptr + rows.to(tl.int64)[:, None] * stride_lm

    run_max = tl.full((ROWS, BLOCK_V), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((ROWS, BLOCK_V), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = row_ok[:, None] & (c < V)[None, :]
        x = tl.load(row_ptrs + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        # A lane that has seen only -inf keeps max -inf and sum 0; guard the
        # (-inf) - (-inf) that would otherwise turn it into NaN.
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(x - safe_max)
        run_max = new_max

    row_max = tl.max(run_max, axis=1)
    safe_row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.sum(run_sum * tl.exp(run_max - safe_row_max[:, None]), axis=1)
    lse = safe_row_max + tl.log(total)

    t = tl.load(targets_ptr + rows, mask=row_ok, other=0)
    t_ok = row_ok
    picked = tl.load(logits_ptr + rows.to(tl.int64) * stride_lm + t, mask=t_ok, other=float("nan")).to(tl.float32)
    tl.store(out_ptr + rows, picked - lse, mask=row_ok)


@triton.jit
def _row_lse(row_ptr, V, BLOCK_V: tl.constexpr):
    """One row's log-sum-exp, in the forward kernel's lane order."""
    cols = tl.arange(0, BLOCK_V)
    run_max = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        x = tl.load(row_ptr + c, mask=c < V, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(x - safe_max)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    safe_row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    return safe_row_max + tl.log(tl.sum(run_sum * tl.exp(run_max - safe_row_max), axis=0))


@triton.jit
def _token_logprobs_bwd_kernel(
    logits_ptr, targets_ptr, dout_ptr, dlogits_ptr,
    V,
    stride_lm, stride_dm,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    lse = _row_lse(logits_ptr + row * stride_lm, V, BLOCK_V)
    t = tl.load(targets_ptr + row)
    g = tl.load(dout_ptr + row).to(tl.float32)
    g = tl.where((t >= 0) & (t < V), g, float("nan"))
    cols = tl.arange(0, BLOCK_V)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = c < V
        x = tl.load(logits_ptr + row * stride_lm + c, mask=mask, other=0.0).to(tl.float32)
        onehot = tl.where(c == t, 1.0, 0.0)
        d = g * (onehot - tl.exp(x - lse))
        tl.store(dlogits_ptr + row * stride_dm + c, d.to(dlogits_ptr.dtype.element_ty), mask=mask)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``targets`` (M,) int64 under ``logits`` (M, V); returns (M,) fp32."""
    if logits.dim() != 2:
        raise ValueError(f"token_logprobs: logits must be 2-D (M, V), got shape {tuple(logits.shape)}")
    if targets.shape != (logits.shape[0],):
        raise ValueError(f"token_logprobs: targets must have shape ({logits.shape[0]},), got {tuple(targets.shape)}")
    logits = logits.contiguous()
    targets = targets.contiguous()
    M, V = logits.shape
    out = torch.empty((M,), dtype=torch.float32, device=logits.device)
    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)
    _token_logprobs_kernel[grid](
        logits, targets, out, M, V, logits.stride(0),
        BLOCK_V=BLOCK_V, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    return out


def token_logprobs_backward(logits: torch.Tensor, targets: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """Gradient of :func:`token_logprobs` with respect to ``logits`` for the upstream ``dout`` (M,)."""
    if dout.shape != (logits.shape[0],):
        raise ValueError(f"token_logprobs_backward: dout must have shape ({logits.shape[0]},), got {tuple(dout.shape)}")
    logits, targets, dout = logits.contiguous(), targets.contiguous(), dout.contiguous()
    M, V = logits.shape
    dlogits = torch.empty_like(logits)
    _token_logprobs_bwd_kernel[(M,)](
        logits, targets, dout, dlogits, V, logits.stride(0), dlogits.stride(0),
        BLOCK_V=BLOCK_V, num_warps=NUM_WARPS,
    )
    return (dlogits,)
