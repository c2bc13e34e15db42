"""Combinations of dimensions in the configuration survey.

Each axis of the survey (:mod:`tik_agent.judge.configs`) sweeps one dimension with
the others held at a base drawn from the evaluation's secret, so a launcher that
switches only where two sizes are both large (``if M > 1000 and N > 3000``, or on
``M * N``) escapes every axis.  The survey therefore also calls the launcher at
:data:`SAMPLES` points drawn log-uniform over every dimension at once (and the
corner where each is at its largest judged size), and each axis is surveyed at the
points' coordinates too.

What a point launches is then predicted from the axes, as if each part of the
launch followed one dimension at most (a separable launcher: a block from the row
width, a grid from the batch):

* the launch's structure (kernel, argument kinds, grid rank): the base's where no
  axis changes it at the point's coordinates, that axis's where exactly one does;
* each constexpr and option (the kernel variant), and each other number, the same
  way, among the points that launch the same structure.

A point whose structure or kernel variant differs from the prediction, or that the
prediction cannot place (two axes change it), launches a combination no axis showed,
and is judged with parity cases at that point, as a boundary is: one point per
combination (the smallest), at most :data:`BUDGET` combinations, each within
:data:`JUDGED_ELEMENTS` of its device; more, or larger, is a refusal.  A number
that is not a constexpr or option (a grid, a run-time integer) is judged where it
leaves its prediction and left alone where two axes move it (a flat grid of ``M *
N`` moves with both): a joint switch carried only by such a number, at a point two
axes move, is not seen.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Callable, Mapping

from tik_agent.spec.fields import BATCH_DIM

SAMPLES = 48    # points drawn per evaluation, log-uniform over every dimension at once
BUDGET = 4      # combinations one evaluation judges; more is a refusal
# Elements of a judged point's batch (rows times the other dimensions): the interpreter pays
# about 5-20 ms a row of a few thousand, so a CPU case of 2**22 elements takes seconds.
JUDGED_ELEMENTS = {"cpu": 1 << 22, "cuda": 1 << 30}


NUMBER = "a number (not a constexpr or option) no single dimension gives"


@dataclass(frozen=True)
class JointPoint:
    m: int
    dims: Mapping[str, int]
    why: str

    @property
    def elements(self) -> int:
        return self.m * math.prod(self.dims.values())


def draw(axes: list[dict], rng: random.Random) -> list[dict]:
    """The points of the joint survey: :data:`SAMPLES` drawn log-uniform over every axis
    at once, and the corner of the largest judged sizes; none for fewer than two axes."""
    if len(axes) < 2:
        return []
    base = dict(axes[0]["dims"])
    rows = next((int(a["m"]) for a in axes if a["dim"] != BATCH_DIM), 1)
    points = [{a["dim"]: int(a["high"]) for a in axes}]
    for _ in range(SAMPLES):
        points.append({a["dim"]: _log_uniform(rng, min(a["values"]), int(a["high"])) for a in axes})
    out, seen = [], set()
    for chosen in points:
        m = chosen.pop(BATCH_DIM, rows)
        dims = {**base, **chosen}
        key = (m, tuple(sorted(dims.items())))
        if key not in seen:
            seen.add(key)
            out.append({"m": m, "dims": dims})
    return out


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    if high <= low:
        return low
    return min(high, max(low, int(math.exp(rng.uniform(math.log(low), math.log(high + 1))))))


def coordinates(axis: Mapping, points: list[dict]) -> list[int]:
    """Each point's size along ``axis``: the axis surveys them too (the predictions read them)."""
    return [int(p["m"]) if axis["dim"] == BATCH_DIM else int(p["dims"][axis["dim"]]) for p in points]


def _labels(structure: str) -> list[str]:
    """The label of each number of a structure, in order."""
    return [e for launch in json.loads(structure) for e in launch if isinstance(e, str)]


def _is_variant(label: str) -> bool:
    return label.startswith(("constexpr ", "option "))


class _Missing(Exception):
    """The record lacks a point the analysis needs."""


PointLookup = Callable[[int, dict], "tuple[str, tuple[int, ...]] | None"]


def judge(axes: list[dict], points: list[dict], at_point: PointLookup, along: Mapping) -> tuple[list[JointPoint], str | None]:
    """The points that launch a combination no axis showed (one per combination, moved to
    the smallest sizes that still launch it), or a refusal.  ``at_point(m, dims)`` and
    ``along[dim](size)`` give (structure, numbers) or None: in the worker they survey the
    sizes asked for, in the parent they read the worker's record."""
    try:
        return _judge(axes, points, at_point, along)
    except _Missing as exc:
        return [], f"the survey did not report {exc} (a point of combined sizes it had to place)"
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a record the worker forged
        return [], f"the survey's record of combined sizes cannot be read ({type(exc).__name__})"


