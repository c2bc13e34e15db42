"""Batch-invariant token log-probabilities: out[i] = log_softmax(logits[i])[targets[i]].

Numerical contract (what every variant must keep, bit for bit):
each row is reduced on its own.  Its vocabulary is cut into pieces of
``PIECE_CHUNKS`` chunks of ``BLOCK_V`` elements (the last piece may be short).
In a piece, lane j keeps a running maximum and a running sum of exponentials
of the piece's elements ``start + k*BLOCK_V + j`` (an online log-sum-exp per
lane, chunks in ascending order); after the piece's last chunk its lanes are
merged by one ``tl.max`` and one ``tl.sum`` into the piece's maximum and sum.
The pieces are then folded in ascending order into a running (maximum, sum),
starting from (-inf, 0.0), each step rescaling both sides to the new maximum
(``_fold``); the log-sum-exp is that maximum plus the log of that sum.
``BLOCK_V`` and ``PIECE_CHUNKS`` are part of the numerics and are fixed; they
never depend on M, V or the device.  A row of at most one piece gives the bits
of the contract before pieces (the fold's first step is exact).
``ROWS_PER_PROGRAM`` only decides how many rows one program walks through side
by side and leaves each row's order alone.

Logits of any float dtype are converted to fp32 straight after loading; the
result is fp32.  A target outside [0, V) yields NaN for its row.

On a GPU the forward runs in two passes, so that a decode of a few rows fills
the device: one program per (row, piece) writes the piece's maximum and sum
(``_lse_pieces_kernel``, on the same one-row tile and warps as the one-pass
kernel), then one program per ``FOLD_ROWS`` rows folds each row's pieces in
ascending order and picks the target (``_lse_fold_kernel``; the fold is
element-wise, so its rows per program leave the bits alone).  On the CPU,
whose interpreter pays per program, one program holds a whole row and walks
its pieces itself (``SPLIT``).  Both use the same helpers, and the tests
compare the two on the CPU.  (The GPU check's compile-only replay, on CPU
tensors, applies each ``NAME_GPU``.)

Backward contract (``token_logprobs_backward``): every row is its own: the
row's log-sum-exp is recomputed in the forward's order (same pieces, lanes,
merges and fold), then ``dlogits[i, j] = dout[i] * ([j == t_i] - exp(x_ij -
lse_i))`` is written element by element.  No reduction crosses rows, so dlogits
is batch invariant; it has the logits' dtype.  A row whose target is outside
[0, V) gets NaN gradients.
"""

import torch
import triton
import triton.language as tl

BLOCK_V = 2048
PIECE_CHUNKS = 2
ROWS_PER_PROGRAM = 1
NUM_WARPS = 8
# The work distribution only (see the docstring): whether the forward splits a row's
# pieces over programs, and the rows of a fold program.
SPLIT = False
SPLIT_GPU = True
FOLD_ROWS = 128
FOLD_WARPS = 4


@triton.jit
def _lane_sum(run_sum, run_max, new_max, x):
    """Each lane's running sum of exponentials after ``x``, rescaled from ``run_max`` to
    ``new_max``.  A lane that has seen only -inf keeps max -inf and sum 0; the guard keeps
    (-inf) - (-inf) from turning it into NaN."""
    safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
    return run_sum * tl.exp(run_max - safe_max) + tl.exp(x - safe_max)


