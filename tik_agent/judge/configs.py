"""Configuration coverage: every size at which the launcher's launch changes is judged.

A launcher picks its launch from the sizes it is called with (grid, block sizes,
kernel, options).  A switch at sizes no case draws (``M % 13 == 5``, or one above
every case) escaped parity, so the candidate's launcher runs in a *survey*
(:mod:`tik_agent.sandbox.survey`): every batch size up to the largest this device
judges, every size of each other dimension up to :data:`EXHAUSTIVE`, and sizes drawn
from the evaluation's secret beyond, up to the domain's ends; each launch recorded,
none run.  Where the launch changes along an axis, parity cases on each side judge
it (``origin="config"``), on
:data:`~tik_agent.judge.config_cases.CONFIG_ROWS` rows a side:

* each new kernel variant (the tuple of constexprs and options: another compiled
  kernel) at the first size that launches it;
* a structure change (kernel, argument kinds, grid rank) where it happens;
* another number: no switch if affine in the size (``M``, a stride); judged at its
  first change if a cdiv of the size, or a run of equal steps at evenly spaced
  sizes or of one factor at doubling sizes; every other change where it happens.

Refused (``integrity_failed``, naming the axis and size): more than
:data:`BOUNDARY_BUDGET` changes, a change beyond the largest size this device
judges, a launcher that raised inside the domain, a record lacking a size.

Switches on combinations of sizes, which no single axis shows, are the business of
:mod:`tik_agent.judge.joint`.

One analysis, run twice: in the worker, whose ``probe`` surveys the sizes a
bisection needs, and in the parent over the worker's record.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping

from tik_agent.judge.config_sequences import survey_plan as sequences_plan
from tik_agent.judge.survey_axes import EXHAUSTIVE, SAMPLES, SURVEY_ROWS, axis_key, point_of, rows_plan  # noqa: F401 - the survey's vocabulary
from tik_agent.judge.survey_record import RAISED, SKIPPED, Boundary, is_variant, structure_labels  # noqa: F401 - the record's vocabulary
from tik_agent.judge.survey_twins import shown_by_chunk, shown_by_twins, twin_starts
from tik_agent.spec.schema import KernelSpec

BOUNDARY_BUDGET = 12  # changes of configuration one evaluation judges; more is a refusal
# Boundaries judged over all axes at most: one change of (dimension, size) shows on every axis
# that sweeps the dimension (the sequences layout's KV heads at six ratios), and each boundary
# costs its cases.  A launcher with ten distinct variants over the KV heads showed 47 and
# took an evaluation from 104 s to 407 s under the interpreter (docs/security.md).
BOUNDARIES_JUDGED = 48
RUN_MIN = 3           # evenly spaced (or doubling) changes that make a run
BYTE_CAP = {"cpu": 4 << 30, "cuda": 1 << 30}  # inputs of one survey call (on the CPU: address space)
WINDOW = 256          # sizes surveyed one by one after a change past the exhaustive range

Lookup = Callable[[int], "tuple[str, tuple[int, ...]] | None"]


class Unlocated(Exception):
    """The record lacks a size the analysis needs."""


class Refused(Exception):
    """A point of the record the analysis refuses outright."""


@dataclass
class Findings:
    boundaries: list[Boundary] = field(default_factory=list)
    refusal: str | None = None
    joint: list = field(default_factory=list)  # points of combined sizes to judge (tik_agent.judge.joint)


def surveyed(spec: KernelSpec) -> bool:
    """Specs whose launcher is surveyed: a declared domain (either layout)."""
    return spec.domain is not None and spec.domain.declared


def survey_plan(spec: KernelSpec, device: str, rng: random.Random) -> list[dict]:
    """The axes of the survey: one per dimension of the domain (the batch first)."""
    from tik_agent.spec.domain_cases import _dtype

    if spec.layout == "sequences":
        return sequences_plan(spec, device, rng, _dtype(spec))
    return rows_plan(spec, device, rng, _dtype(spec))


def analyse(axis: Mapping, lookup: Lookup) -> Findings:
    """Where the launch changes along ``axis``: the boundaries to judge, or a refusal."""
    dim, high = axis_key(axis), int(axis["high"])
    values = sorted(axis["values"])
    try:
        exhaustive = [v for v in values if v <= axis["exhaustive"]]
        found = _changes(dim, exhaustive, lookup)
        if len({b.value for b in found}) > budget_of([axis]):
            return _too_many(found, budget_of([axis]))
        beyond = [v for v in values if v > axis["exhaustive"]]
        if beyond and exhaustive:
            found += _beyond_changes(dim, exhaustive, beyond, lookup, int(axis["top"]), high, budget_of([axis]))
    except Unlocated as exc:
        return Findings(refusal=f"{dim}: the survey did not report size {exc} (a change it had to locate)")
    except Refused as exc:
        return Findings(refusal=str(exc))
    for b in found:
        if b.value > high:
            return Findings(refusal=f"the launch changes at {dim} = {b.value} ({b.why}), beyond the largest {dim} "
                                    f"this device judges ({high})")
    return Findings(boundaries=found)


def _get(lookup: Lookup, v: int):
    got = lookup(v)
    if got is None:
        raise Unlocated(v)
    return got


def _changes(dim: str, values: list[int], lookup: Lookup) -> list[Boundary]:
    """Changes over consecutive sizes: of structure, of the kernel variant (its constexprs
    and options), and of each other number that is not affine or cdiv-like in the size
    nor part of a regular run."""
    out: list[Boundary] = []
    segment: list[int] = []
    variants: set = set()
    for v in values:
        point = _get(lookup, v)
        if point[0] == SKIPPED:
            continue
        if point[0].startswith(RAISED):
            raise Refused(f"the launcher raised {json.loads(point[0])[1]} at {dim} = {v}, inside the declared domain")
        if segment and point[0] != _get(lookup, segment[-1])[0]:
            out.append(Boundary(dim, v, "another kernel, argument kind or grid rank"))
            out += _numeric(dim, segment, lookup, variants)
            segment = []
        segment.append(v)
    return out + _numeric(dim, segment, lookup, variants)


def _numeric(dim: str, segment: list[int], lookup: Lookup, variants: set) -> list[Boundary]:
    """Each new kernel variant (the tuple of constexprs and options: another compiled
    kernel) at its first size, and each other number's changes that follow no rule."""
    if not segment:
        return []
    structure = _get(lookup, segment[0])[0]
    labels = structure_labels(structure)
    fixed = [i for i, label in enumerate(labels) if is_variant(label)]
    out = []
    rows = [_get(lookup, v)[1] for v in segment]  # each point read once (every one was read before)
    for v, row in zip(segment, rows):
        variant = (structure, tuple(row[i] for i in fixed))
        if variant not in variants:
            if variants and v != segment[0]:
                out.append(Boundary(dim, v, "another kernel variant (constexprs or options " +
                                    ", ".join(f"{labels[i]} = {variant[1][k]}" for k, i in enumerate(fixed)) + ")"))
            variants.add(variant)
    # A number follows a rule over the segment, or over each kernel variant's sizes on their
    # own, whichever leaves fewer changes to judge: a block that grows with the tokens changes
    # the grid's rule where it does (an honest launcher), and that size is judged as the
    # variant's first; a warps count by head counts leaves the grid's rule alone.
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(row[k] for k in fixed), []).append(i)
    for index, numbers in enumerate(zip(*rows)):
        if index in fixed:
            continue
        whole = _ruleless(segment, numbers)
        if whole and len(groups) > 1:
            apart = [c for members in groups.values()
                     for c in _ruleless([segment[i] for i in members], tuple(numbers[i] for i in members))]
            # each variant's own rule for a run-time integer (not the grid's) is judged at its
            # second size too: its first alone does not pin a rule that starts there (``bump =
            # Q - 61`` from a variant at Q = 61 is 0 at its first size; a red team's)
            if index >= len(labels) or labels[index] != "grid":
                apart += [(segment[m[1]], numbers[m[0]], numbers[m[1]]) for m in groups.values()
                          if len(m) > 1 and numbers[m[1]] != numbers[m[0]]]
            whole = min(whole, sorted(set(apart)), key=len)
        for value, before, after in whole:
            out.append(Boundary(dim, value, f"{labels[index] if index < len(labels) else 'a number'} "
                                            f"goes from {before} to {after}"))
    return sorted(out, key=lambda b: b.value)


