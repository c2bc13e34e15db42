"""The survey's axes: which sizes each sweep calls the launcher at, and the point of each.

Shared by both layouts (:mod:`tik_agent.judge.configs` for the rows layout's plan,
:mod:`tik_agent.judge.config_sequences` for the sequences layout's): every size up to
:data:`EXHAUSTIVE`, then sizes sampled up to the domain's end; a point is the base's
dimensions with the axis's own moved, and those the axis carries along (``tied``).
"""

from __future__ import annotations

import math
import random
from typing import Mapping

from tik_agent.spec.cases import MAX_BATCH
from tik_agent.spec.fields import BATCH_DIM
from tik_agent.spec.schema import KernelSpec

EXHAUSTIVE = 8193     # every size up to this (or the axis's judged end, if lower) is surveyed
SAMPLES = 40          # sizes drawn per axis beyond it, log-uniform up to the domain's end
SURVEY_ROWS = (8, 24)  # the batch of a survey along another dimension (drawn), and of its judged cases


def rows_plan(spec: KernelSpec, device: str, rng: random.Random, dtype: str) -> list[dict]:
    """The rows layout's axes: one per range of the domain, the batch first."""
    # The other dimensions and the batch of a sweep along one: drawn, so that a launcher
    # cannot switch on the values the survey holds them at.
    base = {name: int(rng.choice(values)) for name, values in sorted(spec.dims.items())}
    rows = rng.randint(*SURVEY_ROWS)
    axes = []
    for name, span in sorted(spec.domain.dims.items(), key=lambda kv: kv[0] != BATCH_DIM):
        if span.values:  # a list of values: the edge cases judge each one
            continue
        low, top = int(span.low), int(span.high)
        high = min(int(span.judged_high(device)), MAX_BATCH.get(device, MAX_BATCH["cuda"])) \
            if name == BATCH_DIM else int(span.judged_high(device))
        exhaustive = min(high, EXHAUSTIVE)
        values = list(range(low, exhaustive + 1)) + beyond(exhaustive, top, rng)
        axes.append({"dim": name, "m": rows, "dims": base, "dtype": dtype, "values": values,
                     "exhaustive": exhaustive, "high": high, "top": top, "device": device})
    return axes


def beyond(start: int, top: int, rng: random.Random) -> list[int]:
    """Sizes past the exhaustive range: every power of two and its neighbours, the end,
    and :data:`SAMPLES` drawn log-uniform."""
    if top <= start:
        return []
    out = {top}
    for k in range(start.bit_length() - 1, top.bit_length()):
        out.update(v for v in ((1 << k) - 1, 1 << k, (1 << k) + 1) if start < v <= top)
    for _ in range(SAMPLES):
        out.add(min(top, max(start + 1, int(math.exp(rng.uniform(math.log(start + 1), math.log(top + 1)))))))
    return sorted(out)


def axis_key(axis: Mapping) -> str:
    """The axis's name in the record, its boundaries and its refusals: its dimension, or
    its own key where two axes sweep one dimension (the sequences layout's KV heads at
    each ratio)."""
    return str(axis.get("key") or axis["dim"])


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer drawn log-uniform in [low, high]."""
    if high <= low:
        return low
    return min(high, max(low, int(math.exp(rng.uniform(math.log(low), math.log(high + 1))))))


def point_of(axis: Mapping, value: int) -> tuple[int, dict]:
    """(batch, dims) of the survey call at ``value`` along ``axis``."""
    if axis["dim"] == BATCH_DIM:
        return value, dict(axis["dims"])
    dims = {**axis["dims"], axis["dim"]: value}
    # Dimensions the axis carries along (the sequences layout): "at_least" raises one to the
    # value, "fixed" holds it at a number, "times" makes it the value times a number.
    for other, (how, factor) in (axis.get("tied") or {}).items():
        dims[other] = (max(int(dims[other]), value) if how == "at_least" else int(factor) if how == "fixed"
                       else value * int(factor))
    return int(axis["m"]), dims
