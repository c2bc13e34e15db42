"""Gradients for the Triton kernels in the trainer: the kernel files' backward entries.

Each wrapper is a ``torch.autograd.Function`` whose forward calls the kernel's
entry and whose backward calls its backward entry with the saved inputs, so a
trainer's gradients come from the same kernel file as its log-probs.
"""

from __future__ import annotations

from typing import Callable


def with_gradient(spec, forward: Callable, backward: Callable | None) -> Callable:
    import torch

    n = len(spec.inputs)
    kwargs = tuple(spec.kwargs)
    wrt = tuple(spec.backward.wrt) if spec.backward is not None else ()
    names = tuple(i.name for i in spec.inputs)

    class _Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            tensors, extra = args[:n], args[n:]
            ctx.save_for_backward(*tensors)
            ctx.extra = extra
            return forward(*tensors, *extra)

        @staticmethod
        def backward(ctx, *grad_outputs):
            tensors = ctx.saved_tensors
            if backward is None:
                raise RuntimeError(f"{spec.name}: the kernel file has no backward entry")
            grads = backward(*tensors, *(g.contiguous() for g in grad_outputs), *ctx.extra)
            grads = grads if isinstance(grads, (tuple, list)) else (grads,)
            by_name = dict(zip(wrt, grads))
            return tuple(by_name.get(name) for name in names) + (None,) * len(ctx.extra)

    def call(*args, **kw):
        extra = tuple(kw.get(k, spec.kwargs[k]) for k in kwargs) if not args[n:] else tuple(args[n:])
        if not torch.is_grad_enabled() or not any(isinstance(t, torch.Tensor) and t.requires_grad for t in args[:n]):
            return forward(*args[:n], *extra)
        return _Op.apply(*args[:n], *extra)

    return call

