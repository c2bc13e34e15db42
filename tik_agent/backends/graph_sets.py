"""Input sets for graph replay: one per captured call, refilled before every replay.

A graph's calls read fixed addresses, so each call gets its own input tensors
(separate allocations, as a fresh call's inputs are: the same alignment, no
storage offset, nothing that tells a slot from an eager call's input).  The
non-float inputs (token ids, sequence metadata) are those of one workload case
in every slot; the float inputs are drawn anew from a seed before each replay,
on the device, one generator call per input for all slots: a kernel that
remembered the last replay's answer then returns a wrong one.

The same seed gives the same sets in any process, so the reference worker
rebuilds exactly what a candidate's replay saw and computes the seed's answer
on it.  In the graph phase every kernel has slots of its own
(:mod:`tik_agent.sandbox.graph_rounds` says which data each is filled with).
Works on any device; the CPU interpreter's rehearsal uses it too.
"""

from __future__ import annotations

from typing import Sequence


def _mix(seed: int, i: int) -> int:
    return (int(seed) * 1_000_003 + i * 7919 + 1) % (1 << 63)


class InputSlots:
    def __init__(self, base: Sequence, calls: int):
        import torch

        self.torch = torch
        self.calls = calls
        self.base = list(base)
        self.floats = [i for i, t in enumerate(base) if t.is_floating_point()]
        self.sets: list[list] = [[t.clone() for t in base] for _ in range(calls)]

    @property
    def set_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.base)

    def _draw(self, i: int, seed: int):
        """Input ``i`` of every slot, drawn from ``seed``: shape (calls, *shape)."""
        torch = self.torch
        t = self.base[i]
        gen = torch.Generator(device=t.device).manual_seed(_mix(seed, i))
        flat = torch.randn((self.calls, *t.shape), generator=gen, dtype=torch.float32, device=t.device)
        return flat.to(t.dtype)

    def fill(self, seed: int) -> None:
        """Every slot's float inputs drawn from ``seed`` (the non-float ones are never rewritten)."""
        for i in self.floats:
            drawn = self._draw(i, seed)
            targets = [s[i] for s in self.sets]
            sources = list(drawn.unbind(0))
            foreach = getattr(self.torch, "_foreach_copy_", None)
            if foreach is not None:
                foreach(targets, sources)
            else:
                for dst, src in zip(targets, sources):
                    dst.copy_(src)

    def reset(self) -> None:
        """Every slot's float inputs back to the base case's (what the slots were made with)."""
        for i in self.floats:
            for s in self.sets:
                s[i].copy_(self.base[i])

    def changed(self, seed: int) -> int | None:
        """The first slot whose inputs differ (in bits) from what ``fill(seed)`` wrote, or None."""
        torch = self.torch
        for i, t in enumerate(self.base):
            want = self._draw(i, seed) if i in self.floats else t.expand(self.calls, *t.shape)
            got = torch.stack([s[i] for s in self.sets])
            a, b = _bits(got), _bits(want.contiguous())
            if not torch.equal(a, b):
                return int((a != b).reshape(self.calls, -1).any(dim=1).nonzero()[0, 0])
        return None


def _bits(t):
    import torch

    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.view(view)


def same_bits(a, b) -> bool:
    """Two outputs (tensors or tuples of tensors) equal in dtype, shape, strides and raw bits."""
    import torch

    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(same_bits(x, y) for x, y in zip(a, b)))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    return bool(torch.equal(_bits(a.contiguous()), _bits(b.contiguous())))
