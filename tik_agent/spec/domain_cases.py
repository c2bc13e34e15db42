"""The cases that judge a spec's declared domain (:mod:`tik_agent.spec.domain`), axis by axis.

Fixed cases (every evaluation, in the cached reference), each small and each
about one axis, so that a failure names what it was about:

* one parity case per layout class some input declares (row-strided,
  transposed, column-strided, offset): every input that declares the class
  takes it, and the upstream gradients take it too;
* *huge* views: for every 2-D input that may be row-strided (or transposed), a
  case whose third row (column) lies 2**31 elements past its first
  (:data:`tik_agent.spec.views.HUGE_STRIDE`), in a 2-byte dtype so that the
  address space it takes stays near 4 GiB; a kernel that computes flat offsets
  in 32-bit integers reads the wrong memory there, or faults;
* one case per allowed mixed-dtype combination and case dtype it differs in;
* the edges: every dimension at the smallest value its range allows, then each
  at its largest with the others at their smallest (values lists: each value);
* every keyword at the ends of its range;
* rows spread over the exponent range (the ``spread`` regime), and, where an
  integer input declares special values, a case in which a quarter of its
  elements hold them.

Every fixed domain case is a parity case whose full batch runs once: each is
about one axis, and the grid's own cases already judge invariance and
determinism; that keeps the whole set to seconds on the CPU.

Cases drawn per evaluation from the evaluation's secret (:func:`drawn_domain_case`):
every dimension near a power of two (2**k - 1, 2**k or 2**k + 1, k drawn within
its range, the dimensions' product within :data:`DRAWN_SIZE_CAP`, and as few rows
as that product leaves room for), keywords drawn within their ranges, and a
declared layout, dtype combination and regime at random.

On the CPU the interpreter's cost bounds the largest sizes: a dimension whose range
says ``cpu = N`` is judged up to N there (a matmul row of K = 65536 took over three
minutes); no CPU timing shape reaches beyond, so a switch there buys no CPU
speedup, and an evaluation on a GPU judges the range's end.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Mapping

from tik_agent.spec.cases import Case, extra_case, fp32_first, unique
from tik_agent.spec.dims import smallest_dims
from tik_agent.spec.fields import BATCH_DIM
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.views import LAYOUTS

log = logging.getLogger(__name__)

DOMAIN_ROWS = 3        # the batch of a domain case: small, and a huge view's third row lies past 2**31
VALUE_ROWS = 7         # the batch of a value case: rows in several bands of the spread regime
DRAWN_ROWS = 5         # the largest batch of a drawn domain case (every row also runs alone)
EDGE_ROWS = 16         # the largest batch of an edge case (see edge_rows)
EDGE_ELEMENTS = 1 << 18  # elements of an edge case's widest batched input
DOMAIN_SEQUENCES = 2   # the batch of a domain case of the sequences layout
DRAWN_SIZE_CAP = 1 << 13  # elements of a drawn case's rows: its dimensions' product times its batch
TWO_BYTE = ("bfloat16", "float16")


def _dtype(spec: KernelSpec) -> str:
    allowed = spec.domain.dtypes
    return next(d for d in fp32_first(spec) if d in allowed) if any(d in allowed for d in spec.parity.dtypes) \
        else allowed[0]


def _case(spec: KernelSpec, dims: Mapping[str, int], dtype: str | None = None, m: int | None = None,
          **axes) -> Case:
    if m is None:  # in the sequences layout a batch entry is a sequence: two (a decode and a chunk)
        m = DOMAIN_ROWS if spec.layout == "rows" else DOMAIN_SEQUENCES
    return Case(m, dict(dims), dtype or _dtype(spec), axes.pop("regime", "normal"), spec.parity.seeds[0],
                origin="domain", once=True, **axes)


def domain_cases(spec: KernelSpec, device: str) -> list[Case]:
    """The fixed cases of the domain's axes (see the module's docstring).  A spec that
    declares no domain has the default one, which is what its grid judges already."""
    if spec.domain is None or not spec.domain.declared:
        return []
    base = smallest_dims(spec)
    cases = layout_cases(spec, base) + huge_cases(spec, base) + mixed_cases(spec, base)
    cases += edge_cases(spec, device) + keyword_cases(spec, base) + value_cases(spec, base)
    return unique(cases)


def layout_cases(spec: KernelSpec, base: Mapping[str, int]) -> list[Case]:
    declared = {layout for i in spec.inputs for layout in spec.domain.layouts_of(i.name)}
    return [_case(spec, base, layout=layout) for layout in LAYOUTS[1:] if layout in declared]


def huge_cases(spec: KernelSpec, base: Mapping[str, int]) -> list[Case]:
    """2**31 elements between rows (or columns) of each 2-D input that may be strided that way."""
    if spec.layout != "rows":
        return []
    dtype = next((d for d in TWO_BYTE if d in spec.domain.dtypes), None)
    if dtype is None:
        log.info("%s: no 2-byte dtype in the domain; the huge views (8 GiB of address space in float32) are not run",
                 spec.name)
        return []
    out = []
    for inp in spec.inputs:
        if len(inp.shape) != 2 or not inp.is_float:
            continue
        for kind, layout, axis in (("huge-rows", "row-strided", 0), ("huge-columns", "transposed", 1)):
            if layout not in spec.domain.layouts_of(inp.name):
                continue
            dims, m = dict(base), DOMAIN_ROWS
            name = inp.shape[axis]
            if name == BATCH_DIM:
                m = DOMAIN_ROWS
            elif isinstance(name, str):
                if DOMAIN_ROWS not in spec.domain.dims[name]:
                    continue
                dims[name] = DOMAIN_ROWS
            else:
                continue
            out.append(_case(spec, dims, dtype, m, layout=f"{kind}:{inp.name}"))
    return out


def mixed_cases(spec: KernelSpec, base: Mapping[str, int]) -> list[Case]:
    """Every allowed combination of dtypes that is not one dtype throughout, once each."""
    out = []
    for extra in spec.domain.mixed:
        for dtype in spec.domain.dtypes:
            differ = {k: v for k, v in extra.items() if v != dtype}
            if differ:
                out.append(_case(spec, base, dtype, dtypes=differ))
    return out


def edge_cases(spec: KernelSpec, device: str) -> list[Case]:
    """Every dimension at its smallest; then each at its largest (or each listed value)."""
    spans = {name: s for name, s in spec.domain.dims.items() if name != BATCH_DIM}
    low = {name: int(s.values[0] if s.values else s.low) for name, s in spans.items()}
    if spec.layout == "sequences":
        from tik_agent.spec.sequences import edge_dims

        return [_case(spec, dims, m=1) for dims in edge_dims(spec, spans, device)]  # one sequence: many tokens
    out = [_case(spec, low)]
    for name, s in spans.items():
        for value in (s.values or (s.judged_high(device),)):
            dims = {**low, name: int(value)}
            out.append(_case(spec, dims, m=edge_rows(spec, dims)))
    return out


def edge_rows(spec: KernelSpec, dims: Mapping[str, int]) -> int:
    """Rows of an edge case: as many as :data:`EDGE_ELEMENTS` allows, at most :data:`EDGE_ROWS`.
    A reduction whose order changes shows in a row's bits only sometimes (RMSNorm on the
    CPU: about one row in five, where the sum of squares' last bits survive the square
    root), so an edge case needs several rows to catch it."""
    width = max((math.prod(dims[d] for d in i.shape if isinstance(d, str) and d != BATCH_DIM)
                 for i in spec.inputs if i.batched), default=1)
    return max(1, min(EDGE_ROWS, EDGE_ELEMENTS // max(1, width)))


def keyword_cases(spec: KernelSpec, base: Mapping[str, int]) -> list[Case]:
    out = []
    for name, s in spec.domain.kwargs.items():
        for value in (s.values or (s.low, s.high)):
            if value != spec.kwargs[name]:
                out.append(_case(spec, base, kwargs={name: value}))
    return out


def value_cases(spec: KernelSpec, base: Mapping[str, int]) -> list[Case]:
    """The spread regime, and special integer values, over several rows."""
    m = VALUE_ROWS if spec.layout == "rows" else None
    out = [_case(spec, base, m=m, regime="spread")]
    if any(v.specials for v in spec.domain.values.values()):
        out.append(_case(spec, base, m=m, special=True))
    return out


def _fields(case: Case) -> dict:
    return {f: getattr(case, f) for f in Case.__dataclass_fields__}


def near_power_of_two(span, rng: random.Random, cap: int, device: str = "cuda") -> int:
    """2**k - 1, 2**k or 2**k + 1 for k drawn so that the value lies in ``span`` (up to what
    ``device`` judges) and below ``cap``."""
    if span.values:
        return int(rng.choice(span.values))
    top = min(int(span.judged_high(device)), cap)
    if top < span.low:
        return int(span.low)
    k = rng.randint(max(0, int(span.low).bit_length() - 1), max(0, top.bit_length() - 1))
    return int(min(max((1 << k) + rng.choice((-1, 0, 1)), span.low), top))


def drawn_keywords(spec: KernelSpec, rng: random.Random) -> dict:
    """Each ranged keyword drawn in its range: log-uniform across decades when the range is positive."""
    out = {}
    for name, s in spec.domain.kwargs.items():
        if s.values:
            value = rng.choice(s.values)
        elif s.low == s.high:
            continue
        elif isinstance(spec.kwargs[name], int):
            value = rng.randint(int(s.low), int(s.high))
        elif s.low > 0 and s.high / s.low > 10:
            value = math.exp(rng.uniform(math.log(s.low), math.log(s.high)))
        else:
            value = rng.uniform(s.low, s.high)
        if value != spec.kwargs[name]:
            out[name] = value
    return out


def drawn_domain_case(spec: KernelSpec, device: str, rng: random.Random) -> Case:
    """One case at dimensions near powers of two with every other axis drawn (per evaluation)."""
    if spec.layout == "sequences":
        from tik_agent.spec.sequences import drawn_dims

        dims = drawn_dims(spec, rng, lambda span, r, cap: near_power_of_two(span, r, cap, device))
    else:
        dims, budget = {}, DRAWN_SIZE_CAP
        for name in rng.sample(sorted(spec.dims), len(spec.dims)):
            dims[name] = near_power_of_two(spec.domain.dims[name], rng, max(1, budget), device)
            budget //= max(1, dims[name])
    layouts = sorted({layout for i in spec.inputs for layout in spec.domain.layouts_of(i.name)})
    dtype = rng.choice(spec.domain.dtypes)
    extra = rng.choice([{}, *spec.domain.mixed])
    overrides = {k: v for k, v in extra.items() if v != dtype}
    layout = rng.choice(layouts)
    regime = rng.choice(spec.parity.regimes + ("spread",))
    if spec.layout == "rows":
        rows = max(1, min(DRAWN_ROWS, DRAWN_SIZE_CAP // max(1, math.prod(dims.values()))))
        case = extra_case(spec, rng.randint(1, rows), dims, dtype, regime, rng.getrandbits(31), origin="drawn")
    else:  # a sequences invariance case costs about 20 launches: parity only
        case = Case(rng.randint(1, DOMAIN_SEQUENCES), dims, dtype, regime, rng.getrandbits(31), origin="drawn",
                    once=True)
    return Case(**{**_fields(case), "layout": "" if layout == "contiguous" else layout, "dtypes": overrides,
                   "kwargs": drawn_keywords(spec, rng)})