def _judge(axes, points, at_point, along):
    from tik_agent.judge.configs import RAISED, SKIPPED

    base = _base(axes, along)
    if isinstance(base, str):
        return [], base
    found: dict[tuple, JointPoint] = {}     # a structure or kernel variant no axis predicts: each judged
    numbers: dict[tuple, JointPoint] = {}   # only a number off its prediction: the smallest few judged
    placed = []
    for point in points:
        m, dims = int(point["m"]), dict(point["dims"])
        got = _get(at_point, m, dims)
        if got[0] == SKIPPED:
            continue
        if got[0].startswith(RAISED):
            return [], f"the launcher raised {json.loads(got[0])[1]} at {_where(m, dims)}, inside the declared domain"
        placed.append((m, dims, got, _along(axes, along, m, dims)))
    flat = _two_axis_numbers(base, [a for *_, a in placed])
    for m, dims, got, at in placed:
        off = _unpredicted(base, at, got, flat)
        if off is None:
            continue
        why, key = off
        into = numbers if why == NUMBER else found
        candidate = JointPoint(m, dims, f"{why} at {_where(m, dims)}")
        if key not in into or candidate.elements < into[key].elements:
            into[key] = candidate
    chosen = _smallest(found.values())
    if len(chosen) > BUDGET:
        shown = "; ".join(p.why for p in chosen[:3])
        return [], (f"the launch changes with combinations of sizes in {len(chosen)} ways no single size shows "
                    f"({shown}; ...): more than the {BUDGET} an evaluation judges")
    # A number alone (a grid, a run-time integer) off its prediction: judged at the smallest points
    # of as many variants as the budget leaves, and at one at least.
    chosen += [p for p in _smallest(numbers.values()) if p not in chosen][: max(1, BUDGET - len(chosen))]
    device = axes[0]["device"]
    cap = JUDGED_ELEMENTS.get(device, JUDGED_ELEMENTS["cuda"])
    out = []
    for p in chosen:
        small = _shrunk(axes, base, p, at_point, along, flat)
        if small.elements > cap:
            return [], f"{small.why}: {small.elements} elements, more than a case on {device} can judge ({cap})"
        out.append(small)
    return out, None


def _get(lookup, *where):
    got = lookup(*where)
    if got is None:
        raise _Missing(_where(*where) if len(where) == 2 else f"{where[0]}")
    return got


def _where(m: int, dims: Mapping) -> str:
    return ", ".join([f"{BATCH_DIM} = {m}"] + [f"{k} = {v}" for k, v in sorted(dims.items())])


def _along(axes: list[dict], along: Mapping, m: int, dims: Mapping) -> list:
    """The launch along each axis at the point's coordinate on it (None: skipped or raised there)."""
    from tik_agent.judge.configs import RAISED, SKIPPED

    out = []
    for axis in axes:
        size = m if axis["dim"] == BATCH_DIM else int(dims[axis["dim"]])
        got = along[axis["dim"]](size)
        if got is None:
            raise _Missing(f"{axis['dim']} = {size}")
        out.append(None if got[0] == SKIPPED or got[0].startswith(RAISED) else got)
    return out


def _shrunk(axes, base, point: JointPoint, at_point, along, flat: set) -> JointPoint:
    """The point moved, one dimension after another (the batch first), to the smallest size
    at which the launch is still the same unpredicted combination (by bisection): a switch
    on ``M > 600 and N > 3000`` found at the corner is judged at M = 600, N = 3000."""
    from tik_agent.judge.configs import SKIPPED

    m, dims = point.m, dict(point.dims)
    key = _unpredicted(base, _along(axes, along, m, dims), _get(at_point, m, dims), flat)[1]

    def same(m_: int, dims_: dict) -> bool:
        got = _get(at_point, m_, dims_)
        off = None if got[0] == SKIPPED else _unpredicted(base, _along(axes, along, m_, dims_), got, flat)
        return off is not None and off[1] == key

    for axis in axes:
        d = axis["dim"]
        at = (lambda x: same(x, dims)) if d == BATCH_DIM else (lambda x, d=d: same(m, {**dims, d: x}))
        lo, hi = min(axis["values"]) - 1, m if d == BATCH_DIM else dims[d]  # hi launches it; lo is below
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid):
                hi = mid
            else:
                lo = mid
        if d == BATCH_DIM:
            m = hi
        else:
            dims[d] = hi
    if (m, dims) == (point.m, point.dims):
        return point
    return JointPoint(m, dims, f"{point.why.rsplit(' at ', 1)[0]} at {_where(m, dims)} (the smallest sizes "
                               f"found that launch it, from {_where(point.m, point.dims)})")


def _smallest(points) -> list[JointPoint]:
    return sorted(points, key=lambda p: (p.elements, p.m, sorted(p.dims.items())))