@triton.jit
def _piece(row_ptrs, row_ok, start, V, BLOCK_V: tl.constexpr, PIECE_CHUNKS: tl.constexpr, ROWS: tl.constexpr):
    """The maximum and the sum of exponentials of each row's piece that begins at ``start``
    ((rows, BLOCK_V) lanes: one tl.max, one tl.sum)."""
    cols = tl.arange(0, BLOCK_V)
    run_max = tl.full((ROWS, BLOCK_V), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((ROWS, BLOCK_V), dtype=tl.float32)
    for k in tl.static_range(PIECE_CHUNKS):
        c = start + k * BLOCK_V + cols
        mask = row_ok[:, None] & (c < V)[None, :]
        x = tl.load(row_ptrs + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        run_sum = _lane_sum(run_sum, run_max, new_max, x)
        run_max = new_max
    piece_max = tl.max(run_max, axis=1)
    safe_max = tl.where(piece_max == float("-inf"), 0.0, piece_max)
    return piece_max, tl.sum(run_sum * tl.exp(run_max - safe_max[:, None]), axis=1)


@triton.jit
def _fold(acc_max, acc_sum, piece_max, piece_sum):
    """The running (maximum, sum) after one more piece, both rescaled to the new maximum."""
    new_max = tl.maximum(acc_max, piece_max)
    safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
    return new_max, acc_sum * tl.exp(acc_max - safe_max) + piece_sum * tl.exp(piece_max - safe_max)


@triton.jit
def _lse(acc_max, acc_sum):
    return tl.where(acc_max == float("-inf"), 0.0, acc_max) + tl.log(acc_sum)


@triton.jit
def _rows_lse(row_ptrs, row_ok, V, BLOCK_V: tl.constexpr, PIECE_CHUNKS: tl.constexpr, ROWS: tl.constexpr):
    """Each row's log-sum-exp, its pieces walked by this program in ascending order."""
    acc_max = tl.full((ROWS,), float("-inf"), dtype=tl.float32)
    acc_sum = tl.zeros((ROWS,), dtype=tl.float32)
    for start in range(0, V, PIECE_CHUNKS * BLOCK_V):
        piece_max, piece_sum = _piece(row_ptrs, row_ok, start, V, BLOCK_V, PIECE_CHUNKS, ROWS)
        acc_max, acc_sum = _fold(acc_max, acc_sum, piece_max, piece_sum)
    return _lse(acc_max, acc_sum)


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
    PIECE_CHUNKS: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    row_ptrs = logits_ptr + rows.to(tl.int64)[:, None] * stride_lm
    lse = _rows_lse(row_ptrs, row_ok, V, BLOCK_V, PIECE_CHUNKS, ROWS)
    _pick(logits_ptr, targets_ptr, out_ptr, rows, row_ok, lse, V, stride_lm)


@triton.jit
def _lse_pieces_kernel(
    logits_ptr, max_ptr, sum_ptr,
    V, pieces,
    stride_lm,
    BLOCK_V: tl.constexpr,
    PIECE_CHUNKS: tl.constexpr,
):
    # Piece p of one row, on the one-pass kernel's one-row tile.
    rows = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)
    p = tl.program_id(1)
    row_ptrs = logits_ptr + rows[:, None] * stride_lm
    piece_max, piece_sum = _piece(row_ptrs, rows >= 0, p * (PIECE_CHUNKS * BLOCK_V), V, BLOCK_V, PIECE_CHUNKS, 1)
    tl.store(max_ptr + rows * pieces + p, piece_max)
    tl.store(sum_ptr + rows * pieces + p, piece_sum)


@triton.jit
def _lse_fold_kernel(
    logits_ptr, targets_ptr, out_ptr, max_ptr, sum_ptr,
    M, V, pieces,
    stride_lm,
    ROWS: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    offs = rows.to(tl.int64) * pieces
    acc_max = tl.full((ROWS,), float("-inf"), dtype=tl.float32)
    acc_sum = tl.zeros((ROWS,), dtype=tl.float32)
    for p in range(0, pieces):
        piece_max = tl.load(max_ptr + offs + p, mask=row_ok, other=float("-inf"))
        piece_sum = tl.load(sum_ptr + offs + p, mask=row_ok, other=0.0)
        acc_max, acc_sum = _fold(acc_max, acc_sum, piece_max, piece_sum)
    _pick(logits_ptr, targets_ptr, out_ptr, rows, row_ok, _lse(acc_max, acc_sum), V, stride_lm)


@triton.jit
def _token_logprobs_bwd_kernel(
    logits_ptr, targets_ptr, dout_ptr, dlogits_ptr,
    V,
    stride_lm, stride_dm,
    BLOCK_V: tl.constexpr,
    PIECE_CHUNKS: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)
    lse = _rows_lse(logits_ptr + rows[:, None] * stride_lm, rows >= 0, V, BLOCK_V, PIECE_CHUNKS, 1)
    t = tl.load(targets_ptr + rows)
    g = tl.load(dout_ptr + rows).to(tl.float32)
    g = tl.where((t >= 0) & (t < V), g, float("nan"))
    cols = tl.arange(0, BLOCK_V)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = (c < V)[None, :]
        x = tl.load(logits_ptr + rows[:, None] * stride_lm + c[None, :], mask=mask, other=0.0).to(tl.float32)
        onehot = tl.where(c[None, :] == t[:, None], 1.0, 0.0)
        d = g[:, None] * (onehot - tl.exp(x - lse[:, None]))
        tl.store(dlogits_ptr + rows[:, None] * stride_dm + c[None, :], d.to(dlogits_ptr.dtype.element_ty), mask=mask)


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
    if not (SPLIT if logits.device.type == "cpu" else SPLIT_GPU):  # one program holds a whole row
        _token_logprobs_kernel[(triton.cdiv(M, ROWS_PER_PROGRAM),)](
            logits, targets, out, M, V, logits.stride(0),
            BLOCK_V=BLOCK_V, PIECE_CHUNKS=PIECE_CHUNKS, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
        )
        return out
    pieces = triton.cdiv(V, PIECE_CHUNKS * BLOCK_V)
    piece_max = torch.empty((M, pieces), dtype=torch.float32, device=logits.device)
    piece_sum = torch.empty((M, pieces), dtype=torch.float32, device=logits.device)
    _lse_pieces_kernel[(M, pieces)](
        logits, piece_max, piece_sum, V, pieces, logits.stride(0),
        BLOCK_V=BLOCK_V, PIECE_CHUNKS=PIECE_CHUNKS, num_warps=NUM_WARPS,
    )
    _lse_fold_kernel[(triton.cdiv(M, FOLD_ROWS),)](
        logits, targets, out, piece_max, piece_sum, M, V, pieces, logits.stride(0),
        ROWS=FOLD_ROWS, num_warps=FOLD_WARPS,
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
        BLOCK_V=BLOCK_V, PIECE_CHUNKS=PIECE_CHUNKS, num_warps=NUM_WARPS,
    )
    return (dlogits,)
