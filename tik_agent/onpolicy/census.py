"""Which of a model's torch ops reached a kernel, and which ran on torch, inside ``enabled()``.

A transformers model calls many torch ops; the drop-ins route four idioms
(matmul, RMSNorm, causal SDPA, the gathered log-softmax) and leave the rest
to torch.  A dispatch mode counts the ops one step dispatches: the kernels'
ops (``aten::mm``/``addmm`` while the matmul drop-in holds them, and the
custom ops of the drop-in packages), and every other op by name, with the
reductions (whose bits can depend on how a batch is laid out, on some
device) set apart from elementwise ops, indexing and data movement (which
compute each element alone).  A kernel with no call is one the model never
reaches: transformers' RMSNorm modules, for one, compute with ``pow``,
``mean`` and ``rsqrt`` rather than ``aten::rms_norm``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Ops that reduce or contract (an output element sums or compares many inputs).
REDUCTIONS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "dot", "mean", "sum", "prod", "norm",
    "linalg_vector_norm", "var", "std", "var_mean", "_softmax", "_log_softmax", "softmax", "log_softmax",
    "logsumexp", "cumsum", "cumprod", "max", "min", "amax", "amin", "argmax", "argmin", "topk", "sort",
    "multinomial", "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
    "embedding_dense_backward", "_softmax_backward_data", "_log_softmax_backward_data",
})
MATMUL_OPS = frozenset({"mm", "addmm"})


@dataclass
class Census:
    """Counts of one step's ops: ``kernels`` per kind, ``reductions`` and ``other`` per aten op."""

    kernels: Counter = field(default_factory=Counter)
    reductions: Counter = field(default_factory=Counter)
    other: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"kernel_calls": dict(self.kernels), "torch_reductions": dict(sorted(self.reductions.items())),
                "torch_other": sum(self.other.values())}

    def summary(self, kinds) -> list[str]:
        """Lines a person reads: each kernel's calls, then what torch computed."""
        reached = ", ".join(f"{k} x{self.kernels[k]}" for k in kinds if self.kernels[k])
        missed = [k for k in kinds if not self.kernels[k]]
        lines = [f"kernels reached: {reached or 'none'}"]
        if missed:
            lines.append(f"not reached (the model never calls what they route): {', '.join(missed)}")
        if self.reductions:
            ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.reductions.items()))
            lines.append(f"reductions torch ran (not certified): {ops}")
        lines.append(f"other torch ops (elementwise, indexing, data movement): {sum(self.other.values())} calls")
        return lines


def counting(namespaces: dict[str, str], matmul_routed: bool = True):
    """A dispatch mode that fills a :class:`Census`; ``namespaces``: kind -> the drop-in's op namespace."""
    from torch.utils._python_dispatch import TorchDispatchMode

    kind_of = {ns: kind for kind, ns in namespaces.items()}

    class _Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.census = Census()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            namespace, name = func.namespace, func.overloadpacket.__name__
            if namespace in kind_of:
                self.census.kernels[kind_of[namespace]] += 1
            elif namespace == "aten" and name in MATMUL_OPS and matmul_routed:
                self.census.kernels["matmul"] += 1
            elif name in REDUCTIONS:
                self.census.reductions[f"{namespace}.{name}"] += 1
            else:
                self.census.other[f"{namespace}.{name}"] += 1
            return func(*args, **(kwargs or {}))

    return _Counting()
