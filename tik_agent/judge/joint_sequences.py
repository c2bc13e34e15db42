"""Combined sizes in the sequences layout (attention): launches no axis showed.

The sequences survey's axes (:mod:`tik_agent.judge.config_sequences`) each move one size
a launcher sees, with the others at drawn geometries; a switch on two of them at once
(``TILE = 32 if Q > 20 and P == 16``, or on the context and the heads together) lands on
no axis unless a geometry happens to meet it.  So the survey also calls the launcher at
:data:`POINTS` points drawn over every size at once (:func:`draw`: up to what the device
judges, half the sizes powers of two), each the uniform full launch of its sizes.

A point's *key* is its kernel variant (the launch's structure with every constexpr and
option: one compiled kernel) with each of its *flags* whose value no axis showed: a flag
is a run-time integer that takes at most :data:`FLAG_VALUES` values over all the axes'
points (``bump = int(page == 16 and Q > 20)`` read by the kernel).  A key no axis showed
(a new variant, or a flag's new value) is judged once, at its
cheapest point, shrunk (halved one size after another while the key holds, the context
and the chunk no lower than :data:`FLOOR`); at most :data:`BUDGET` keys.  Every kernel
variant the axes and the points launch is judged once more at its *far context*: one
token of one sequence over the longest context the device judges, at the fewest heads
that launch it (a variant whose tile differs only past 160 positions), at most
:data:`FAR`.  More, a launcher that raises inside the domain, or a record that lacks a
point, is a refusal.

What it does not see: flags whose values each show on some axis but not together
(``bump * sel``), a switch on numbers that are not flags at combined sizes (nothing
predicts a point's numbers off the axes here, as the rows layout's
:mod:`tik_agent.judge.joint_analysis` does), and a region no drawn point lands in.
"""

from __future__ import annotations

import json
import random
from typing import Callable, Mapping, Sequence

from tik_agent.judge.joint_points import JointPoint
from tik_agent.judge.survey_axes import axis_key, log_uniform, point_of
from tik_agent.judge.survey_record import RAISED, SKIPPED, is_variant, structure_labels
from tik_agent.judge.survey_record import variant_of as variant
from tik_agent.spec.fields import BATCH_DIM
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.sequences import PAD, SPARE

POINTS = 4096  # points drawn over every size at once
BUDGET = 6     # keys no axis showed that one evaluation judges; more is a refusal
FAR = 12       # kernel variants judged at the far context; more is a refusal
# A judged point is shrunk to keep its case cheap, its context and chunk no further than
# this: a tile twice as wide gives the seed's bits over 16 positions or fewer (a red team
# shrank one to a single token).
FLOOR = 64
FLAG_VALUES = 8  # values over every axis's points at most, for a run-time integer to be a flag
# A share of the points takes the query over KV heads of a model people serve (Llama 3 8B
# and 70B, Llama 2 7B, Mistral, ...) and an engine's page size.
SERVED, SERVED_PAGES = 0.25, (8, 16, 32)
COMMON_HEADS = [(32, 8), (64, 8), (32, 32), (16, 16), (32, 4), (8, 1), (16, 4), (128, 8), (64, 4), (40, 40),
                (16, 2), (48, 8), (24, 8), (12, 4), (28, 4)]
NOVEL = "a launch no axis showed (combined sizes)"
FAR_CONTEXT = "a kernel variant at the longest context judged"

PointLookup = Callable[[int, dict], "tuple | None"]


def _size(rng: random.Random, low: int, high: int) -> int:
    """Half the time log-uniform, half a power of two (the sizes real models use)."""
    if high <= low:
        return low
    if rng.random() < 0.5:
        return log_uniform(rng, low, high)
    return rng.choice([1 << k for k in range(high.bit_length()) if low <= 1 << k <= high] or [low])


