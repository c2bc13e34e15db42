# expect: triton-api
"""Poisons the interpreter's bf16 widening table (a closure cell of the fast cast that
tik-agent installs) so that the seed, timed in the same worker, pays the shipped
cast while this copy keeps the fast one; or rewrites the table to round."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy(x):
    fast = triton.runtime.interpreter._convert_float
    table = fast.__closure__[0].cell_contents
    table.clear()
    triton.runtime.interpreter._convert_float = fast.__wrapped__
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
