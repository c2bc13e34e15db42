"""The entry's outputs: one ``[output]`` table, or several ``[[outputs]]`` in the order returned.

Each output is judged on its own raw bits; an entry with several outputs
returns a tuple of tensors in the declared order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tik_agent.spec.fields import CASE_DTYPE, FieldReader, check_dtype, check_identifier, check_shape, field_error


@dataclass(frozen=True)
class OutputSpec:
    shape: tuple[str | int, ...]
    dtype: str
    name: str = "output"
    of_input: str | None = None  # a gradient: the input whose dtype it takes

    def resolve_dtype(self, case_dtype: str) -> str:
        return case_dtype if self.dtype == CASE_DTYPE else self.dtype

    def dtype_in(self, case) -> str:
        """Its dtype in ``case`` (a gradient of an input in another dtype takes that one)."""
        return case.dtype_of(self.of_input, self.dtype) if self.of_input else self.resolve_dtype(case.dtype)


def parse_outputs(path: Path, top: FieldReader, dims: Mapping[str, Any], derived: tuple[str, ...]) -> tuple[OutputSpec, ...]:
    single, several = top.table.get("output"), top.table.get("outputs")
    if (single is None) == (several is None):
        raise field_error(path, "output", "give exactly one of [output] (one tensor) or [[outputs]] (several, in order)")
    if single is not None:
        r = FieldReader(path, top.table_of("output"), "output")
        r.unknown({"shape", "dtype"})
        return (_one(path, "output", r, dims, derived, "output"),)
    items = top.get("outputs", list)
    if len(items) < 2:
        raise field_error(path, "outputs", "[[outputs]] is for several outputs; use [output] for one", len(items))
    outputs, names = [], set()
    for i, raw in enumerate(items):
        where = f"outputs[{i}]"
        if not isinstance(raw, dict):
            raise field_error(path, where, "expected a table", raw)
        r = FieldReader(path, raw, where)
        r.unknown({"name", "shape", "dtype"})
        name = check_identifier(path, f"{where}.name", r.get("name", str))
        if name in names:
            raise field_error(path, f"{where}.name", "duplicate output name", name)
        names.add(name)
        outputs.append(_one(path, where, r, dims, derived, name))
    return tuple(outputs)


def _one(path: Path, where: str, r: FieldReader, dims, derived, name: str) -> OutputSpec:
    shape = check_shape(path, f"{where}.shape", r.get("shape", list), dims, derived)
    return OutputSpec(shape, check_dtype(path, f"{where}.dtype", r.get("dtype", str)), name)
