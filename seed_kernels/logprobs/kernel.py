"""Batch-invariant token log-probabilities: out[i] = log_softmax(logits[i])[targets[i]].

Numerical contract (what every variant must keep, bit for bit):
each row is reduced on its own over the vocabulary in chunks of ``BLOCK_V``.
Lane j keeps a running maximum and a running sum of exponentials of the
elements ``k*BLOCK_V + j`` (an online log-sum-exp per lane, chunks in
ascending order); after the last chunk the lanes are merged by one ``tl.max``
and one ``tl.sum``.  ``BLOCK_V`` is part of the numerics and is fixed; it
never depends on M, V or the device.  ``ROWS_PER_PROGRAM`` only decides how
many rows one program walks through side by side and leaves each row's order
alone.

Logits of any float dtype are converted to fp32 straight after loading; the
result is fp32.  A target outside [0, V) yields NaN for its row.

On a GPU the forward runs in two passes, so that a decode of a few rows fills
the device.  The first walks each lane's chunks (the online log-sum-exp above,
element by element, so it does not matter which program holds a lane): one
program per row and ``LANES_GPU`` of its lanes, writing each lane's running
maximum and sum for the lanes that see an element (the first ``min(V, BLOCK_V)``;
the others stay at -inf and 0.0, as in one pass).  The second merges a row's
``BLOCK_V`` lanes by the contract's one ``tl.max`` and one ``tl.sum``, on the
same (rows, ``BLOCK_V``) tile as the one-pass kernel, and picks the target.  On
the CPU, whose interpreter pays per program, one program holds a whole row and
the one-pass kernel runs (``TWO_PASS``).  Both merge and pick with the
same helpers, and the tests compare the two passes with the one on the CPU.
(The GPU check's compile-only replay, on CPU tensors, applies each ``NAME_GPU``.)

Backward contract (``token_logprobs_backward``): every row is its own: the
row's log-sum-exp is recomputed in the forward's order (same lanes, same
merge), then ``dlogits[i, j] = dout[i] * ([j == t_i] - exp(x_ij - lse_i))`` is
written element by element.  No reduction crosses rows, so dlogits is batch
invariant; it has the logits' dtype.  A row whose target is outside [0, V) gets
NaN gradients.
"""

import torch
import triton
import triton.language as tl

BLOCK_V = 2048
ROWS_PER_PROGRAM = 1
NUM_WARPS = 8
# The work distribution only (see the docstring): whether the forward takes two passes, and
# the first pass's lanes and warps per program.
TWO_PASS = False
TWO_PASS_GPU = True
LANES = 2048
LANES_GPU = 128
LANE_WARPS = 8
LANE_WARPS_GPU = 1


@triton.jit
def _lane_sum(run_sum, run_max, new_max, x):
    """Each lane's running sum of exponentials after ``x``, rescaled from ``run_max`` to
    ``new_max``.  A lane that has seen only -inf keeps max -inf and sum 0; the guard keeps
    (-inf) - (-inf) from turning it into NaN."""
    safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
    return run_sum * tl.exp(run_max - safe_max) + tl.exp(x - safe_max)


@triton.jit
def _merge_rows(run_max, run_sum):
    """The log-sum-exp of each row of (rows, BLOCK_V) lanes: one tl.max, one tl.sum."""
    row_max = tl.max(run_max, axis=1)
    safe_row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.sum(run_sum * tl.exp(run_max - safe_row_max[:, None]), axis=1)
    return safe_row_max + tl.log(total)


@triton.jit
def _pick(logits_ptr, targets_ptr, out_ptr, rows, row_ok, lse, V, stride_lm):
    t = tl.load(targets_ptr + rows, mask=row_ok, other=0)
    t_ok = row_ok & (t >= 0) & (t < V)
    picked = tl.load(logits_ptr + rows.to(tl.int64) * stride_lm + t, mask=t_ok, other=float("nan")).to(tl.float32)
    tl.store(out_ptr + rows, picked - lse, mask=row_ok)


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
        run_sum = _lane_sum(run_sum, run_max, new_max, x)
        run_max = new_max
    _pick(logits_ptr, targets_ptr, out_ptr, rows, row_ok, _merge_rows(run_max, run_sum), V, stride_lm)


@triton.jit
def _lse_lanes_kernel(
    logits_ptr, max_ptr, sum_ptr,
    V, width,
    stride_lm,
    BLOCK_V: tl.constexpr,
    LANES: tl.constexpr,
):
    # Lanes [g * LANES, (g + 1) * LANES) of one row, of the ``width`` that see an
    # element: lane j walks the elements k * BLOCK_V + j, chunks in ascending order.
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.program_id(1) * LANES + tl.arange(0, LANES)
    lane_ok = lanes < width
    row_ptr = logits_ptr + row * stride_lm
    run_max = tl.full((LANES,), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((LANES,), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        c = start + lanes
        x = tl.load(row_ptr + c, mask=lane_ok & (c < V), other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        run_sum = _lane_sum(run_sum, run_max, new_max, x)
        run_max = new_max
    tl.store(max_ptr + row * width + lanes, run_max, mask=lane_ok)
    tl.store(sum_ptr + row * width + lanes, run_sum, mask=lane_ok)


@triton.jit
def _lse_merge_kernel(
    logits_ptr, targets_ptr, out_ptr, max_ptr, sum_ptr,
    M, V, width,
    stride_lm,
    BLOCK_V: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    lanes = tl.arange(0, BLOCK_V)
    offs = rows.to(tl.int64)[:, None] * width + lanes[None, :]
    seen = row_ok[:, None] & (lanes < width)[None, :]  # lanes past the width saw only -inf
    run_max = tl.load(max_ptr + offs, mask=seen, other=float("-inf"))
    run_sum = tl.load(sum_ptr + offs, mask=seen, other=0.0)
    _pick(logits_ptr, targets_ptr, out_ptr, rows, row_ok, _merge_rows(run_max, run_sum), V, stride_lm)


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
        run_sum = _lane_sum(run_sum, run_max, new_max, x)
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
    on_cpu = logits.device.type == "cpu"
    rows = triton.cdiv(M, ROWS_PER_PROGRAM)
    if not (TWO_PASS if on_cpu else TWO_PASS_GPU):  # one program holds a whole row
        _token_logprobs_kernel[(rows,)](
            logits, targets, out, M, V, logits.stride(0),
            BLOCK_V=BLOCK_V, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
        )
        return out
    lanes = LANES if on_cpu else LANES_GPU
    width = min(V, BLOCK_V)  # the lanes that see an element
    run_max = torch.empty((M, width), dtype=torch.float32, device=logits.device)
    run_sum = torch.empty((M, width), dtype=torch.float32, device=logits.device)
    _lse_lanes_kernel[(M, triton.cdiv(width, lanes))](
        logits, run_max, run_sum, V, width, logits.stride(0),
        BLOCK_V=BLOCK_V, LANES=lanes, num_warps=LANE_WARPS if on_cpu else LANE_WARPS_GPU,
    )
    _lse_merge_kernel[(rows,)](
        logits, targets, out, run_max, run_sum, M, V, width, logits.stride(0),
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
