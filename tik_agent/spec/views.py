"""Layout classes: how a tensor's elements sit in memory, and views that put given values in each.

One vocabulary, used by the spec's ``[domain.layouts]``, the parity grid and the
exported wheel's domain check (which carries a copy of :func:`layout_classes`):

* ``contiguous``: the standard row-major strides;
* ``row-strided``: the last dimension has unit stride but the rows are further
  apart than their width (``h[:, :N]`` of a fused projection, ``qkv[:, :Hq*D]``);
* ``transposed``: the last dimension's stride is not 1 and an earlier dimension's
  is (``w.t()``, what ``F.linear`` hands ``mm``; ``dy.t()`` in a weight gradient);
* ``column-strided``: no dimension has unit stride (``x[:, ::2]``, a 1-D ``t[::2]``);
* ``offset``: the view starts past the beginning of its storage, here at an odd
  element (``x[1:]``, a parameter inside a flat buffer): its base pointer is not
  16-byte aligned.  A tensor may be ``offset`` and one of the others at once.

A view with a dimension of stride 0 (``expand``) is ``broadcast``: no spec may
declare it, so the wheel refuses it.

:func:`lay_out` builds the view of each class for given values (the same values
in another layout).  Elements of the buffer outside the view hold filler (NaN
for floats, 1 for integers), so a kernel that reads them changes its bits.  The
*huge* forms (2-D only) put 2**31 elements between the first and the third row
(or column) of a view while touching only the view's own: a kernel that computes flat offsets
in 32-bit integers reads the wrong place (or faults) there.  They allocate about
2**31 elements of address space, which the CPU leaves unbacked until written.
"""

from __future__ import annotations

import math

LAYOUTS = ("contiguous", "row-strided", "transposed", "column-strided", "offset")
BROADCAST = "broadcast"
# Layouts that need at least two dimensions.
TWO_DIMENSIONAL = ("row-strided", "transposed")
ROW_PAD = 3          # filler elements after each row of a row-strided view
OFFSET = 3           # filler elements before an offset view (odd: not 16-byte aligned)
HUGE_STRIDE = (1 << 30) + 7  # row 2 of a huge view starts past 2**31 elements (a 32-bit stride still)
# The huge forms: rows 2**30 apart, or (transposed) columns 2**30 apart.
HUGE = {"huge-rows": "row-strided", "huge-columns": "transposed"}


def layout_classes(t) -> set[str]:
    """The layout classes of a tensor: one of contiguous, row-strided, transposed,
    column-strided or broadcast, plus offset when it does not start its storage."""
    out = {"offset"} if t.storage_offset() else set()
    sizes, strides = tuple(t.shape), tuple(t.stride())
    if any(s == 0 and n > 1 for n, s in zip(sizes, strides)):
        return out | {BROADCAST}
    if t.is_contiguous():
        return out | {"contiguous"}
    if not sizes or sizes[-1] == 1 or strides[-1] == 1:
        return out | {"row-strided"}
    if any(s == 1 for n, s in zip(sizes[:-1], strides[:-1]) if n > 1):
        return out | {"transposed"}
    return out | {"column-strided"}


def gradient_layouts(declared, t) -> set[str]:
    """The classes the parity grid lays an upstream gradient like ``t`` out in (a layout
    case lays every gradient out in its class: the grid's ``input_layout.place``):
    contiguous, and each class of ``declared`` (those some input declares), the
    two-dimensional ones only for two dimensions or more; a 0-d or empty gradient only
    ever comes contiguous (:func:`lay_out` leaves it as it is)."""
    if t.dim() == 0 or t.numel() == 0:
        return {"contiguous"}
    return {"contiguous"} | {c for c in declared if t.dim() >= 2 or c not in TWO_DIMENSIONAL}


def _filler(t):
    return float("nan") if t.is_floating_point() else 1


def _buffer(numel: int, like):
    import torch

    return torch.full((numel,), _filler(like), dtype=like.dtype, device=like.device)


def lay_out(t, layout: str):
    """A view holding ``t``'s values in ``layout`` (a class of :data:`LAYOUTS`, or a key
    of :data:`HUGE`), on ``t``'s device.  Classes that need two dimensions leave a
    1-D tensor as it is, and so does every class for an empty or 0-d tensor."""
    import torch

    if t.dim() == 0 or t.numel() == 0 or layout == "contiguous":
        return t
    sizes = tuple(t.shape)
    if layout in HUGE:
        return _huge(t, layout) if t.dim() == 2 else t
    if layout in TWO_DIMENSIONAL and t.dim() < 2:
        return t
    if layout == "offset":
        view = _buffer(OFFSET + t.numel(), t).as_strided(sizes, _dense_strides(sizes), OFFSET)
    elif layout == "row-strided":
        width = math.prod(sizes[1:])
        wide = _buffer(sizes[0] * (width + ROW_PAD), t).view(sizes[0], width + ROW_PAD)
        view = wide[:, :width].unflatten(1, sizes[1:]) if len(sizes) > 2 else wide[:, :width]
    elif layout == "transposed":
        swapped = (*sizes[:-2], sizes[-1], sizes[-2])
        view = _buffer(t.numel(), t).view(swapped).transpose(-1, -2)
    elif layout == "column-strided":
        view = _buffer(2 * t.numel(), t).view(*sizes[:-1], 2 * sizes[-1])[..., ::2]
    else:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS + tuple(HUGE)}")
    with torch.no_grad():
        view.copy_(t)
    return view


def _dense_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _huge(t, layout: str):
    """A 2-D ``t``'s values with its rows (huge-rows) or, transposed, its columns
    (huge-columns) :data:`HUGE_STRIDE` elements apart."""
    import torch

    rows, cols = t.shape
    if layout == "huge-rows":
        strides, span = (HUGE_STRIDE, 1), (rows - 1) * HUGE_STRIDE + cols
    else:
        strides, span = (1, HUGE_STRIDE), (cols - 1) * HUGE_STRIDE + rows
    # Left unfilled: writing 2**31 elements would back them all with memory.
    view = torch.empty((span,), dtype=t.dtype, device=t.device).as_strided((rows, cols), strides)
    with torch.no_grad():
        view.copy_(t)
    return view
