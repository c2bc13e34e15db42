"""Template variables for the wheel's drop-in switch (``_dropin.py``).

Which aten ops a wheel may take over follows from the bundled seed it was
optimised from: a matmul kernel serves ``mm`` and ``addmm`` (and so
``linear``, which decomposes into them), an RMSNorm kernel serves
``rms_norm``, a token log-prob kernel serves ``log_softmax(...).gather(...)``
(through a torch function mode: no aten op computes a gathered log-softmax),
and the paged attention kernel serves causal ``scaled_dot_product_attention``.
Other seeds get a switch that says it has nothing to route.
"""

from __future__ import annotations

from tik_agent.spec.schema import KernelSpec

# seed name -> (entry, input names) the override's calling convention needs
DROPIN_KINDS = {"matmul": ("matmul", ("a", "b")), "rmsnorm": ("rms_norm", ("x", "weight")),
                "logprobs": ("token_logprobs", ("logits", "targets")),
                "attention": ("attention", ("q", "k_cache", "v_cache", "cu_seqlens_q", "seq_lens", "block_table"))}


# kind -> what its enable() takes over (the package's ROUTES; enable_all refuses two packages
# that share one)
ROUTES = {"matmul": ("aten::mm", "aten::addmm"), "rmsnorm": ("aten::rms_norm",),
          "logprobs": ("log_softmax(...).gather(-1, ids)",), "attention": ("aten::scaled_dot_product_attention",)}


def dropin_context(spec: KernelSpec) -> dict:
    known = DROPIN_KINDS.get(spec.name)
    fits = known is not None and known == (spec.entry, tuple(i.name for i in spec.inputs))
    kind = spec.name if fits else None
    return {"dropin_kind": kind, "routes": ROUTES.get(kind, ())}
