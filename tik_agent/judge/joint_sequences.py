"""Combined sizes in the sequences layout (attention): a kernel variant no axis launches.

The sequences survey's axes (:mod:`tik_agent.judge.config_sequences`) each move one size
a launcher sees, with the others at drawn geometries; a switch on two of them at once
(``TILE = 32 if Q > 20 and P == 16``, or on the context and the heads together) lands on
no axis unless a geometry happens to meet it.  So the survey also calls the launcher at
:data:`POINTS` points drawn over every size at once (:func:`draw`), each the uniform full
launch of its sizes, within what the device judges.

Each kernel variant (the launch's structure with every constexpr and option: one compiled
kernel) that such a point launches and no axis launched anywhere is a combination no
axis showed.  It is judged once, at the point of least cost that launches it, shrunk one
size after another (halved while the variant holds: the sequences, the context, the
chunk, the heads), at most :data:`BUDGET` of them; more is a refusal, as is a launcher
that raises inside the domain, or a record that lacks a point.

What it does not see: a switch that changes only numbers (a grid entry, a run-time
integer) at combined sizes, since nothing predicts the numbers of a point off the axes
here (the rows layout's :mod:`tik_agent.judge.joint_analysis` does that), and a region no
drawn point lands in.
"""

from __future__ import annotations

import json
import random
from typing import Callable, Mapping, Sequence

from tik_agent.judge.joint_points import JointPoint
from tik_agent.judge.survey_axes import axis_key, log_uniform
from tik_agent.judge.survey_record import RAISED, SKIPPED, is_variant, structure_labels
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.sequences import PAD, SPARE

POINTS = 4096   # points drawn over every size at once
BUDGET = 6     # variants no axis launched that one evaluation judges; more is a refusal
# The largest sizes a point draws on the CPU, where a judged case costs per token, head
# and KV tile (one of 32 query heads over 76 tokens in a context of 103 took 22 s).
CPU_MOST = {"M": 4, "Hq": 32, "L": 128, "Q": 64}
NOVEL = "a kernel variant no axis launches (combined sizes)"

PointLookup = Callable[[int, dict], "tuple | None"]


