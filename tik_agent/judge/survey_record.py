"""What a survey record holds, and what the analysis finds in it: the markers of a size
not called or whose call raised, the labels of a launch's numbers, and a boundary.

Shared by the analysis along the axes (:mod:`tik_agent.judge.configs`), at combined
points (:mod:`tik_agent.judge.joint_analysis`) and between the sequences layout's twins
(:mod:`tik_agent.judge.survey_twins`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

SKIPPED = "skipped"   # the structure of a size whose inputs passed the byte cap (not called)
RAISED = '["raised"'  # how the structure of a call that raised begins


@dataclass(frozen=True)
class Boundary:
    dim: str
    value: int   # the first size of the new configuration
    why: str


def is_variant(label: str) -> bool:
    """Whether a number of a structure is part of the kernel variant (a constexpr or an option)."""
    return label.startswith(("constexpr ", "option "))


def structure_labels(structure: str) -> list[str]:
    """The label of each number of a structure, in order ("constexpr BLOCK", "option num_warps", "grid", "M")."""
    return [e for launch in json.loads(structure) for e in launch if isinstance(e, str)]


def variant_of(point) -> tuple | None:
    """The kernel variant a recorded launch ``(structure, numbers)`` is (its structure,
    constexprs and options: one compiled kernel); None where it is missing, skipped or raised."""
    if point is None or point[0] == SKIPPED or point[0].startswith(RAISED):
        return None
    labels = structure_labels(point[0])
    return point[0], tuple(n for label, n in zip(labels, point[1]) if is_variant(label))
