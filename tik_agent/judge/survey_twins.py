"""The sequences layout's long twins in the survey's analysis.

Each KV-head axis of three sizes or more has a twin over one sequence of many new tokens
(:mod:`tik_agent.judge.config_sequences`, an axis with ``twin``: its short axis's key).
A change the twin shows at the same size and the same way as its short axis is judged
once, on the short axis's cheaper geometry; a twin whose first size launches another
kernel variant than its short axis's shows no change along it, so that size is a
boundary of its own."""

from __future__ import annotations

from typing import Mapping

from tik_agent.judge.survey_axes import axis_key
from tik_agent.judge.survey_record import RAISED, SKIPPED, Boundary, is_variant, structure_labels


def shown_by_twins(plan: list[dict], found: list[Boundary]) -> list[Boundary]:
    """The boundaries less those of a twin that its short axis shows at the same size, the
    same way (its reason, read with the short axis's name): those are judged once, there."""
    twins = {axis_key(a): str(a["twin"]) for a in plan if a.get("twin")}
    if not twins:
        return found
    shown = {(b.dim, b.value, b.why) for b in found}
    return [b for b in found
            if b.dim not in twins or (twins[b.dim], b.value, b.why.replace(b.dim, twins[b.dim])) not in shown]


def twin_starts(plan: list[dict], points: Mapping) -> list[Boundary]:
    """A twin's first size where it launches another kernel variant than its short axis's
    first (``T > 64 and Hq == 4 * Hkv``): a boundary judged at the twin's geometry.  One
    variant is judged once, at the twin of fewest query heads that starts with it."""
    out, seen = [], set()
    for axis in sorted((a for a in plan if a.get("twin")), key=lambda a: [t[1] for t in a["tied"].values()]):
        low, key = min(axis["values"]), axis_key(axis)
        start = _variant(points.get(key, {}).get(low))
        if start is None or start == _variant(points.get(str(axis["twin"]), {}).get(low)) or start in seen:
            continue
        seen.add(start)
        labels = [label for label in structure_labels(start[0]) if is_variant(label)]
        out.append(Boundary(key, low, f"another kernel variant than {axis['twin']} at its start (" +
                            ", ".join(f"{label} = {n}" for label, n in zip(labels, start[1])) + ")"))
    return out


def _variant(point) -> tuple | None:
    """The kernel variant a surveyed point launches (its structure, constexprs and options)."""
    if point is None or point[0] == SKIPPED or point[0].startswith(RAISED):
        return None
    labels = structure_labels(point[0])
    return point[0], tuple(n for label, n in zip(labels, point[1]) if is_variant(label))