def draw(spec: KernelSpec, device: str, rng: random.Random, batch_high: int) -> list[dict]:
    """:data:`POINTS` uniform launches drawn log-uniform over every range of the domain (the
    head counts at an allowed ratio), within what ``device`` judges."""
    domain, names = spec.domain, spec.sequences
    over = {o: (n, allowed) for n, (o, allowed) in domain.ratios.items()}
    out, seen = [], set()
    for _ in range(POINTS):
        dims: dict[str, int] = {}
        for name, span in sorted(domain.dims.items()):
            if span.values:
                dims[name] = int(rng.choice(list(span.values)))
            elif name not in domain.ratios:
                high = int(span.judged_high(device))
                if device == "cpu":
                    high = min(high, CPU_MOST.get(name, high))
                dims[name] = log_uniform(rng, int(span.low), max(int(span.low), high))
        for divisor, (name, allowed) in over.items():
            most = int(domain.dims[name].judged_high(device))
            most = min(most, CPU_MOST.get(name, most)) if device == "cpu" else most
            dims[divisor] = max(1, min(dims[divisor], most // min(allowed)))
            ratios = [r for r in sorted(allowed) if r * dims[divisor] <= most] or [min(allowed)]
            dims[name] = rng.choice(ratios) * dims[divisor]
        m = dims.pop("M", None) or log_uniform(rng, 1, batch_high)
        m = min(m, batch_high)
        dims[names.chunk] = min(dims[names.chunk], dims[names.context])
        dims.update({SPARE: rng.randint(0, 64), PAD: rng.randint(0, 16)})
        key = (m, tuple(sorted(dims.items())))
        if key not in seen:
            seen.add(key)
            out.append({"m": m, "dims": dims})
    return out


def shape_of(spec: KernelSpec) -> dict:
    """What the analysis needs of the spec (it travels in the survey's request): the chunk's
    and the context's dims, and each head count over its divisor."""
    return {"chunk": spec.sequences.chunk, "context": spec.sequences.context,
            "ratios": {heads: divisor for heads, (divisor, _) in spec.domain.ratios.items()}}


def variant(launch) -> tuple | None:
    """The kernel variant of a recorded launch; None for one skipped."""
    if launch is None or launch[0] == SKIPPED:
        return None
    labels = structure_labels(launch[0])
    return launch[0], tuple(n for label, n in zip(labels, launch[1]) if is_variant(label))


def judge(shape: Mapping, axes: list[dict], points: Sequence[dict], at_point: PointLookup,
          along: Mapping[str, Callable]) -> tuple[list[JointPoint], str | None]:
    """The points to judge (one per variant no axis launched, shrunk), or a refusal.
    ``at_point(m, dims)`` and ``along[key](size)`` give a launch or None: in the worker they
    survey the sizes asked for, in the parent they read the worker's record."""
    try:
        return _judge(shape, axes, points, at_point, along)
    except LookupError as exc:
        return [], f"the survey did not report {exc} (a point of combined sizes it had to place)"
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:
        return [], f"the survey's record of combined sizes cannot be read ({type(exc).__name__})"


def _judge(shape, axes, points, at_point, along) -> tuple[list[JointPoint], str | None]:
    known = set()
    for axis in axes:
        get = along[axis_key(axis)]
        known.update(variant(get(v)) for v in axis["values"])

    def launch(m: int, dims: dict):
        got = at_point(m, dict(dims))
        if got is None:
            raise LookupError(f"m = {m}, {dims}")
        if got[0].startswith(RAISED):
            raise _Raised(f"the launcher raised {json.loads(got[0])[1]} at {m} sequences, {_where(dims)}, "
                          "inside the declared domain")
        return got

    try:
        novel: dict[tuple, dict] = {}
        for point in points:
            v = variant(launch(point["m"], point["dims"]))
            if v is not None and v not in known:
                best = novel.get(v)
                if best is None or _cost(shape, point) < _cost(shape, best):
                    novel[v] = point
        if len(novel) > BUDGET:
            shown = "; ".join(_where(p["dims"]) for p in list(novel.values())[:3])
            return [], (f"{len(novel)} kernel variants that no axis launches at combined sizes ({shown}, ...): "
                        f"more than the {BUDGET} an evaluation judges")
        return [JointPoint(*_shrunk(shape, v, p, launch), f"{NOVEL}: {_where(p['dims'])}")
                for v, p in sorted(novel.items(), key=lambda kv: _cost(shape, kv[1]))], None
    except _Raised as exc:
        return [], str(exc)


class _Raised(Exception):
    pass


def _shrunk(shape: Mapping, v: tuple, point: dict, launch) -> tuple[int, dict]:
    """The point with each size halved, one after another, while it launches variant ``v``."""
    chunk, context, ratios = shape["chunk"], shape["context"], shape["ratios"]
    m, dims = int(point["m"]), dict(point["dims"])
    for name in ("M", context, chunk, "heads", SPARE, PAD):
        while True:
            m2, dims2 = m, dict(dims)
            if name == "M":
                m2 = m // 2
            elif name == "heads":
                for heads, divisor in ratios.items():
                    dims2[divisor] = dims[divisor] // 2
                    dims2[heads] = dims[heads] // dims[divisor] * dims2[divisor]
            else:
                dims2[name] = dims[name] // 2
            dims2[chunk] = min(dims2[chunk], dims2[context])
            floors = [m2, dims2[context], dims2[chunk], *(dims2[d] for d in ratios.values())]
            if (m2, dims2) == (m, dims) or min(floors) < 1 or variant(launch(m2, dims2)) != v:
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
