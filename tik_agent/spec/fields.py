"""Typed, validated access to TOML fields: every error names file, field and value."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tik_agent.errors import SpecError

BATCH_DIM = "M"
FLOAT_DTYPES = ("float32", "bfloat16", "float16")
INT_DTYPES = ("int64", "int32")
CASE_DTYPE = "float"  # placeholder: the parity case's float dtype


def read_text(path: Path) -> str:
    """A seed file as UTF-8 text; one line naming the file and the first bad byte otherwise."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None


def field_error(path: Path, where: str, problem: str, value: Any = ...) -> SpecError:
    got = "" if value is ... else f" (got {value!r})"
    return SpecError(f"{path}: {where}: {problem}{got}")


class FieldReader:
    """Typed field access on one TOML table, with errors naming the field."""

    def __init__(self, path: Path, table: Mapping[str, Any], where: str):
        self.path, self.table, self.where = path, table, where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.table:
            if default is ...:
                raise field_error(self.path, self._name(key), "missing required field")
            return default
        value = self.table[key]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise field_error(self.path, self._name(key), f"expected {_kind_name(kind)}", value)
        if not isinstance(value, kind):
            raise field_error(self.path, self._name(key), f"expected {_kind_name(kind)}", value)
        return value

    def table_of(self, key: str, default: Any = ...) -> Mapping[str, Any]:
        return self.get(key, dict, default)

    def unknown(self, allowed: set[str]) -> None:
        for key in self.table:
            if key not in allowed:
                raise field_error(self.path, self._name(key), f"unknown field; expected one of {sorted(allowed)}")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a table", bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def check_identifier(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise field_error(path, where, "expected a Python identifier", value)
    return value


def check_int_list(path: Path, where: str, value: Any, minimum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise field_error(path, where, "expected a non-empty list of integers", value)
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise field_error(path, f"{where}[{i}]", f"expected an integer >= {minimum}", v)
    return tuple(value)


def check_choice_list(path: Path, where: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise field_error(path, where, f"expected a non-empty list from {list(allowed)}", value)
    for i, v in enumerate(value):
        if v not in allowed:
            raise field_error(path, f"{where}[{i}]", f"unknown value; expected one of {list(allowed)}", v)
    return tuple(value)


def check_shape(path: Path, where: str, value: Any, dims: Mapping[str, Any],
           derived: tuple[str, ...] = ()) -> tuple[str | int, ...]:
    """A list of dimension names or sizes; ``derived`` names the layout's own dims (T, BLOCKS)."""
    if not isinstance(value, list):
        raise field_error(path, where, "expected a list of dimensions", value)
    for i, d in enumerate(value):
        if isinstance(d, str):
            if d in derived:
                continue
            if d != BATCH_DIM and d not in dims:
                raise field_error(path, f"{where}[{i}]", f"unknown dimension; declare it under [dims] or use {BATCH_DIM!r}", d)
            if d == BATCH_DIM and i != 0:
                raise field_error(path, f"{where}[{i}]", f"the batch dimension {BATCH_DIM!r} must come first", value)
        elif isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise field_error(path, f"{where}[{i}]", "expected a dimension name or a positive integer", d)
    return tuple(value)


def check_dtype(path: Path, where: str, value: Any) -> str:
    allowed = (CASE_DTYPE,) + FLOAT_DTYPES + ("float64",) + INT_DTYPES
    if value not in allowed:
        raise field_error(path, where, f"unknown dtype; expected one of {list(allowed)}", value)
    return value


def resolve_shape(shape: tuple[str | int, ...], m: int, dims: Mapping[str, int]) -> tuple[int, ...]:
    """A declared shape's sizes: the batch dimension is ``m``, a named dimension its value."""
    out = []
    for d in shape:
        if d == BATCH_DIM:
            out.append(m)
        elif isinstance(d, str):
            out.append(dims[d])
        else:
            out.append(d)
    return tuple(out)
