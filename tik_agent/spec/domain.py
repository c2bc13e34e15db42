"""``[domain]``: what the kernel accepts, stated for every input, dimension and keyword.

The parity grid judges every axis of it (:mod:`tik_agent.spec.domain_cases`) and
the exported wheel refuses a call outside it (``NotCertifiedError``).  The table::

    [domain]
    dtypes = ["float32", "bfloat16"]             # the case dtypes: every "float" input
                                                 # and output takes one of them (a
                                                 # subset of parity.dtypes, all by default)
    mixed = [{ weight = "float32" }]             # inputs that may take another dtype
                                                 # under every case dtype (mixed precision)
    excludes = ["int32 targets"]                 # what is left out, in words

    [domain.dims]                                # every dimension, the batch M included:
    M = { min = 1, max = 1048576 }               # a range, or
    D = { values = [64, 128] }                   # the values it may take;
    K = { min = 1, max = 65536, cpu = 1024 }     # cpu: the largest a CPU evaluation can
                                                 # afford to judge (the interpreter's cost)

    [domain.ratios]                              # a dimension that is another one times
    Hq = { over = "Hkv", values = [1, 2, 4] }    # one of these (grouped-query heads)

    [domain.layouts]                             # per input (absent: contiguous only), from
    x = ["contiguous", "row-strided", "offset"]  # tik_agent.spec.views.LAYOUTS

    [domain.kwargs]                              # per keyword (absent: its spec value only)
    eps = { min = 1e-12, max = 1e-2 }

    [domain.values.targets]                      # integer inputs: [min, below) and
    min = 0                                      # special values, with the seed's
    below = "V"                                  # result for each, in words
    special = [{ value = -100, result = "NaN in its row" }]

A spec without ``[domain]`` gets :func:`default_domain`: what the parity grid
judged before domains existed, and the certificate says so.  In the sequences
layout ``M`` counts sequences; the derived ``T`` and ``BLOCKS`` take no range.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tik_agent.spec.fields import BATCH_DIM, CASE_DTYPE, FLOAT_DTYPES, INT_DTYPES, FieldReader, field_error
from tik_agent.spec.views import LAYOUTS, TWO_DIMENSIONAL

DOMAIN_FIELDS = {"dtypes", "mixed", "excludes", "dims", "ratios", "layouts", "kwargs", "values"}


@dataclass(frozen=True)
class Span:
    """A closed range [low, high], or (``values``) the only values allowed."""

    low: float
    high: float
    values: tuple = ()
    cpu: int | None = None  # a dimension: the largest value a CPU evaluation judges, when below high

    def __contains__(self, v) -> bool:
        return v in self.values if self.values else self.low <= v <= self.high

    def judged_high(self, device: str) -> float:
        """The largest value an evaluation on ``device`` judges."""
        return min(self.high, self.cpu) if device == "cpu" and self.cpu is not None else self.high

    def to_dict(self) -> dict:
        out = {"values": list(self.values)} if self.values else {"min": self.low, "max": self.high}
        return {**out, "cpu": self.cpu} if self.cpu is not None else out


@dataclass(frozen=True)
class Special:
    value: int
    result: str  # the seed's defined result, in words


@dataclass(frozen=True)
class IntValues:
    """An integer input's ordinary values [low, below) (``below`` may name a dimension), and its special ones."""

    low: int
    below: int | str
    specials: tuple[Special, ...] = ()

    def to_dict(self) -> dict:
        return {"min": self.low, "below": self.below,
                "special": [{"value": s.value, "result": s.result} for s in self.specials]}


