"""Combinations of dimensions in the configuration survey: the points it surveys, and
their record.

Each axis of the survey (:mod:`tik_agent.judge.configs`) sweeps one dimension with
the others held at a base drawn from the evaluation's secret, so a launcher that
switches only where two sizes are both large (``if M > 1000 and N > 3000``, or on
``M * N``) escapes every axis.  The survey therefore also calls the launcher at
points of combined sizes (:func:`draw`): the corner of the largest judged sizes,
:data:`NEAR_TOP` points drawn in the top half of every range, the lattice of powers
of two and their neighbours crossed over every dimension (at most :data:`LATTICE`
of it, drawn), and :data:`SAMPLES` points drawn log-uniform over every dimension at
once.  Each axis surveys the points' coordinates too.  A launcher call costs a
quarter of a millisecond here, so the 3,300 points of rmsnorm's domain cost about a
second.

What the points say, and what is judged or refused, is
:mod:`tik_agent.judge.joint_analysis`.  A switch on a region of combined sizes that
no point lands in (``M % 97 == 50 and N % 89 == 60``) is not seen.
"""

from __future__ import annotations

import itertools
import random
from typing import Mapping

from tik_agent.judge.configs import SKIPPED
from tik_agent.judge.joint_analysis import NUMBER, JointPoint, judge  # noqa: F401  (this module's interface)
from tik_agent.judge.survey_axes import log_uniform
from tik_agent.spec.fields import BATCH_DIM

SAMPLES = 2048  # points drawn log-uniform over every dimension at once
LATTICE = 2048  # points of the powers-of-two lattice at most (drawn from it when it is larger)
NEAR_TOP = 16   # points drawn uniform in the top half of every dimension's judged range


def draw(axes: list[dict], rng: random.Random) -> list[dict]:
    """The points of the joint survey (see the module's text); none for fewer than two axes."""
    if len(axes) < 2:
        return []
    base = dict(axes[0]["dims"])
    rows = next((int(a["m"]) for a in axes if a["dim"] != BATCH_DIM), 1)
    spans = [(a["dim"], min(a["values"]), int(a["high"])) for a in axes]
    chosen = [{d: high for d, _, high in spans}]
    chosen += [{d: rng.randint(max(low, high // 2), high) for d, low, high in spans} for _ in range(NEAR_TOP)]
    lattice = list(itertools.product(*[_powers(low, high) for _, low, high in spans]))
    if len(lattice) > LATTICE:
        lattice = rng.sample(lattice, LATTICE)
    chosen += [{d: v for (d, _, _), v in zip(spans, combo)} for combo in lattice]
    chosen += [{d: log_uniform(rng, low, high) for d, low, high in spans} for _ in range(SAMPLES)]
    out, seen = [], set()
    for point in chosen:
        m = point.pop(BATCH_DIM, rows)
        dims = {**base, **point}
        key = key_of(m, dims)
        if key not in seen:
            seen.add(key)
            out.append({"m": m, "dims": dims})
    return out


def _powers(low: int, high: int) -> list[int]:
    """Every power of two in [low, high] with its neighbours, and both ends."""
    out = {low, high}
    for k in range(high.bit_length() + 1):
        out.update(v for v in ((1 << k) - 1, 1 << k, (1 << k) + 1) if low <= v <= high)
    return sorted(out)


def coordinates(axis: Mapping, points: list[dict]) -> list[int]:
    """Each point's size along ``axis``: the axis surveys them too (the predictions read them)."""
    return [int(p["m"]) if axis["dim"] == BATCH_DIM else int(p["dims"][axis["dim"]]) for p in points]


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
    structures = [str(s) for s in record["structures"]]
    out = {}
    for entry in record.get("joint", []):
        m, dims = int(entry[0]), {str(k): int(v) for k, v in dict(entry[1]).items()}
        out[key_of(m, dims)] = (SKIPPED, ()) if len(entry) == 2 else \
            (structures[int(entry[2])], tuple(int(n) for n in entry[3]))
    return out


def key_of(m: int, dims: Mapping) -> tuple:
    return int(m), tuple(sorted((str(k), int(v)) for k, v in dims.items()))
