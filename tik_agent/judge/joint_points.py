"""The records the analysis of combined sizes shares (:mod:`tik_agent.judge.joint_analysis`,
:mod:`tik_agent.judge.joint_far`): a point to judge, and how a recorded launch is read.

A launch is ``(structure text, numbers)`` as the survey records it
(:func:`tik_agent.sandbox.survey.describe`).  Its numbers are named by their label and
place among the labels (``constexpr BLOCK``, the second ``grid``); its *variant* is the
structure with every constexpr and option: one compiled kernel.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Mapping

from tik_agent.judge.configs import is_variant, structure_labels
from tik_agent.spec.fields import BATCH_DIM

Launch = tuple  # (structure text, numbers)


@dataclass(frozen=True)
class JointPoint:
    m: int
    dims: Mapping[str, int]
    why: str

    @property
    def elements(self) -> int:
        return self.m * math.prod(self.dims.values())


@functools.lru_cache(maxsize=512)
def parts(structure: str) -> tuple[tuple[tuple[str, int], ...], tuple[bool, ...]]:
    """Each number's name (its label and how many of that label came before) and whether
    it is a constexpr or an option."""
    labels = structure_labels(structure)
    seen: Counter = Counter()
    names = []
    for label in labels:
        names.append((label, seen[label]))
        seen[label] += 1
    return tuple(names), tuple(is_variant(label) for label in labels)


@functools.lru_cache(maxsize=16384)
def named(launch: Launch) -> dict:
    """The launch's numbers by name (cached: the axes' launches recur at every point; callers
    only read the dict)."""
    names, _ = parts(launch[0])
    if len(names) != len(launch[1]):
        raise ValueError("a launch's numbers do not match its structure")
    return dict(zip(names, launch[1]))


def variant_of(launch: Launch) -> tuple:
    """The compiled kernel a launch runs: its structure and its constexprs and options."""
    _, flags = parts(launch[0])
    return launch[0], tuple(n for n, flag in zip(launch[1], flags) if flag)


def where(m: int, dims: Mapping) -> str:
    return ", ".join([f"{BATCH_DIM} = {m}"] + [f"{k} = {v}" for k, v in sorted(dims.items())])


def order(p: JointPoint) -> tuple:
    """Smallest first: by elements, then the batch, then the dimensions."""
    return p.elements, p.m, sorted(p.dims.items())


def keep_smallest(found: dict, key: tuple, candidate: JointPoint) -> None:
    """The smallest point of each key (by :func:`order`, so that ties do not depend on the
    order points come in)."""
    if key not in found or order(candidate) < order(found[key]):
        found[key] = candidate