def _base(axes: list[dict], along: Mapping):
    """The launch at the base (every axis at its base size), which each axis passes through;
    a refusal when two axes report different launches there."""
    from tik_agent.judge.configs import SKIPPED

    seen = None
    for axis in axes:
        size = int(axis["m"]) if axis["dim"] == BATCH_DIM else int(axis["dims"][axis["dim"]])
        got = along[axis["dim"]](size)
        if got is None:
            raise _Missing(f"{axis['dim']} = {size}")
        if seen is not None and got != seen and SKIPPED not in (got[0], seen[0]):
            return ("the launcher gave two launches for the same sizes (the base of two axes): its launch "
                    "follows something other than the sizes")
        seen = seen if seen is not None and seen[0] != SKIPPED else got
    return seen


def _two_axis_numbers(base: tuple, alongs: list[list]) -> set[int]:
    """The numbers of the base's structure (not constexprs or options) that two axes move at
    some point's coordinates (a flat grid of ``M * N``): predicted nowhere, since the change
    along one axis can hide in a floor at another point (``cdiv(M * N, 1024)``)."""
    labels = _labels(base[0])
    out = set()
    for along in alongs:
        same = [a for a in along if a is not None and a[0] == base[0] and len(a[1]) == len(base[1])]
        for i, label in enumerate(labels):
            if i < len(base[1]) and not _is_variant(label) and sum(a[1][i] != base[1][i] for a in same) > 1:
                out.add(i)
    return out


def _unpredicted(base: tuple, along: list, got: tuple, flat: set) -> tuple[str, tuple] | None:
    """Why ``got`` is not what the axes predict and what of it is not (the combination: the
    structure, or each number off its prediction with its value), or None.  ``flat``: the
    numbers two axes move somewhere (:func:`_two_axis_numbers`), left unpredicted."""
    from tik_agent.judge.configs import SKIPPED

    if base[0] == SKIPPED:
        return None
    moved = [a for a in along if a is not None and a[0] != base[0]]
    if len(moved) > 1:
        return "two dimensions change the kernel or its arguments' kinds", (got[0],)
    expected = moved[0][0] if moved else base[0]
    if got[0] != expected:
        return "another kernel or argument kinds than either dimension gives", (got[0],)
    labels = _labels(got[0])
    if any(len(_labels(a[0])) != len(a[1]) for a in (base, got, *(a for a in along if a is not None))):
        raise ValueError("a launch's numbers do not match its structure")
    off: list[tuple[int, int]] = []
    variant = False
    if _labels(base[0]) == labels:  # the same numbers as the base's: each predicted as its axes move it
        same = [a for a in along if a is not None and _labels(a[0]) == labels]
        for i, n in enumerate(got[1]):
            changed = [a[1][i] for a in same if a[1][i] != base[1][i]]
            if not _is_variant(labels[i]) and (len(changed) > 1 or i in flat):
                continue  # a number two dimensions move (a flat grid): no prediction
            if len(changed) > 1 or n != (changed[0] if changed else base[1][i]):
                off.append((i, n))
                variant = variant or _is_variant(labels[i])
    else:  # the structure follows one axis: its constexprs and options are that axis's
        for i, n in enumerate(got[1]):
            if _is_variant(labels[i]) and n != moved[0][1][i]:
                off.append((i, n))
                variant = True
    if not off:
        return None
    return ("a constexpr or option no single dimension gives" if variant else NUMBER), (got[0], tuple(off))


def with_coordinates(axes: list[dict], points: list[dict]) -> list[dict]:
    """``axes`` with each point's coordinate, and the base's, among the sizes each surveys."""
    out = []
    for axis in axes:
        base = int(axis["m"]) if axis["dim"] == BATCH_DIM else int(axis["dims"][axis["dim"]])
        values = sorted({*axis["values"], base, *coordinates(axis, points)})
        out.append({**axis, "values": values})
    return out


def decode(record: Mapping) -> dict[tuple, tuple]:
    """The record's points of combined sizes as {(m, dims as sorted pairs): (structure, numbers)},
    SKIPPED for one past the byte cap.  Raises ValueError on a malformed record."""
    from tik_agent.judge.configs import SKIPPED

    structures = [str(s) for s in record["structures"]]
    out = {}
    for entry in record.get("joint", []):
        m, dims = int(entry[0]), {str(k): int(v) for k, v in dict(entry[1]).items()}
        out[key_of(m, dims)] = (SKIPPED, ()) if len(entry) == 2 else \
            (structures[int(entry[2])], tuple(int(n) for n in entry[3]))
    return out


def key_of(m: int, dims: Mapping) -> tuple:
    return int(m), tuple(sorted((str(k), int(v)) for k, v in dims.items()))
