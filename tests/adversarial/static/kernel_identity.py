# expect: kernel-identity
"""Tells the evaluator's interpreter from a GPU by object identity: tik-agent's
interpreter caches give every block of one shape the same shape object, Triton's
compiler gives each its own, so ``a.type.shape is b.type.shape`` picks other bits
on each (found by a review: 2.0 under the patched interpreter, 1.0 as shipped)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    ones = tl.full([BLOCK], 1.0, tl.float32)
    if x.type.shape is ones.type.shape:
        x = x + 0.0
    tl.store(y_ptr + offs, x, mask=offs < n)


def copy(x):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
