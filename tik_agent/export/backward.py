"""Template variables for the wheel's autograd registration (``_autograd.py``).

The backward entry becomes its own custom op, so that ``torch.compile`` and
``opcheck`` see it as one opaque operator like the forward, and
``torch.library.register_autograd`` routes the forward op's gradient to it.
"""

from __future__ import annotations

from tik_agent.spec.schema import KernelSpec

_PY_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def backward_context(spec: KernelSpec) -> dict:
    b = spec.backward
    if b is None:
        return {"backward_entry": None}
    tensors = [i.name for i in spec.inputs]
    args = tensors + list(b.grads)
    typed = [f"{n}: torch.Tensor" for n in args] + [f"{k}: {_PY_TYPES[type(v)]} = {v!r}" for k, v in spec.kwargs.items()]
    return {
        "backward_entry": b.entry,
        "backward_typed_params": ", ".join(typed),
        "backward_call_args": ", ".join(args + [f"{k}={k}" for k in spec.kwargs]),
        "backward_tensor_inputs": tensors,
        "backward_grads": list(b.grads),
        "backward_wrt": list(b.wrt),
        "kwarg_names": list(spec.kwargs),
        "owned_blocks": _owned_blocks(spec),
    }


def _owned_blocks(spec: KernelSpec) -> dict | None:
    """For the ``sequences`` layout, the inputs the backward's guard reads: the
    cache gradient is certified for sequences that own their blocks, so a call
    in which two sequences share one (prefix caching) is refused."""
    if spec.layout != "sequences":
        return None
    by_role = {}
    for i in spec.inputs:
        by_role.setdefault(i.role, i.name)
    return {"seq_lens": by_role["seq_lens"], "block_table": by_role["block_table"], "cache": by_role["cache"]}
