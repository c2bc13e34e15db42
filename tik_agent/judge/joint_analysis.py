"""What the survey's points of combined sizes say (:mod:`tik_agent.judge.joint`): the
points whose launch no single dimension explains, each to be judged, or a refusal.

What a point launches is predicted from the axes, as if each part of the launch
followed one dimension at most (a block from the row width, a grid from the batch).
A part is named by its label and its place among the labels (``constexpr BLOCK``,
the second ``grid``), so that a kernel one axis swaps in keeps the parts it shares
with the base's:

* the launch's structure (kernel, argument kinds, grid rank) is the base's where no
  axis changes it at the point's coordinates, that axis's where exactly one does;
* each part is the base's where no axis moves it at the point's coordinates, and
  that axis's where exactly one does.

Off its prediction, a point launches a combination no axis showed:

* another structure, or a constexpr or option (the kernel variant) off its
  prediction or moved by two axes there;
* a number (a grid entry, a run-time integer) off its prediction.  A number two
  axes move at the point has no prediction (``M * N``); nor has a grid entry that two
  axes move at any point (``cdiv(M * N, 1024)`` hides a change along one axis in its
  floor, or makes one where neither axis has one).  So a switch carried by the grid
  alone, where two dimensions move it, is not seen: a kernel that reads the grid
  back (``tl.num_programs``) to split a reduction could hide one there.

A kernel variant that the prediction gives but no axis launched (a block the width
picks beside rows the batch picks: a kernel no case may have compiled) is no switch,
and there may be many; :data:`PAIRINGS` of them, drawn from the survey's secret, are
judged at the smallest sizes that launch them (those within the cap).

Each combination (the structure with every constexpr and option, and for a number
the numbers off their prediction) is judged once, at the smallest sizes found by
bisection, one dimension after another, that still launch it; at most
:data:`BUDGET` combinations, each within :data:`JUDGED_ELEMENTS` of its device.
More, larger, a record that lacks a point or cannot be read, or two axes that
disagree at their shared base, are refusals.  Every variant judged here or at an axis's
boundary is judged again at its far point (:mod:`tik_agent.judge.joint_far`).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from fractions import Fraction
from typing import Callable, Mapping, Sequence

from tik_agent.judge import joint_far
from tik_agent.judge import joint_points as jp
from tik_agent.judge.configs import RAISED, SKIPPED, point_of
from tik_agent.judge.joint_points import JointPoint, Launch
from tik_agent.spec.fields import BATCH_DIM

BUDGET = 12     # combinations one evaluation judges (as many as changes along the axes); more is a refusal
# Elements of a judged point's batch (rows times the other dimensions): the interpreter pays
# about 5-20 ms a row of a few thousand, so a CPU case of 2**23 elements takes tens of seconds.
JUDGED_ELEMENTS = {"cpu": 1 << 23, "cuda": 1 << 30}
NUMBER = "a number (not a constexpr or option) no single dimension gives"
_TWO_KERNELS = "two dimensions change the kernel or its arguments' kinds"
_OTHER_KERNEL = "another kernel or argument kinds than either dimension gives"
_VARIANT = "a constexpr or option no single dimension gives"
_PAIRING = "a kernel variant no axis launches (a pairing of what each dimension gives)"
PAIRED = "pairing"  # the key of a predicted pairing: judged where that compiled kernel runs
PAIRINGS = 4  # predicted pairings judged per evaluation, drawn
BILINEAR_SHARE = 0.9  # of the points two axes move a number at, the share one bilinear rule must fit
BILINEAR_MIN = 8      # and how many at least

PointLookup = Callable[[int, dict], "Launch | None"]


class _Missing(Exception):
    """The record lacks a point the analysis needs."""


def judge(axes: list[dict], points: list[dict], at_point: PointLookup, along: Mapping,
          seed: int = 0, boundaries: Sequence[tuple[str, int]] = ()) -> tuple[list[JointPoint], str | None]:
    """The points that launch a combination no axis showed (one per combination, moved to
    the smallest sizes that still launch it), and a few predicted pairings no axis
    launched (drawn with ``seed``), or a refusal.  ``at_point(m, dims)`` and
    ``along[dim](size)`` give (structure, numbers) or None: in the worker they survey the
    sizes asked for, in the parent they read the worker's record.  Each kernel variant judged
    here or at one of the axes' ``boundaries`` ((dim, size) pairs) is judged at its far point
    too (:mod:`tik_agent.judge.joint_far`)."""
    try:
        return _Analysis(axes, at_point, along, seed, boundaries).run(points)
    except _Missing as exc:
        return [], f"the survey did not report {exc} (a point of combined sizes it had to place)"
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        # The record is the worker's to write (a structure nested past the parser's depth);
        # anything else (the host-ops mode's refusal of a survey call, in the worker) goes on.
        return [], f"the survey's record of combined sizes cannot be read ({type(exc).__name__})"


class _Analysis:
    def __init__(self, axes: list[dict], at_point: PointLookup, along: Mapping, seed: int,
                 boundaries: Sequence[tuple[str, int]] = ()):
        self.axes, self.at_point, self.along, self.seed = axes, at_point, along, seed
        self.boundaries = sorted({(str(d), int(v)) for d, v in boundaries})
        self.flat: set = set()  # grid entries two axes move somewhere (see _moved_by_two)
        self.base_launch: Launch = ("", ())  # set by run()
        self.bilinear: dict = {}  # (number, axis, axis) -> its factor (see _bilinear)

    def get(self, m: int, dims: Mapping) -> Launch:
        got = self.at_point(m, dict(dims))
        if got is None:
            raise _Missing(jp.where(m, dims))
        return got

    def axes_at(self, m: int, dims: Mapping) -> list:
        """The launch along each axis at the point's coordinate on it (None: skipped or raised)."""
        out = []
        for axis in self.axes:
            size = m if axis["dim"] == BATCH_DIM else int(dims[axis["dim"]])
            got = self.along[axis["dim"]](size)
            if got is None:
                raise _Missing(f"{axis['dim']} = {size}")
            out.append(None if got[0] == SKIPPED or got[0].startswith(RAISED) else got)
        return out

    def base(self) -> Launch | str:
        """The launch at the base (every axis at its base size), which each axis passes
        through; a refusal when two axes report different launches there."""
        seen = None
        for axis in self.axes:
            size = int(axis["m"]) if axis["dim"] == BATCH_DIM else int(axis["dims"][axis["dim"]])
            got = self.along[axis["dim"]](size)
            if got is None:
                raise _Missing(f"{axis['dim']} = {size}")
            if seen is not None and got != seen and SKIPPED not in (got[0], seen[0]):
                return ("the launcher gave two launches for the same sizes (the base of two axes): its launch "
                        "follows something other than the sizes")
            seen = seen if seen is not None and seen[0] != SKIPPED else got
        return seen

    def run(self, points: list[dict]) -> tuple[list[JointPoint], str | None]:
        base = self.base()
        if isinstance(base, str):
            return [], base
        if base[0] == SKIPPED:
            return [], None
        self.base_launch = base
        placed = []
        for point in points:
            m, dims = int(point["m"]), dict(point["dims"])
            got = self.get(m, dims)
            if got[0] == SKIPPED:
                continue
            if got[0].startswith(RAISED):
                return [], f"the launcher raised {json.loads(got[0])[1]} at {jp.where(m, dims)}, inside the declared domain"
            placed.append((m, dims, got, self.axes_at(m, dims)))
        self.flat = self._moved_by_two([at for *_, at in placed])
        self.bilinear = self._bilinear(placed)
        found: dict[tuple, JointPoint] = {}
        pairings: dict[tuple, JointPoint] = {}  # kernel variants no axis launched, as predicted
        on_axes = self._axis_variants()
        for m, dims, got, at in placed:
            off = self.unpredicted(got, at, (m, dims))
            if off is None:
                variant = jp.variant_of(got)
                if variant not in on_axes:
                    jp.keep_smallest(pairings, (PAIRED, variant), JointPoint(m, dims, f"{_PAIRING} at {jp.where(m, dims)}"))
                continue
            why, key = off
            jp.keep_smallest(found, key, JointPoint(m, dims, f"{why} at {jp.where(m, dims)}"))
        if len(found) > BUDGET:
            shown = "; ".join(p.why for p in sorted(found.values(), key=jp.order)[:3])
            return [], (f"the launch changes with combinations of sizes in {len(found)} ways no single size shows "
                        f"({shown}; ...): more than the {BUDGET} an evaluation judges")
        device = self.axes[0]["device"]
        cap = JUDGED_ELEMENTS.get(device, JUDGED_ELEMENTS["cuda"])
        out = []
        for key, point in sorted(found.items(), key=lambda kv: jp.order(kv[1])):
            small = self.shrunk(point, key)
            if small.elements > cap:
                return [], f"{small.why}: {small.elements} elements, more than a case on {device} can judge ({cap})"
            out.append(small)
        # Predicted pairings no case compiled (a block from one axis beside rows from the other):
        # as many as PAIRINGS, drawn from the survey's secret, those within the cap.
        ordered = sorted(pairings.items(), key=lambda kv: jp.order(kv[1]))
        for key, point in random.Random(self.seed).sample(ordered, min(PAIRINGS, len(ordered))):
            small = self.shrunk(point, key)
            if small.elements <= cap and small not in out:
                out.append(small)
        starts, taken = self._boundary_starts()
        starts += [(p, self.get(p.m, p.dims)) for p in out]
        taken |= {(p.m, tuple(sorted(p.dims.items()))) for p in out}
        surveyed = [(m, dims, got) for m, dims, got, _ in placed]
        return out + joint_far.far_points(self.axes, self.get, jp.variant_of(self.base_launch), starts, taken,
                                          surveyed), None

    def _boundary_starts(self) -> tuple[list, set]:
        """Where each axis boundary's new launch starts (and what it launches there), and the
        points its cases judge (both sides)."""
        axes = {a["dim"]: a for a in self.axes}
        starts, sides = [], set()
        for dim, value in self.boundaries:
            got = self.along[dim](value)
            if got is None:
                raise _Missing(f"{dim} = {value}")
            m, dims = point_of(axes[dim], value)
            starts.append((JointPoint(m, dims, f"the launch changes at {dim} = {value}"), got))
            for side in (value - 1, value):
                m, dims = point_of(axes[dim], side)
                sides.add((m, tuple(sorted(dims.items()))))
        return starts, sides

    def _axis_variants(self) -> set:
        """The kernel variants the axes launch at the sizes the plan lists (both sides read
        the same ones; the sizes a bisection added are the worker's and the parent's alike,
        but not their order)."""
        out = set()
        for axis in self.axes:
            lookup = self.along[axis["dim"]]
            for size in axis["values"]:
                got = lookup(int(size))
                if got is None:
                    raise _Missing(f"{axis['dim']} = {size}")
                if got[0] != SKIPPED and not got[0].startswith(RAISED):
                    out.add(jp.variant_of(got))
        return out

    def _deltas(self, m: int, dims: Mapping) -> list[int]:
        """How far the point lies from the base along each axis."""
        return [(m if a["dim"] == BATCH_DIM else int(dims[a["dim"]])) -
                (int(a["m"]) if a["dim"] == BATCH_DIM else int(a["dims"][a["dim"]])) for a in self.axes]

    def _bilinear(self, placed: list) -> dict:
        """For each number (not a constexpr, option or grid entry) that two axes move at some
        points, the rule most of those points share, where at least :data:`BILINEAR_SHARE` of
        them (and :data:`BILINEAR_MIN` at least) do: the factor ``c`` of ``f(m, n) = f(m, b) +
        f(r, n) - f(r, b) + c (m - r)(n - b)`` (``M * N``: c = 1), or ``"product"``, ``f(m, n)
        = f(m, b) f(r, n) / f(r, b)`` (``cdiv(M, BM) * cdiv(N, BN)``).  One more where both
        sizes are large then leaves the rule there.  A number no rule fits (a floor of ``M *
        N``) is predicted nowhere two axes move it, and where one axis moves it its floor can
        put it off the prediction: such a launcher is judged at those points, or refused past
        the budget."""
        base = jp.named(self.base_launch)
        _, flags = jp.parts(self.base_launch[0])
        numbers = [name for name, flag in zip(base, flags) if not flag and name[0] != "grid"]
        seen: dict[tuple, Counter] = {}
        for m, dims, got, along in placed:
            if got[0] != self.base_launch[0]:
                continue
            values, deltas = jp.named(got), self._deltas(m, dims)
            named = [None if a is None or a[0] != self.base_launch[0] else jp.named(a) for a in along]
            for name in numbers:
                moves = [(k, a[name]) for k, a in enumerate(named) if a is not None and a[name] != base[name]]
                if len(moves) != 2:
                    continue
                (i, a_i), (j, a_j) = moves
                c = Fraction(values[name] - a_i - a_j + base[name], deltas[i] * deltas[j])
                product = values[name] * base[name] == a_i * a_j and base[name] != 0
                seen.setdefault((name, i, j), Counter()).update([c] + (["product"] if product else []))
        rules = {}
        for key, counts in seen.items():
            total = sum(n for rule, n in counts.items() if rule != "product")
            rule, n = max(counts.items(), key=lambda kv: (kv[1], kv[0] == "product"))
            if total >= BILINEAR_MIN and n >= BILINEAR_SHARE * total:
                rules[key] = rule
        return rules

    def _moved_by_two(self, alongs: list[list]) -> set:
        """The grid entries two axes move at some point's coordinates."""
        base = jp.named(self.base_launch)
        numbers = [name for name in base if name[0] == "grid"]
        out = set()
        for along in alongs:
            named = [jp.named(a) for a in along if a is not None]
            for name in numbers:
                if sum(name in a and a[name] != base[name] for a in named) > 1:
                    out.add(name)
        return out

    def unpredicted(self, got: Launch, along: list, where: tuple | None = None) -> tuple[str, tuple] | None:
        """Why ``got`` (launched at ``where``, ``(m, dims)``) is not what the axes predict, and
        its combination (the key it is judged under), or None."""
        base = self.base_launch
        moved = [a for a in along if a is not None and a[0] != base[0]]
        if len(moved) > 1:
            return _TWO_KERNELS, jp.variant_of(got)
        if got[0] != (moved[0][0] if moved else base[0]):
            return _OTHER_KERNEL, jp.variant_of(got)
        names, flags = jp.parts(got[0])
        values, at_base = jp.named(got), jp.named(base)
        named = [None if a is None else jp.named(a) for a in along]
        off, variant = [], False
        for name, flag in zip(names, flags):
            before = at_base.get(name)
            moves = [(k, a[name]) for k, a in enumerate(named) if a is not None and name in a and a[name] != before]
            changed = [v for _, v in moves]
            if not flag and len(moves) == 2 and (name, moves[0][0], moves[1][0]) in self.bilinear and where:
                (i, a_i), (j, a_j) = moves
                deltas = self._deltas(*where)
                if values[name] != _rule(self.bilinear[(name, i, j)], a_i, a_j, before, deltas[i], deltas[j]):
                    off.append((name, values[name]))
                continue
            if not flag and (len(changed) > 1 or name in self.flat):
                continue  # a number two dimensions move here, or a grid entry they move somewhere
            if len(changed) > 1 or values[name] != (changed[0] if changed else before):
                off.append((name, values[name]))
                variant = variant or flag
        if not off:
            return None
        if variant:
            return _VARIANT, jp.variant_of(got)
        # A grid entry off its prediction takes many values (a persistent grid of min(M, SMs *
        # occupancy)): one combination per entry, not per value; other numbers, per value.
        return NUMBER, (*jp.variant_of(got), tuple((name, None if name[0] == "grid" else n) for name, n in off))

    def shrunk(self, point: JointPoint, key: tuple) -> JointPoint:
        """The point moved, one dimension after another (the batch first), to the smallest
        size at which the launch is still the same combination (by bisection): a switch on
        ``M > 600 and N > 3000`` found at the corner is judged at M = 600, N = 3000."""
        m, dims = point.m, dict(point.dims)

        def same(m_: int, dims_: dict) -> bool:
            got = self.get(m_, dims_)
            if got[0] == SKIPPED:
                return False
            if key[0] == PAIRED:  # the same compiled kernel, predicted or not
                return jp.variant_of(got) == key[1]
            off = self.unpredicted(got, self.axes_at(m_, dims_), (m_, dims_))
            return off is not None and off[1] == key

        for axis in self.axes:
            d = axis["dim"]
            lo, hi = min(axis["values"]) - 1, m if d == BATCH_DIM else dims[d]  # hi launches it; lo is below
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if same(mid, dims) if d == BATCH_DIM else same(m, {**dims, d: mid}):
                    hi = mid
                else:
                    lo = mid
            if d == BATCH_DIM:
                m = hi
            else:
                dims[d] = hi
        if (m, dims) == (point.m, dict(point.dims)):
            return point
        return JointPoint(m, dims, f"{point.why.rsplit(' at ', 1)[0]} at {jp.where(m, dims)} (the smallest sizes "
                                   f"found that launch it, from {jp.where(point.m, point.dims)})")


def _rule(rule, a_i: int, a_j: int, base: int, d_i: int, d_j: int):
    """A number two axes move, from its values along them: their product over the base's
    (``cdiv(M, BM) * cdiv(N, BN)``), or bilinear with factor ``rule`` (``M * N``: 1)."""
    if rule == "product":
        return Fraction(a_i * a_j, base)
    return a_i + a_j - base + rule * d_i * d_j
