"""Token log-probs of logits / temperature: the reciprocal of the run-time temperature is taken once."""

import torch
import triton
import triton.language as tl


@triton.jit
def _logprobs_kernel(logits_ptr, labels_ptr, out_ptr, V, stride_row, temperature, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    inv_temp = 1.0 / temperature
    m = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(logits_ptr + row * stride_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * inv_temp
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    m_all = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - m_all), axis=0)
    label = tl.load(labels_ptr + row)
    picked = tl.load(logits_ptr + row * stride_row + label).to(tl.float32) * inv_temp
    tl.store(out_ptr + row, picked - m_all - tl.log(total))


def log_probs(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    logits = logits.contiguous()
    R, V = logits.shape
    out = torch.empty((R,), device=logits.device, dtype=torch.float32)
    _logprobs_kernel[(R,)](logits, labels, out, V, logits.stride(0), temperature, BLOCK_V=1024)
    return out