def _ruleless(xs: list[int], ys: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """The changes of one number along sizes ``xs`` that no rule explains: none if affine, the
    first if a cdiv of the size, each regular run's first, every other one."""
    if len(xs) < 2 or _affine(xs, ys):
        return []
    points = [(xs[i], ys[i - 1], ys[i]) for i in range(1, len(xs)) if ys[i] != ys[i - 1]]
    if points and _cdiv_like(xs, ys) is not None:
        points = points[:1]  # a cdiv of the size: the later steps are the same change again
    return _irregular(points)


def _affine(xs: list[int], ys: tuple[int, ...]) -> bool:
    """``ys`` is affine in the consecutive sizes ``xs`` (over more than RUN_MIN sizes)."""
    if len(xs) <= RUN_MIN or xs[1] == xs[0]:
        return False
    # (the sizes are consecutive along most axes; a head count swept over its ratios doubles)
    dx, dy = xs[1] - xs[0], ys[1] - ys[0]
    return all((y - ys[0]) * dx == dy * (x - xs[0]) for x, y in zip(xs, ys))


def _cdiv_like(xs: list[int], ys: tuple[int, ...]) -> Callable[[int], int] | None:
    """``ys`` as e + ceil(p * x / r) or e + floor(p * x / r), r a power of two (a flat grid,
    ``cdiv(M * N, BLOCK)``), exactly at every size; the function, or None."""
    if len(xs) <= RUN_MIN or xs[-1] == xs[0] or ys[-1] <= ys[0]:
        return None
    slope = (ys[-1] - ys[0]) / (xs[-1] - xs[0])
    for k in range(25):
        r = 1 << k
        for p in {max(1, round(slope * r) + d) for d in (-1, 0, 1)}:
            for f in (lambda a, b: -(-a // b), lambda a, b: a // b):
                e = ys[0] - f(p * xs[0], r)
                if all(y == e + f(p * x, r) for x, y in zip(xs, ys)):
                    return lambda x, e=e, f=f, p=p, r=r: e + f(p * x, r)
    return None


def _irregular(points: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Change points to judge: every one outside a regular run, and each run's first."""
    out, i = [], 0
    while i < len(points):
        j = max(_run_end(points, i, _evenly), _run_end(points, i, _doubling))
        if j - i + 1 >= RUN_MIN:
            out.append(points[i])  # the run's first change: the later ones are the same change again
            i = j + 1
        else:
            out.append(points[i])
            i += 1
    return out


def _run_end(points, i: int, same: Callable) -> int:
    """The last index of a run starting at ``i`` (``i`` itself when there is none)."""
    j = i + 1
    while j + 1 < len(points) and same(points[j - 1], points[j], points[j + 1]):
        j += 1
    return j if j - i + 1 >= RUN_MIN else i


def _evenly(a, b, c) -> bool:
    """Evenly spaced sizes, each adding the same step (a cdiv grid)."""
    return b[0] - a[0] == c[0] - b[0] and b[2] - b[1] == c[2] - c[1] == a[2] - a[1]


def _doubling(a, b, c) -> bool:
    """Gaps that double, each change by the same factor (a power-of-two block)."""
    ratio = (lambda p: p[2] / p[1] if p[1] else None)
    return c[0] - b[0] == 2 * (b[0] - a[0]) and ratio(a) is not None and ratio(a) == ratio(b) == ratio(c)


def _beyond_changes(dim: str, exhaustive: list[int], beyond: list[int], lookup: Lookup, top: int,
                    high: int, budget: int = BOUNDARY_BUDGET) -> list[Boundary]:
    """Past the exhaustive range: each sampled size must launch as the last configuration
    predicts; one that does not is located by bisection, then the sizes after it are
    surveyed (:data:`WINDOW` of them) and predicted anew, up to the budget."""
    window = [v for v in exhaustive if _get(lookup, v)[0] != SKIPPED]
    out: list[Boundary] = []
    while window:
        predict, last = _predictor(window, lookup), window[-1]
        window = []
        for v in (v for v in beyond if v > last):
            got = _get(lookup, v)
            if got[0] == SKIPPED:
                continue
            if got[0].startswith(RAISED):
                raise Refused(f"the launcher raised {json.loads(got[0])[1]} at {dim} = {v}, inside the declared domain")
            if predict(v) == got:
                last = v
                continue
            lo, hi = last, v  # lo launches as predicted, hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                point = _get(lookup, mid)
                if point[0] != SKIPPED and predict(mid) != point:
                    hi = mid
                else:
                    lo = mid
            out.append(Boundary(dim, hi, "the launch leaves the rule it followed up to "
                                         f"{dim} = {lo}"))
            if hi > high or len(out) > budget:
                return out
            window = list(range(hi, min(hi + WINDOW, top) + 1))
            out += [b for b in _changes(dim, window, lookup) if b.value != hi]
            break
    return out


def _predictor(values: list[int], lookup: Lookup) -> Callable[[int], tuple]:
    """The configuration the last segment's rules give at a larger size: affine and
    cdiv-like numbers extended, a run extended while it runs past the end, anything else
    held."""
    end = _get(lookup, values[-1])
    segment = [v for v in values if _same_variant(_get(lookup, v), end)]
    segment = segment[next((i for i in range(len(segment) - 1, 0, -1)
                            if segment[i] - segment[i - 1] != 1), 0):]
    rules = []
    rows = [_get(lookup, v)[1] for v in segment]  # each point read once, not once per number
    for index, value in enumerate(end[1]):
        ys = tuple(row[index] for row in rows)
        if _affine(segment, ys):
            rules.append(lambda x, y=ys[-1], s=ys[1] - ys[0], e=segment[-1]: y + s * (x - e))
            continue
        cdiv = _cdiv_like(segment, ys)
        if cdiv is not None:
            rules.append(cdiv)
            continue
        points = [(segment[i], ys[i - 1], ys[i]) for i in range(1, len(segment)) if ys[i] != ys[i - 1]]
        rules.append(_continued(points, segment[-1], value))
    return lambda x: (end[0], tuple(rule(x) for rule in rules))


def _same_variant(a: tuple, b: tuple) -> bool:
    """Two points launch the same kernel variant (structure, constexprs and options)."""
    if a[0] != b[0]:
        return False
    fixed = [i for i, label in enumerate(structure_labels(a[0])) if is_variant(label)]
    return all(a[1][i] == b[1][i] for i in fixed)


def _continued(points, end: int, value: int) -> Callable[[int], int]:
    """A run that reaches the end goes on: its next change where its spacing puts it."""
    if len(points) >= RUN_MIN:
        a, b, c = points[-3:]
        if _evenly(a, b, c) and c[0] + (c[0] - b[0]) > end:
            gap, step = c[0] - b[0], c[2] - c[1]
            return lambda x: value + step * ((x - c[0]) // gap) if x >= c[0] else value
        if _doubling(a, b, c) and c[0] + 2 * (c[0] - b[0]) > end:
            ratio = c[2] / c[1]

            def doubled(x, start=c[0], gap=c[0] - b[0]):
                out, nxt, g = value, start + 2 * gap, 2 * gap
                while x >= nxt:
                    out, g = out * ratio, g * 2
                    nxt += g
                return round(out)
            return doubled
    return lambda x: value


def decode(record: Mapping) -> dict[str, dict[int, tuple]]:
    """A worker's survey record as {dim: {size: (structure, numbers)}} (SKIPPED, ()) for
    a size whose inputs passed the byte cap.  Raises ValueError on a malformed record."""
    structures = [str(s) for s in record["structures"]]
    out: dict[str, dict[int, tuple]] = {}
    for axis in record["axes"]:
        points: dict[int, tuple] = {}
        for entry in axis["points"]:
            v = int(entry[0])
            points[v] = (SKIPPED, ()) if len(entry) == 1 else (structures[int(entry[1])],
                                                                 tuple(int(n) for n in entry[2]))
        out[str(axis["dim"])] = points  # the worker writes each axis's key here
    return out


def findings(plan: list[dict], record: Mapping, points: dict | None = None) -> Findings:
    """The boundaries of every axis (or the first refusal), from a worker's record (or from
    ``points``, the record already decoded)."""
    try:
        points = decode(record) if points is None else points
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return Findings(refusal=f"the survey's record cannot be read ({type(exc).__name__})")
    out = Findings()
    for axis in plan:
        got = analyse(axis, points.get(axis_key(axis), {}).get)
        if got.refusal:
            return got
        out.boundaries += got.boundaries
    out.boundaries = shown_by_chunk(plan, shown_by_twins(plan, out.boundaries, points), points) + twin_starts(plan, points)
    unique = sorted({(b.dim, b.value): b for b in out.boundaries}.values(), key=lambda b: (b.dim, b.value))
    # Counted by dimension and size: one threshold that several axes over one dimension
    # show (the sequences layout's KV heads at each ratio) is one change against the budget;
    # each axis's boundary is still judged.
    dims = {axis_key(a): str(a["dim"]) for a in plan}
    distinct = len({(dims.get(b.dim, b.dim), b.value) for b in unique})
    if distinct > budget_of(plan):
        return _too_many(unique, budget_of(plan), distinct)
    if len(unique) > BOUNDARIES_JUDGED:
        shown = ", ".join(f"{b.dim} = {b.value}" for b in unique[:4])
        return Findings(refusal=f"the launch changes at {len(unique)} points over the survey's axes ({shown}, ...): "
                                f"more than the {BOUNDARIES_JUDGED} one evaluation judges")
    out.boundaries = unique
    return out


def budget_of(plan: list[dict]) -> int:
    """Changes one evaluation judges: :data:`BOUNDARY_BUDGET`, or what the plan's axes say
    (the sequences layout's six axes: :mod:`tik_agent.judge.config_sequences`)."""
    return max([int(a.get("budget", BOUNDARY_BUDGET)) for a in plan] or [BOUNDARY_BUDGET])


def _too_many(found: list[Boundary], budget: int = BOUNDARY_BUDGET, count: int | None = None) -> Findings:
    unique = sorted({(b.dim, b.value): b for b in found}.values(), key=lambda b: (b.dim, b.value))
    shown = ", ".join(f"{b.dim} = {b.value}" for b in unique[:6])
    count = len(unique) if count is None else count
    return Findings(refusal=f"the launch changes at {count} sizes that follow no rule ({shown}, ...): "
                            f"more than the {budget} an evaluation judges")

