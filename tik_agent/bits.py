"""Raw-bit comparison of tensors.

Parity is equality of bit patterns, not of values: ``torch.equal`` says
``-0.0 == +0.0`` and ``NaN != NaN``, both wrong here.  Tensors are viewed as
integers of their own width and compared exactly; a mismatch is reported
with its flat index, both bit patterns and the distance in ulps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

_INT_VIEW = {8: "int64", 4: "int32", 2: "int16", 1: "int8"}


@dataclass(frozen=True)
class Mismatch:
    """The first element where two tensors differ."""

    index: int
    expected_bits: str
    actual_bits: str
    expected: float
    actual: float
    ulps: int | None
    count: int  # how many elements differ in all

    def to_dict(self) -> dict:
        return {
            "index": self.index, "expected_bits": self.expected_bits, "actual_bits": self.actual_bits,
            "expected": _json_float(self.expected), "actual": _json_float(self.actual),
            "ulps": self.ulps, "count": self.count,
        }

    def describe(self) -> str:
        ulps = f", {self.ulps} ulp" if self.ulps is not None else ""
        return (f"index {self.index}: expected {self.expected_bits} ({self.expected!r}), "
                f"got {self.actual_bits} ({self.actual!r}){ulps}; {self.count} element(s) differ")


def _json_float(v: float) -> float | str:
    return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)


def int_view(t):
    import torch

    return t.contiguous().view(getattr(torch, _INT_VIEW[t.element_size()]))


def layout_strides(t) -> tuple:
    """``t``'s strides over its dimensions longer than 1: a dimension of size 1 is never
    stepped along, so its stride places no element (torch sets it freely: a (1, N) view of a
    transposed (N, 1) tensor has strides (1, 1), its contiguous copy (N, 1))."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)


def meta_difference(expected, actual) -> str | None:
    """Shape, dtype, device-type or stride disagreement, as a sentence."""
    import torch

    if not isinstance(actual, torch.Tensor):
        return f"returned {type(actual).__name__}, expected a tensor"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if layout_strides(actual) != layout_strides(expected):
        return f"strides {actual.stride()}, expected {expected.stride()}"
    return None


def first_mismatch(expected, actual) -> Mismatch | None:
    """None when both tensors hold the same bits (same dtype and shape assumed)."""
    e = int_view(expected.detach().cpu()).reshape(-1)
    a = int_view(actual.detach().cpu()).reshape(-1)
    diff = (e != a).nonzero()
    if diff.numel() == 0:
        return None
    i = int(diff[0])
    width = expected.element_size() * 2
    ev, av = int(e[i]), int(a[i])
    mask = (1 << (width * 4)) - 1
    ulps = None
    if expected.is_floating_point():
        ulps = abs(_ordered(ev, width * 4) - _ordered(av, width * 4))
    flat_e = expected.detach().cpu().reshape(-1)
    flat_a = actual.detach().cpu().reshape(-1)
    return Mismatch(
        index=i,
        expected_bits=f"0x{ev & mask:0{width}x}",
        actual_bits=f"0x{av & mask:0{width}x}",
        expected=float(flat_e[i]),
        actual=float(flat_a[i]),
        ulps=ulps,
        count=int(diff.numel()),
    )


def _ordered(v: int, bits: int) -> int:
    """Map a signed-magnitude float pattern onto a monotonic integer line."""
    v &= (1 << bits) - 1
    sign = 1 << (bits - 1)
    # -0.0 sits one step below +0.0, so signed zeros are 1 ulp apart.
    return v if not v & sign else -(v & (sign - 1)) - 1


def digest(tensors) -> str:
    """sha256 over dtypes, shapes and raw bytes: detects any input mutation."""
    h = hashlib.sha256()
    for t in tensors:
        c = t.detach().cpu().contiguous()
        h.update(f"{c.dtype}{tuple(c.shape)}".encode())
        h.update(int_view(c).numpy().tobytes() if c.is_floating_point() else c.numpy().tobytes())
    return h.hexdigest()


def output_digest(out) -> str:
    """sha256 over an output's dtype, shape, layout strides and raw bits (a non-tensor names its type).

    What a timed call returned, kept without keeping the tensor: two outputs
    with equal digests are equal for every check parity makes."""
    import torch

    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        # Several outputs: each one's digest, in order (a tuple of tensors is no tensor to skip).
        return hashlib.sha256("|".join(output_digest(o) for o in out).encode()).hexdigest()
    if not isinstance(out, torch.Tensor):
        return f"not a tensor: {type(out).__name__}"
    h = hashlib.sha256(f"{layout_strides(out)}".encode())   # a size-1 dimension's stride places nothing
    h.update(digest([out]).encode())
    return h.hexdigest()