def draw(spec: KernelSpec, device: str, rng: random.Random, batch_high: int) -> list[dict]:
    """:data:`POINTS` uniform launches drawn over every range of the domain up to what
    ``device`` judges (the head counts at an allowed ratio)."""
    domain, names = spec.domain, spec.sequences
    over = {o: (n, allowed) for n, (o, allowed) in domain.ratios.items()}
    out, seen = [], set()
    for _ in range(POINTS):
        dims: dict[str, int] = {}
        served = rng.random() < SERVED  # the heads and page of a model people serve
        for name, span in sorted(domain.dims.items()):
            if span.values:
                dims[name] = int(rng.choice(list(span.values)))
            elif name not in domain.ratios:
                high = batch_high if name == BATCH_DIM else int(span.judged_high(device))
                dims[name] = _size(rng, int(span.low), max(int(span.low), high))
        for divisor, (name, allowed) in over.items():
            most = int(domain.dims[name].judged_high(device))
            common = [(q, kv) for q, kv in COMMON_HEADS if q <= most and q % kv == 0 and q // kv in allowed
                      and domain.dims[divisor].low <= kv <= domain.dims[divisor].judged_high(device)]
            if common and served:
                dims[name], dims[divisor] = rng.choice(common)
                continue
            dims[divisor] = max(1, min(dims[divisor], most // min(allowed)))
            ratios = [r for r in sorted(allowed) if r * dims[divisor] <= most] or [min(allowed)]
            dims[name] = rng.choice(ratios) * dims[divisor]
        m = dims.pop(BATCH_DIM)
        pages = [v for v in SERVED_PAGES if domain.dims[names.page].low <= v <= domain.dims[names.page].judged_high(device)]
        if served and pages:
            dims[names.page] = rng.choice(pages)
        dims[names.chunk] = min(dims[names.chunk], dims[names.context])
        dims.update({SPARE: rng.randint(0, 64), PAD: rng.randint(0, 16)})
        key = (m, tuple(sorted(dims.items())))
        if key not in seen:
            seen.add(key)
            out.append({"m": m, "dims": dims})
    return out


def shape_of(spec: KernelSpec, device: str) -> dict:
    """What the analysis needs of the spec (it travels in the survey's request): the chunk's
    and the context's dims, each head count over its divisor, the longest context judged."""
    return {"chunk": spec.sequences.chunk, "context": spec.sequences.context,
            "ratios": {heads: divisor for heads, (divisor, _) in spec.domain.ratios.items()},
            "longest": int(spec.domain.dims[spec.sequences.context].judged_high(device))}


def judge(shape: Mapping, axes: list[dict], points: Sequence[dict], at_point: PointLookup,
          along: Mapping[str, Callable]) -> tuple[list[JointPoint], str | None]:
    """The points to judge, or a refusal.  ``at_point(m, dims)`` and ``along[key](size)``
    give a launch or None: in the worker they survey the sizes asked for, in the parent
    they read the worker's record."""
    try:
        return _Analysis(shape, at_point).run(axes, points, along)
    except LookupError as exc:
        return [], f"the survey did not report {exc} (a point of combined sizes it had to place)"
    except _Raised as exc:
        return [], str(exc)
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:
        return [], f"the survey's record of combined sizes cannot be read ({type(exc).__name__})"


class _Raised(Exception):
    pass


class _Analysis:
    def __init__(self, shape: Mapping, at_point: PointLookup):
        self.shape, self.at_point = shape, at_point
        self.flags: dict[str, list[int]] = {}  # a structure's flag positions
        self.values: dict[str, dict[int, set]] = {}  # each run-time integer's values on the axes

    def launch(self, m: int, dims: Mapping):
        got = self.at_point(m, dict(dims))
        if got is None:
            raise LookupError(f"m = {m}, {_where(dims)}")
        if got[0].startswith(RAISED):
            raise _Raised(f"the launcher raised {json.loads(got[0])[1]} at {m} sequences, {_where(dims)}, "
                          "inside the declared domain")
        return got

    def key(self, launch) -> tuple | None:
        """The launch's variant, and each flag whose value no axis's point showed."""
        v = variant(launch)
        if v is None:
            return None
        seen = self.values.get(launch[0], {})
        return v, tuple((i, launch[1][i]) for i in self.flags.get(launch[0], ()) if launch[1][i] not in seen[i])

    def run(self, axes: list[dict], points: Sequence[dict], along: Mapping) -> tuple[list[JointPoint], str | None]:
        shown = [launch for axis in axes for launch in (along[axis_key(axis)](v) for v in axis["values"])
                 if launch is not None and launch[0] != SKIPPED and not launch[0].startswith(RAISED)]
        values: dict[str, dict[int, set]] = {}
        for structure, numbers in shown:
            labels = structure_labels(structure)
            for i, (label, n) in enumerate(zip(labels, numbers)):
                if label != "grid" and not is_variant(label):
                    values.setdefault(structure, {}).setdefault(i, set()).add(n)
        self.values = values
        self.flags = {s: [i for i, seen in sorted(at.items()) if len(seen) <= FLAG_VALUES] for s, at in values.items()}
        known = {(variant(launch), ()) for launch in shown}
        novel: dict[tuple, dict] = {}
        cheapest: dict[tuple, dict] = {}  # each variant's cheapest point: its far context's heads
        for axis in axes:
            for v in axis["values"]:
                launch, (m, dims) = along[axis_key(axis)](v), point_of(axis, v)
                k = variant(launch) if launch is not None and not launch[0].startswith(RAISED) else None
                if k is not None and (k not in cheapest or _cost(self.shape, {"m": m, "dims": dims}) <
                                      _cost(self.shape, cheapest[k])):
                    cheapest[k] = {"m": m, "dims": dims}
        for point in points:
            launch = self.launch(point["m"], point["dims"])
            k = self.key(launch)
            if k is None:
                continue
            if k not in known and (k not in novel or self.rank(point) < self.rank(novel[k])):
                novel[k] = point
            if k[0] not in cheapest or _cost(self.shape, point) < _cost(self.shape, cheapest[k[0]]):
                cheapest[k[0]] = point
        if len(novel) > BUDGET:
            where = "; ".join(_where(p["dims"]) for p in list(novel.values())[:3])
            return [], (f"{len(novel)} launches that no axis shows at combined sizes ({where}, ...): "
                        f"more than the {BUDGET} an evaluation judges")
        out = [JointPoint(*self.shrunk(k, p), f"{NOVEL}: {_where(p['dims'])}")
               for k, p in sorted(novel.items(), key=lambda kv: self.rank(kv[1]))]
        far = self.far(cheapest)
        if isinstance(far, str):
            return [], far
        return out + far, None

    def far(self, cheapest: Mapping[tuple, dict]) -> list[JointPoint] | str:
        """Each variant at one token of one sequence over the longest context judged, at the
        heads of its cheapest point, where that still launches it."""
        if len(cheapest) > FAR:
            return (f"{len(cheapest)} kernel variants at the survey's points: more than the {FAR} an evaluation "
                    "judges at the longest context")
        context, chunk, out = self.shape["context"], self.shape["chunk"], []
        for v, point in sorted(cheapest.items(), key=lambda kv: _cost(self.shape, kv[1])):
            dims = {**point["dims"], context: int(self.shape["longest"]), chunk: 1, SPARE: 0, PAD: 0}
            # one sequence, else as many as the point had (a variant for five sequences or more)
            m = next((m for m in dict.fromkeys((1, int(point["m"]))) if variant(self.launch(m, dims)) == v), None)
            if m is not None:
                out.append(JointPoint(m, dims, f"{FAR_CONTEXT}: {_where(dims)}"))
        return out

    def rank(self, point: Mapping) -> tuple:
        """The point to judge a key at: the cheapest of those whose context reaches FLOOR
        (a tile's width shows past 16 positions), else the cheapest."""
        return int(point["dims"][self.shape["context"]]) < FLOOR, _cost(self.shape, point)

    def shrunk(self, k: tuple, point: dict) -> tuple[int, dict]:
        """The point with each size halved, one after another, while it launches key ``k``
        (the context and the chunk no lower than FLOOR, or than they were)."""
        chunk, context, ratios = self.shape["chunk"], self.shape["context"], self.shape["ratios"]
        m, dims = int(point["m"]), dict(point["dims"])
        floor = {context: min(FLOOR, dims[context]), chunk: min(FLOOR, dims[chunk])}
        for name in (BATCH_DIM, context, chunk, "heads", SPARE, PAD):
            while True:
                m2, dims2 = m, dict(dims)
                if name == BATCH_DIM:
                    m2 = m // 2
                elif name == "heads":
                    for heads, divisor in ratios.items():
                        dims2[divisor] = dims[divisor] // 2
                        dims2[heads] = dims[heads] // dims[divisor] * dims2[divisor]
                else:
                    dims2[name] = max(dims[name] // 2, floor.get(name, 0))
                dims2[chunk] = min(dims2[chunk], dims2[context])
                floors = [m2, dims2[context], dims2[chunk], *(dims2[d] for d in ratios.values())]
                if (m2, dims2) == (m, dims) or min(floors) < 1 or self.key(self.launch(m2, dims2)) != k:
                    break
                m, dims = m2, dims2
        return m, dims


def _cost(shape: Mapping, point: Mapping) -> int:
    """What a judged case at the point costs under the interpreter, roughly: its tokens times
    query heads times KV positions."""
    dims = point["dims"]
    heads = max([int(dims[h]) for h in shape["ratios"]] or [1])
    return int(point["m"]) * int(dims[shape["chunk"]]) * heads * int(dims[shape["context"]])


def _where(dims: Mapping) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(dims.items()))
