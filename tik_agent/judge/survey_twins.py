"""The sequences layout's long twins in the survey's analysis.

Each KV-head axis of three sizes or more has a twin over one sequence of many new tokens
(:mod:`tik_agent.judge.config_sequences`, an axis with ``twin``: its short axis's key).
Every change on a twin is judged at the twin's geometry, one change of kernel variants
once (at the twin of fewest query heads); a twin whose first size launches another
kernel variant than its short axis's shows no change along it, so that size is a
boundary of its own.

Each twin has a bridge too: the chunk swept at the twin's first head counts and context
(an axis with ``bridge``).  A change along a bridge that the chunk's own axis shows at
the same size, the same way (the same kernel variants on both sides, the grid moving by the
same amounts, no run-time integer moving), is judged there; every other is judged on the bridge."""

from __future__ import annotations

from typing import Mapping

from tik_agent.judge.survey_axes import axis_key
from tik_agent.judge.survey_record import Boundary, is_variant, structure_labels
from tik_agent.judge.survey_record import variant_of as _variant


def shown_by_twins(plan: list[dict], found: list[Boundary], points: Mapping) -> list[Boundary]:
    """The boundaries less a twin's that another twin of fewer query heads shows as the same
    launch change: the same kernel variants (structure, constexprs and options) on both sides.
    Every other change on a twin is judged at its geometry, even one its short axis shows: a
    variant judged on short contexts only may differ there alone (a wider KV tile over 16
    positions or fewer gives the seed's bits), and a reason's text does not tell two launches
    apart (red team, 2026-12-06)."""
    axes = {axis_key(a): a for a in plan if a.get("twin")}
    if not axes:
        return found

    def heads(b: Boundary) -> int:
        return b.value * max([int(t[1]) for t in axes[b.dim]["tied"].values()] or [1])

    kept, seen = [b for b in found if b.dim not in axes], set()
    for b in sorted((b for b in found if b.dim in axes), key=lambda b: (heads(b), b.dim, b.value)):
        at = points.get(b.dim, {})
        before = [v for v in sorted(axes[b.dim]["values"]) if v < b.value]
        change = (_variant(at.get(before[-1])) if before else None, _variant(at.get(b.value)))
        if change[0] == change[1] or None in change:  # a number's change, or a point not recorded
            kept.append(b)
        elif change not in seen:
            seen.add(change)
            kept.append(b)
    return kept


def twin_starts(plan: list[dict], points: Mapping) -> list[Boundary]:
    """A twin's first size where it launches another kernel variant than its short axis's
    first (``T > 64 and Hq == 4 * Hkv``): a boundary judged at the twin's geometry.  One
    variant is judged once, at the twin of fewest query heads that starts with it."""
    out, seen = [], set()
    for axis in sorted((a for a in plan if a.get("twin")), key=lambda a: [t[1] for t in a["tied"].values()]):
        low, key = min(axis["values"]), axis_key(axis)
        start = _variant(points.get(key, {}).get(low))
        if start is None or start in seen:
            continue
        if start == _variant(points.get(str(axis["twin"]), {}).get(low)):
            # its short axis launches it at the same heads: what differs is numbers, which the
            # twin's bridge moves from a short chunk to a long one
            seen.add(start)
            continue
        seen.add(start)
        labels = [label for label in structure_labels(start[0]) if is_variant(label)]
        out.append(Boundary(key, low, f"another kernel variant than {axis['twin']} at its start (" +
                            ", ".join(f"{label} = {n}" for label, n in zip(labels, start[1])) + ")"))
    return out


def shown_by_chunk(plan: list[dict], found: list[Boundary], points: Mapping) -> list[Boundary]:
    """The boundaries less a bridge's that the chunk's own axis shows as the same change: the
    seed's grid steps one block of new tokens further on every bridge as on that axis, and
    judging each again at every ratio's heads would cost an evaluation a dozen cases.  A
    change the chunk's axis does not show (``bump = int(T > 64 and Hq == 4 * Hkv)``, read by
    the kernel) is judged on the bridge."""
    bridges = {axis_key(a): a for a in plan if a.get("bridge")}
    own = {str(a["dim"]): axis_key(a) for a in plan if not a.get("key")}
    kept = []
    for b in found:
        axis = bridges.get(b.dim)
        main = points.get(own.get(str(axis["dim"]), ""), {}) if axis else {}
        step = _step(points.get(b.dim, {}), b.value) if axis else None
        if step is None or step != _step(main, b.value):
            kept.append(b)
    return kept


def _step(at: Mapping, value: int) -> tuple | None:
    """How the launch changes from ``value - 1`` to ``value`` where only its grid and its
    kernel variant move: the variants on both sides and each number's difference.  None
    where either point is missing, skipped or raised, or where a run-time integer moves:
    one the kernel reads may mean something else at the bridge's heads than at the chunk
    axis's (``bump + 2 * (Hq == 4 * Hkv)`` moves by one on both, a red team's), so that
    change is judged on the bridge."""
    before, after = at.get(value - 1), at.get(value)
    if _variant(before) is None or _variant(after) is None or before[0] != after[0]:
        return None
    labels = structure_labels(after[0])
    deltas = tuple(a - b for a, b in zip(after[1], before[1]))
    if any(d and label != "grid" and not is_variant(label) for label, d in zip(labels, deltas)):
        return None
    return _variant(before), _variant(after), deltas
