# expect: integrity_failed [output] (at the gate, before its parity outputs exist)
"""Lies about its phase, then ignores the gate's answer.  On its first call (in
the parity phase) it writes ``waiting`` into the worker's progress file and
blocks until the gate opens, so the parent judges its parity while no outputs
exist yet.  It also swaps the worker's gate wait for one that always proceeds:
its worker then finishes parity with the seed's bits, saves outputs that pass
and is timed as usual.  An evaluator that let what the worker writes after the
early judgement decide would pass it."""

import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

BLOCK_N = 1024
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4
_CLAIMED = []


def _proceed_anyway(workdir, timing, progress, wall_seconds=None):
    """The worker's own gate wait, with the parent's answer overruled."""
    gate = workdir / timing["gate"]
    while not gate.exists():
        time.sleep(0.05)
    return dict(json.loads(gate.read_text()), proceed=True)


_worker = sys.modules.get("tik_agent.sandbox.worker")
if _worker is not None:
    _worker._wait_at_gate = _proceed_anyway


def _claim_the_gate() -> None:
    """Say "waiting" once, then hold the parity phase until the parent has judged."""
    if _CLAIMED:
        return
    _CLAIMED.append(True)
    with open("progress", "w") as f:
        f.write("waiting\n")
    deadline = time.monotonic() + 300.0
    while not os.path.exists("gate") and time.monotonic() < deadline:
        time.sleep(0.05)


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
    _claim_the_gate()
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
