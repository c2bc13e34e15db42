"""The ``[[inputs]]`` tables of ``spec.toml``: the entry's positional arguments, in order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tik_agent.spec.fields import (
    BATCH_DIM, CASE_DTYPE, FLOAT_DTYPES, INT_DTYPES, FieldReader, check_dtype, check_identifier, check_shape, field_error,
    resolve_shape,
)
from tik_agent.spec.layouts import check_role, derived_dims


@dataclass(frozen=True)
class InputSpec:
    """One positional argument of the entry."""

    name: str
    shape: tuple[str | int, ...]
    dtype: str
    high: str | int | None = None
    role: str | None = None  # sequences layout only

    @property
    def batched(self) -> bool:
        return bool(self.shape) and self.shape[0] == BATCH_DIM

    @property
    def is_float(self) -> bool:
        return self.dtype == CASE_DTYPE or self.dtype in FLOAT_DTYPES + ("float64",)

    def resolve_dtype(self, case_dtype: str) -> str:
        return case_dtype if self.dtype == CASE_DTYPE else self.dtype

    def resolve_shape(self, m: int, dims: Mapping[str, int]) -> tuple[int, ...]:
        return resolve_shape(self.shape, m, dims)


def parse_inputs(path: Path, items: list, dims: Mapping[str, Any], layout: str) -> tuple[InputSpec, ...]:
    if not items:
        raise field_error(path, "inputs", "expected at least one [[inputs]] table")
    seen: set[str] = set()
    inputs = []
    for i, raw in enumerate(items):
        where = f"inputs[{i}]"
        if not isinstance(raw, dict):
            raise field_error(path, where, "expected a table", raw)
        r = FieldReader(path, raw, where)
        r.unknown({"name", "shape", "dtype", "high", "role"})
        name = check_identifier(path, f"{where}.name", r.get("name", str))
        if name in seen:
            raise field_error(path, f"{where}.name", "duplicate input name", name)
        seen.add(name)
        dtype = check_dtype(path, f"{where}.dtype", r.get("dtype", str))
        raw_shape = r.get("shape", list, None) if layout == "sequences" else r.get("shape", list)
        role = check_role(path, where, layout, r.get("role", str, None), dtype, raw_shape)
        shape = () if raw_shape is None else check_shape(path, f"{where}.shape", raw_shape, dims, derived_dims(layout))
        high = r.get("high", (str, int), None)
        if role is not None and high is not None:
            raise field_error(path, f"{where}.high", "index inputs of the sequences layout take no bound", high)
        if dtype in INT_DTYPES and role is None:
            if high is None:
                raise field_error(path, f"{where}.high", "integer inputs need an upper bound (a dimension name or an integer)")
            if isinstance(high, str) and high not in dims:
                raise field_error(path, f"{where}.high", "unknown dimension", high)
            if isinstance(high, int) and high < 1:
                raise field_error(path, f"{where}.high", "expected a positive integer", high)
        elif high is not None:
            raise field_error(path, f"{where}.high", "only integer inputs take a bound", high)
        inputs.append(InputSpec(name, shape, dtype, high, role))
    return tuple(inputs)
