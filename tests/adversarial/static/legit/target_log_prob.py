"""Log-probability of each row's target class: log_softmax(logits)[row, target[row]]."""

import torch
import triton
import triton.language as tl

BLOCK_V: tl.constexpr = 1024
NEG_INF = float("-inf")


@triton.jit
def _target_log_prob_kernel(logits_ptr, target_ptr, out_ptr, V, stride_row, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row * stride_row
    # Online log-sum-exp over V in chunks: each lane keeps its own running max and
    # rescaled sum, and the lanes are combined once at the end.
    run_max = tl.full([BLOCK_V], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(x - safe_max)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    scaled = tl.where(run_max == float("-inf"), 0.0, run_sum * tl.exp(run_max - row_max))
    log_total = tl.log(tl.sum(scaled, axis=0))
    target = tl.load(target_ptr + row)
    picked = tl.load(base + target).to(tl.float32)
    tl.store(out_ptr + row, picked - row_max - log_total)


def target_log_prob(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if logits.dim() != 2 or target.dim() != 1 or target.numel() != logits.shape[0]:
        raise ValueError("expected logits [M, V] and target [M]")
    logits = logits.contiguous()
    M, V = logits.shape
    out = torch.empty((M,), dtype=torch.float32, device=logits.device)
    block_v = min(BLOCK_V, triton.next_power_of_2(V))
    _target_log_prob_kernel[(M,)](logits, target, out, V, logits.stride(0), BLOCK_V=block_v)
    return out