@dataclass(frozen=True)
class Domain:
    dims: Mapping[str, Span]
    dtypes: tuple[str, ...]
    mixed: tuple[Mapping[str, str], ...]
    layouts: Mapping[str, tuple[str, ...]]
    kwargs: Mapping[str, Span]
    values: Mapping[str, IntValues]
    excludes: tuple[str, ...] = ()
    ratios: Mapping[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # dim -> (over, allowed ratios)
    declared: bool = True  # False: the default of a spec without [domain]
    float_inputs: tuple[str, ...] = field(default=(), compare=False)  # inputs whose dtype is the case's

    def fits(self, dims: Mapping[str, int]) -> bool:
        """Whether sizes given for some dimensions lie in their ranges and keep the ratios."""
        if any(name in self.dims and v not in self.dims[name] for name, v in dims.items()):
            return False
        for name, (over, allowed) in self.ratios.items():
            if name in dims and over in dims and (dims[name] % dims[over] or dims[name] // dims[over] not in allowed):
                return False
        return True

    def layouts_of(self, name: str) -> tuple[str, ...]:
        return self.layouts.get(name, ("contiguous",))

    def combos(self) -> list[dict[str, str]]:
        """Every allowed assignment of dtypes to the case-dtype inputs, uniform ones first."""
        out: list[dict[str, str]] = []
        for extra in ({},) + tuple(self.mixed):
            for dtype in self.dtypes:
                combo = {name: extra.get(name, dtype) for name in self.float_inputs}
                if combo not in out:
                    out.append(combo)
        return out

    def to_dict(self) -> dict:
        """The JSON form the certificate carries and the wheel checks calls against."""
        return {"declared": self.declared, "dims": {k: v.to_dict() for k, v in self.dims.items()},
                "dtypes": list(self.dtypes), "mixed": [dict(m) for m in self.mixed], "combos": self.combos(),
                "layouts": {k: list(v) for k, v in self.layouts.items()},
                "kwargs": {k: v.to_dict() for k, v in self.kwargs.items()},
                "values": {k: v.to_dict() for k, v in self.values.items()}, "excludes": list(self.excludes),
                "ratios": {k: {"over": o, "values": list(v)} for k, (o, v) in self.ratios.items()}}


def _number(path: Path, where: str, value: Any, integer: bool) -> float:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        raise field_error(path, where, "expected an integer" if integer else "expected a finite number", value)
    return value


def _span(path: Path, where: str, raw: Any, integer: bool, cpu: bool = False) -> Span:
    if not isinstance(raw, dict):
        raise field_error(path, where, "expected a table { min = ..., max = ... } or { values = [...] }", raw)
    r = FieldReader(path, raw, where)
    r.unknown({"min", "max", "values", "cpu"} if cpu else {"min", "max", "values"})
    cap = r.get("cpu", int, None)
    if cap is not None and ("values" in raw or cap < r.get("min", (int, float), 1)):
        raise field_error(path, f"{where}.cpu", "a range's cpu bound lies between its min and max", cap)
    if "values" in raw:
        if "min" in raw or "max" in raw:
            raise field_error(path, where, "give either min and max, or values", raw)
        values = r.get("values", list)
        if not values:
            raise field_error(path, f"{where}.values", "expected a non-empty list", values)
        values = tuple(_number(path, f"{where}.values[{i}]", v, integer) for i, v in enumerate(values))
        return Span(min(values), max(values), tuple(sorted(set(values))))
    low = _number(path, f"{where}.min", r.get("min", (int, float)), integer)
    high = _number(path, f"{where}.max", r.get("max", (int, float)), integer)
    if low > high:
        raise field_error(path, where, "min is above max", raw)
    return Span(low, high, (), cap if cap is not None and cap < high else None)


def parse_domain(path: Path, table: Mapping[str, Any] | None, spec_parts: Mapping[str, Any]) -> Domain:
    """The declared domain, validated against the spec's inputs, dims, grid, kwargs and
    workload (``spec_parts``); without a table, :func:`default_domain`."""
    if table is None:
        return default_domain(spec_parts)
    inputs, parity = spec_parts["inputs"], spec_parts["parity"]
    r = FieldReader(path, table, "domain")
    r.unknown(DOMAIN_FIELDS)
    dims = _parse_dims(path, r.table_of("dims"), spec_parts)
    dtypes = tuple(r.get("dtypes", list, list(parity.dtypes)))
    for i, d in enumerate(dtypes):
        if d not in parity.dtypes:
            raise field_error(path, f"domain.dtypes[{i}]", f"not a parity dtype; the grid judges {list(parity.dtypes)}", d)
    if not dtypes:
        raise field_error(path, "domain.dtypes", "expected at least one dtype")
    floats = tuple(i.name for i in inputs if i.dtype == CASE_DTYPE)
    mixed = []
    for i, raw in enumerate(r.get("mixed", list, [])):
        where = f"domain.mixed[{i}]"
        if not isinstance(raw, dict) or not raw:
            raise field_error(path, where, "expected a table of input = dtype", raw)
        for name, dtype in raw.items():
            if name not in floats:
                raise field_error(path, f"{where}.{name}", f"not an input of the case dtype; those are {list(floats)}")
            if dtype not in FLOAT_DTYPES:
                raise field_error(path, f"{where}.{name}", f"expected one of {list(FLOAT_DTYPES)}", dtype)
        mixed.append(dict(raw))
    if mixed and spec_parts["layout"] != "rows":
        raise field_error(path, "domain.mixed", "the sequences layout's cases take one dtype throughout")
    excludes = r.get("excludes", list, [])
    for i, text in enumerate(excludes):
        if not isinstance(text, str) or not text.strip():
            raise field_error(path, f"domain.excludes[{i}]", "expected a sentence", text)
    return Domain(dims, dtypes, tuple(mixed), _parse_layouts(path, r.table_of("layouts", {}), inputs),
                  _parse_kwargs(path, r.table_of("kwargs", {}), spec_parts["kwargs"]),
                  _parse_values(path, r.table_of("values", {}), inputs, dims), tuple(excludes),
                  _parse_ratios(path, r.table_of("ratios", {}), dims, spec_parts), True, floats)


def _parse_dims(path: Path, table: Mapping[str, Any], parts: Mapping[str, Any]) -> dict[str, Span]:
    names = [BATCH_DIM, *parts["dims"]]
    out = {}
    for name in names:
        if name not in table:
            raise field_error(path, f"domain.dims.{name}", "missing: every dimension (the batch M included) needs a range")
        span = _span(path, f"domain.dims.{name}", table[name], integer=True, cpu=True)
        if span.low < 1:
            raise field_error(path, f"domain.dims.{name}.min", "expected an integer >= 1", span.low)
        out[name] = span
    for name in table:
        if name not in names:
            raise field_error(path, f"domain.dims.{name}", f"unknown dimension; the dimensions are {names}")
    for name, value in _judged_sizes(parts):
        if value not in out[name]:
            raise field_error(path, f"domain.dims.{name}", f"the grid or a workload cell uses {name} = {value}, outside it")
    return out


def _judged_sizes(parts: Mapping[str, Any]):
    """Every (dim, size) the spec's own grid and workload cells use."""
    for size in parts["parity"].batch_sizes:
        yield BATCH_DIM, size
    for name, values in parts["dims"].items():
        for v in values:
            yield name, v
    for cell in parts["workload"]:
        yield BATCH_DIM, cell.m
        yield from cell.dims.items()


def _parse_ratios(path: Path, table: Mapping[str, Any], dims: Mapping[str, Span], parts) -> dict:
    out = {}
    for name, raw in table.items():
        where = f"domain.ratios.{name}"
        r = FieldReader(path, raw if isinstance(raw, dict) else {}, where)
        r.unknown({"over", "values"})
        over = r.get("over", str)
        if name not in dims or over not in dims or over == name:
            raise field_error(path, where, f"expected two dimensions among {sorted(dims)}", [name, over])
        values = r.get("values", list)
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise field_error(path, f"{where}.values", "expected a non-empty list of integers >= 1", values)
        out[name] = (over, tuple(sorted(set(values))))
    check = Domain(dims, (), (), {}, {}, {}, (), out)
    sizes = [dict(zip(parts["dims"], combo)) for combo in itertools.product(*parts["dims"].values())]
    sizes += [dict(c.dims) for c in parts["workload"]]
    for given in sizes:
        if not check.fits(given):
            raise field_error(path, "domain.ratios", f"the grid or a workload cell uses {given}, outside them")
    return out


def _parse_layouts(path: Path, table: Mapping[str, Any], inputs) -> dict[str, tuple[str, ...]]:
    by_name = {i.name: i for i in inputs}
    out = {}
    for name, raw in table.items():
        where = f"domain.layouts.{name}"
        if name not in by_name:
            raise field_error(path, where, f"no such input; inputs are {sorted(by_name)}")
        if not isinstance(raw, list) or "contiguous" not in raw:
            raise field_error(path, where, f"expected a list from {list(LAYOUTS)} that includes \"contiguous\"", raw)
        for i, layout in enumerate(raw):
            if layout not in LAYOUTS:
                raise field_error(path, f"{where}[{i}]", f"unknown layout; expected one of {list(LAYOUTS)}", layout)
            if layout in TWO_DIMENSIONAL and len(by_name[name].shape) < 2 and by_name[name].role is None:
                raise field_error(path, f"{where}[{i}]", f"{layout} needs at least two dimensions", layout)
        out[name] = tuple(dict.fromkeys(raw))
    return out


def _fixed(value) -> Span:
    """A keyword the domain gives no range: its spec value only."""
    return Span(value, value, (value,)) if isinstance(value, (bool, str)) else Span(value, value)


def _parse_kwargs(path: Path, table: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Span]:
    out = {}
    for name, value in kwargs.items():
        if name not in table:
            out[name] = _fixed(value)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise field_error(path, f"domain.kwargs.{name}", "only a numeric keyword takes a range")
        span = _span(path, f"domain.kwargs.{name}", table[name], integer=isinstance(value, int))
        if value not in span:
            raise field_error(path, f"domain.kwargs.{name}", f"the spec's own value {value!r} is outside it")
        out[name] = span
    for name in table:
        if name not in kwargs:
            raise field_error(path, f"domain.kwargs.{name}", f"no such keyword; the spec's are {sorted(kwargs)}")
    return out


def _parse_values(path: Path, table: Mapping[str, Any], inputs, dims: Mapping[str, Span]) -> dict[str, IntValues]:
    out = {}
    ints = {i.name: i for i in inputs if i.dtype in INT_DTYPES and i.role is None}
    for name, inp in ints.items():
        if name not in table:
            out[name] = IntValues(0, inp.high)
            continue
        where = f"domain.values.{name}"
        if not isinstance(table[name], dict):
            raise field_error(path, where, "expected a table with min, below and special", table[name])
        r = FieldReader(path, table[name], where)
        r.unknown({"min", "below", "special"})
        low = int(_number(path, f"{where}.min", r.get("min", int, 0), integer=True))
        below = r.get("below", (int, str), inp.high)
        if isinstance(below, str) and below not in dims:
            raise field_error(path, f"{where}.below", "unknown dimension", below)
        specials = []
        for i, raw in enumerate(r.get("special", list, [])):
            s = FieldReader(path, raw if isinstance(raw, dict) else {}, f"{where}.special[{i}]")
            s.unknown({"value", "result"})
            value = int(_number(path, f"{where}.special[{i}].value", s.get("value", int), integer=True))
            if value >= low:
                raise field_error(path, f"{where}.special[{i}].value", "a special value lies below min", value)
            specials.append(Special(value, s.get("result", str)))
        out[name] = IntValues(low, below, tuple(specials))
    for name in table:
        if name not in ints:
            raise field_error(path, f"domain.values.{name}", f"not an integer input; those are {sorted(ints)}")
    return out


# Batch sizes every CPU evaluation's above-grid cases reach (spec.cases.CPU_ABOVE_GRID's largest).
_DEFAULT_BATCH_FLOOR = 257


def default_domain(parts: Mapping[str, Any]) -> Domain:
    """What the parity grid judges of a spec without ``[domain]``: its dtypes, one at a
    time; each dim's range between the smallest and largest size its grid and workload
    use (M up to what the above-grid cases reach, 4L+1 for the largest batch L); batched
    inputs contiguous or row-strided (the padded sub-batches), others contiguous; the
    keywords at their spec values; integer inputs in [0, high)."""
    inputs, parity, dims = parts["inputs"], parts["parity"], parts["dims"]
    sizes: dict[str, list[int]] = {}
    for name, value in _judged_sizes(parts):
        sizes.setdefault(name, []).append(value)
    top = max(sizes[BATCH_DIM])
    spans = {BATCH_DIM: Span(1, max(4 * top + 1, _DEFAULT_BATCH_FLOOR))}
    spans.update({name: Span(min(sizes[name]), max(sizes[name])) for name in dims})
    layouts = {i.name: ("contiguous", "row-strided") for i in inputs
               if len(i.shape) >= 2 and i.shape[0] == BATCH_DIM}
    kwargs = {k: _fixed(v) for k, v in parts["kwargs"].items()}
    values = {i.name: IntValues(0, i.high) for i in inputs if i.dtype in INT_DTYPES and i.role is None}
    floats = tuple(i.name for i in inputs if i.dtype == CASE_DTYPE)
    return Domain(spans, tuple(parity.dtypes), (), layouts, kwargs, values, (), {}, False, floats)
