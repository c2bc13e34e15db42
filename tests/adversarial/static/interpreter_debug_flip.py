# expect: triton-api
"""Turns the interpreter builder's debug option on before the seed is timed, so the
seed pays every integer overflow check that tik-agent skips with debug off, while its
own launches run first with it off."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy(x):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    sem = tl.core.tensor.__add__.__globals__
    builder = sem["_semantic"] if "_semantic" in sem else None
    setattr(getattr(tl.standard, "interpreter_builder", builder), "options",
            getattr(triton.runtime.interpreter, "InterpreterOptions")(debug=True))
    return y
