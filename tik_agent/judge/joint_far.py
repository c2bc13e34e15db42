"""Each kernel variant the survey judges, judged again where its loops run longest.

A variant (one compiled kernel: a structure with its constexprs and options) is
judged where it starts: at a boundary along an axis, with the other dimensions at
the axis's base, or at the smallest sizes of a combination (:mod:`tik_agent.judge.
joint_analysis`).  A kernel can be right there and wrong only where a loop runs more:
``ROWS = 8`` from M = 600 with one tree per 1024-wide chunk gives the seed's bits while
a row is one chunk, and the base width of the batch's axis is under 1024.  So each
variant other than the base's is judged at a second point too, its *far point*: the
widest point (the largest product of the dimensions other than the batch, then the
most rows) within :data:`FAR_ELEMENTS` of the device among

* the smallest point judged for it, grown: each dimension other than the batch in turn
  (in the plan's order) to the largest size that still launches the same variant (by
  bisection where the largest does not), and
* every point of combined sizes the survey recorded that launches it (so a variant
  narrow on the start's line, or absent from a band the bisection probes, is still
  judged where the survey saw it wide).

A point already judged is not judged twice.  What stays open: a variant that is
right at every point judged for it and wrong only past the cap (it starts at more
rows than the cap over the width where it goes wrong allows), or only in a region of
combined sizes no surveyed point lands in, or only with more rows than its far point
holds (a switch on the row index in the body).

Both sides run this on the same record, as the rest of the analysis: in the worker,
``get`` surveys the sizes asked for; in the parent it reads them.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping

from tik_agent.judge.configs import RAISED, SKIPPED
from tik_agent.judge.joint_points import JointPoint, Launch, keep_smallest, order, variant_of, where
from tik_agent.spec.fields import BATCH_DIM

# Elements of a far point's batch: the interpreter pays about 5-20 ms a row of a few thousand,
# so 2**21 elements cost seconds a kernel on the CPU.  A variant that starts at M rows and goes
# wrong past one 1024-wide chunk is judged there while M <= 2047 (cand_chunks: M = 600).
FAR_ELEMENTS = {"cpu": 1 << 21, "cuda": 1 << 26}
FAR = "a kernel variant judged where it starts, again where its loops run longest"


def _launches(got: Launch | None) -> bool:
    return got is not None and got[0] != SKIPPED and not got[0].startswith(RAISED)


def far_points(axes: list[dict], get: Callable[[int, dict], Launch], base: tuple,
               starts: Iterable[tuple[JointPoint, Launch]], taken: set,
               surveyed: Iterable[tuple[int, dict, Launch]] = ()) -> list[JointPoint]:
    """The far point of each variant in ``starts`` (a point judged and what it launches)
    other than ``base``'s, unless already in ``taken`` (keys of points judged: (m, sorted
    dims)); ``surveyed``: the points of combined sizes and what each launches."""
    smallest: dict[tuple, JointPoint] = {}
    for point, got in starts:
        if _launches(got) and variant_of(got) != base:
            keep_smallest(smallest, variant_of(got), point)
    device = axes[0]["device"]
    cap = FAR_ELEMENTS.get(device, FAR_ELEMENTS["cuda"])
    seen: dict[tuple, list] = {}
    for m, dims, got in surveyed:
        if _launches(got) and variant_of(got) in smallest and m * math.prod(dims.values()) <= cap:
            seen.setdefault(variant_of(got), []).append((m, dict(dims)))
    out = []
    for kernel, start in sorted(smallest.items(), key=lambda kv: order(kv[1])):
        far = _grown(axes, get, start, kernel, cap)
        for m, dims in seen.get(kernel, ()):
            wider = JointPoint(m, dims, f"{FAR} (from {where(start.m, start.dims)}) at {where(m, dims)}")
            if _width(wider) > _width(far):
                far = wider
        key = (far.m, tuple(sorted(far.dims.items())))
        if key not in taken:
            taken.add(key)
            out.append(far)
    return out


def _width(p: JointPoint) -> tuple:
    """Widest first (the dimensions other than the batch), then the most rows, then the
    dimensions themselves (a total order, so both sides choose the same point)."""
    return math.prod(p.dims.values()), p.m, tuple(sorted(p.dims.items()))


def _grown(axes: list[dict], get: Callable, start: JointPoint, kernel: tuple, cap: int) -> JointPoint:
    m, dims = start.m, dict(start.dims)

    def same(sizes: Mapping) -> bool:
        got = get(m, dict(sizes))
        return _launches(got) and variant_of(got) == kernel

    for axis in axes:
        d = axis["dim"]
        if d == BATCH_DIM:
            continue
        rest = m * math.prod(v for k, v in dims.items() if k != d)
        lo, top = dims[d], min(int(axis["high"]), cap // max(1, rest))
        if top <= lo:
            continue
        if same({**dims, d: top}):
            dims[d] = top
            continue
        hi = top  # lo launches the variant, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if same({**dims, d: mid}):
                lo = mid
            else:
                hi = mid
        dims[d] = lo
    return JointPoint(m, dims, f"{FAR} (from {where(start.m, start.dims)}) at {where(m, dims)}")
