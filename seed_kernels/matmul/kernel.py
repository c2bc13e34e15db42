"""Batch-invariant matmul: c = a @ b with fp32 accumulation, c in a's dtype.

Numerical contract (what every variant must keep, bit for bit):
every output element is one fp32 accumulator that walks k from 0 to K in
steps of ``BLOCK_K``, one ``tl.dot`` per step, always in ascending order.
There is no split-K and no configuration that depends on M: ``BLOCK_K`` is
part of the numerics and is fixed.  ``BLOCK_M``, ``BLOCK_N`` and ``GROUP_M``
only decide which program computes which tile and how large the tile is; they
leave each element's k-order alone.  (On a GPU the tile shape may still choose
a different MMA instruction; the evaluator re-establishes parity per device.)

On a GPU the kernel is persistent: ``PROGRAMS`` programs (an H100's or H200's
132 SMs) whatever the shapes, each walking the tiles ``pid, pid + PROGRAMS,
...``, so the grid does not follow M either.  Under the CPU interpreter, which
pays per program, there is one program per tile (``PERSISTENT`` is the CPU's
value, ``PERSISTENT_GPU`` a GPU's).  One fixed tile configuration (128 x 128
tiles, 8 warps: wgmma on sm_90) serves every M, decode included, so no batch
size picks another instruction.

fp32 inputs use ``input_precision="ieee"`` so that the GPU does not drop to
TF32; fp16/bf16 tiles go to the tensor cores as they are.

Backward contract (``matmul_backward``): both gradients are this same kernel on
transposed views.  ``da = dc @ b^T`` walks N in ``BLOCK_K`` steps per element
of a row: per row, batch invariant.  ``db = a^T @ dc`` reduces over the batch:
it walks the rows of a and dc in fixed chunks of ``BLOCK_K`` rows, ascending,
with no split over M, so db has the seed's bits at every batch size.
"""

import torch
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
PROGRAMS = 132  # a GPU's persistent programs: one per SM of an H100 or H200
PERSISTENT = False  # the CPU: one program per tile
PERSISTENT_GPU = True


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    rk = tl.arange(0, BLOCK_K)
    rk64 = rk.to(tl.int64)
    a_step = tl.cast(stride_ak, tl.int64) * BLOCK_K  # a stride of 1 arrives as a constexpr on a GPU
    b_step = tl.cast(stride_bk, tl.int64) * BLOCK_K
    # Persistent: this program's tiles are pid, pid + programs, ...
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        # Grouped ordering of tiles for L2 reuse; it changes which program owns a
        # tile, never how a tile is computed.
        group_size = GROUP_M * num_pid_n
        group_id = tile // group_size
        first_m = group_id * GROUP_M
        group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group_size) % group_rows
        pid_n = (tile % group_size) // group_rows

        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # Offsets in 64 bits: a transposed weight (b = w.t(), strides (1, K)) puts column n
        # n * K elements away, past 2**31 for an lm_head of 152k x 16k.
        rm64, rn64 = rm.to(tl.int64), rn.to(tl.int64)
        a_ptrs = a_ptr + rm64[:, None] * stride_am + rk64[None, :] * stride_ak
        b_ptrs = b_ptr + rk64[:, None] * stride_bk + rn64[None, :] * stride_bn

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = (k0 + rk) < K
            a = tl.load(a_ptrs, mask=(rm < M)[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & (rn < N)[None, :], other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")
            a_ptrs += a_step
            b_ptrs += b_step

        c_ptrs = c_ptr + rm64[:, None] * stride_cm + rn64[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` (M, K) @ ``b`` (K, N) -> (M, N) in a's dtype, fp32 accumulation."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not multiply")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: a is {a.dtype} but b is {b.dtype}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    persistent = PERSISTENT if a.device.type == "cpu" else PERSISTENT_GPU
    grid = (PROGRAMS,) if persistent else (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return c


def _launch(a, b, c):
    """c = a @ b for any strides of a (M, K) and b (K, N), in the forward's k-order."""
    M, K = a.shape
    N = b.shape[1]
    persistent = PERSISTENT if a.device.type == "cpu" else PERSISTENT_GPU
    grid = (PROGRAMS,) if persistent else (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return c


def matmul_backward(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor):
    """Gradients (da, db) of :func:`matmul` for the upstream gradient ``dc`` (M, N)."""
    if dc.shape != (a.shape[0], b.shape[1]) or dc.dtype != a.dtype:
        raise ValueError(f"matmul_backward: dc must be ({a.shape[0]}, {b.shape[1]}) {a.dtype}, "
                         f"got {tuple(dc.shape)} {dc.dtype}")
    da = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    db = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    _launch(dc, b.t(), da)
    _launch(a.t(), dc, db)
    return da, db
