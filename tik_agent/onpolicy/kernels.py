"""The four kernels the decoder needs, as one set: Triton kernel files or torch's stock.

A Triton set calls kernel files (the bundled seeds by default, or a run's
best kernel, an exported wheel's ``kernel.py`` or any file for one of them)
and gives every kernel its gradient through the file's backward entry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from tik_agent.errors import UsageError

log = logging.getLogger(__name__)

KINDS = ("matmul", "rmsnorm", "logprobs", "attention")


@dataclass(frozen=True)
class KernelSet:
    """What the decoder calls; every function takes and returns torch tensors."""

    name: str
    matmul: Callable            # (a (M, K), b (K, N)) -> (M, N)
    rms_norm: Callable          # (x (M, N), weight (N,), eps) -> (M, N)
    attention: Callable         # the attention seed's calling convention
    token_logprobs: Callable    # (logits (M, V), targets (M,)) -> (M,) fp32
    sources: Mapping[str, str]  # kind -> where its kernel came from


def stock() -> KernelSet:
    import torch
    import torch.nn.functional as F

    def rms_norm(x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    def token_logprobs(logits, targets):
        return torch.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None])[:, 0]

    return KernelSet("stock", torch.mm, rms_norm, paged_attention_torch, token_logprobs,
                     {k: "torch" for k in KINDS})


def paged_attention_torch(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale):
    """torch's scaled_dot_product_attention, one sequence at a time, over the paged cache."""
    import torch
    import torch.nn.functional as F

    page = k_cache.shape[1]
    outs = []
    for s in range(seq_lens.shape[0]):
        begin, end, length = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1]), int(seq_lens[s])
        slots = torch.arange(length, device=q.device)
        blocks = block_table[s, slots // page].long()
        k = k_cache[blocks, slots % page].transpose(0, 1)  # (Hkv, L, D)
        v = v_cache[blocks, slots % page].transpose(0, 1)
        qs = q[begin:end].transpose(0, 1)                  # (Hq, n, D)
        positions = torch.arange(length - (end - begin), length, device=q.device)
        mask = slots[None, :] <= positions[:, None]
        out = F.scaled_dot_product_attention(qs[None], k[None], v[None], attn_mask=mask, scale=scale,
                                             enable_gqa=True)[0]
        outs.append(out.transpose(0, 1))
    return torch.cat(outs, dim=0)


def triton(files: Mapping[str, Path] | None = None, name: str = "triton") -> KernelSet:
    """Triton kernel files: the bundled seeds, with any of them replaced by ``files[kind]``.

    Whether a file is certified is :mod:`tik_agent.onpolicy.sources`' business; ``name``
    labels the set in reports (never "certified" unless every file is)."""
    from tik_agent.spec.seeds import BUNDLED_DIR
    from tik_agent.spec.schema import load_spec

    files = dict(files or {})
    unknown = sorted(set(files) - set(KINDS))
    if unknown:
        raise UsageError(f"--kernel: unknown kind {unknown[0]!r}; expected one of {list(KINDS)}")
    entries, sources = {}, {}
    for kind in KINDS:
        spec = load_spec(BUNDLED_DIR / kind)
        path = Path(files.get(kind, spec.source))
        if not path.is_file():
            raise UsageError(f"--kernel {kind}={path}: no such file")
        entries[kind] = _load(path, spec)
        sources[kind] = "bundled seed" if kind not in files else str(path)
    return KernelSet(name, entries["matmul"], entries["rmsnorm"], entries["attention"],
                     entries["logprobs"], sources)


def _load(path: Path, spec):
    """The kernel file's entry, wrapped in autograd through its backward entry if it has one."""
    from tik_agent.sandbox.harness import KernelLoadError, backward_of, entry_of, load_kernel

    try:
        module = load_kernel(path, f"onpolicy_{spec.name}")
        forward = entry_of(module, spec, path)
        backward = backward_of(module, spec, path) if spec.backward is not None else None
    except KernelLoadError as exc:
        raise UsageError(str(exc)) from None
    from tik_agent.onpolicy.autograd import with_gradient

    return with_gradient(spec, forward, backward)
