"""``[[workload]]``: the timing cells, each a shape, a dtype, a weight and the devices it runs on.

A cell may say how much arithmetic one call does (``flops = "2 * M * N * K"``: sums and
products of its dimensions and integers), so that a device timing can be read as TFLOP/s
and as a share of the measured matmul ceiling.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tik_agent.spec.fields import BATCH_DIM, FLOAT_DTYPES, FieldReader, field_error


@dataclass(frozen=True)
class WorkloadCell:
    """One timing shape; ``weight`` is its share of the workload."""

    name: str
    m: int
    dims: Mapping[str, int]
    dtype: str
    weight: float
    devices: tuple[str, ...] = ("cpu", "cuda")
    flops: int | None = None  # floating-point operations per call, when the spec gives them
    backward: bool = False  # a training cell: forward plus backward are timed together


def _flops(path: Path, where: str, text: Any, sizes: Mapping[str, int]) -> int:
    """Evaluate a sum of products of dimension names and integers, nothing else."""
    if not isinstance(text, str):
        raise field_error(path, where, 'expected an expression such as "2 * M * N * K"', text)
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise field_error(path, where, "not an expression of dimensions", text) from None

    def value(node) -> int:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = value(node.left), value(node.right)
            return a + b if isinstance(node.op, ast.Add) else a * b
        if isinstance(node, ast.Name) and node.id in sizes:
            return sizes[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        raise field_error(path, where, f"only +, * , integers and the dimensions {sorted(sizes)} are allowed", text)

    return value(tree)


def parse_workload(path: Path, items: list, dims: Mapping[str, Any]) -> tuple[WorkloadCell, ...]:
    if not items:
        raise field_error(path, "workload", "expected at least one [[workload]] cell")
    cells = []
    names: set[str] = set()
    for i, raw in enumerate(items):
        where = f"workload[{i}]"
        if not isinstance(raw, dict):
            raise field_error(path, where, "expected a table", raw)
        r = FieldReader(path, raw, where)
        name = r.get("name", str)
        if name in names:
            raise field_error(path, f"{where}.name", "duplicate cell name", name)
        names.add(name)
        m = r.get(BATCH_DIM, int)
        if m < 1:
            raise field_error(path, f"{where}.{BATCH_DIM}", "expected an integer >= 1", m)
        dtype = r.get("dtype", str)
        if dtype not in FLOAT_DTYPES:
            raise field_error(path, f"{where}.dtype", f"unknown dtype; expected one of {list(FLOAT_DTYPES)}", dtype)
        weight = r.get("weight", (int, float), 1.0)
        if not math.isfinite(weight) or weight <= 0:
            raise field_error(path, f"{where}.weight", "expected a positive number", weight)
        devices = r.get("devices", list, ["cpu", "cuda"])
        for j, d in enumerate(devices):
            if d not in ("cpu", "cuda"):
                raise field_error(path, f"{where}.devices[{j}]", "unknown device; expected 'cpu' or 'cuda'", d)
        cell_dims = {}
        for key, value in raw.items():
            if key in ("name", BATCH_DIM, "dtype", "weight", "devices", "flops", "backward"):
                continue
            if key not in dims:
                raise field_error(path, f"{where}.{key}", f"unknown field or dimension; dimensions are {sorted(dims)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise field_error(path, f"{where}.{key}", "expected a positive integer", value)
            cell_dims[key] = value
        for d in dims:
            if d not in cell_dims:
                raise field_error(path, f"{where}.{d}", "missing: every workload cell gives every dimension")
        flops = _flops(path, f"{where}.flops", raw["flops"], {BATCH_DIM: m, **cell_dims}) if "flops" in raw else None
        cells.append(WorkloadCell(name, m, cell_dims, dtype, float(weight), tuple(devices), flops,
                                  r.get("backward", bool, False)))
    for device in ("cpu", "cuda"):
        if not any(device in c.devices for c in cells):
            raise field_error(path, "workload", f"no cell runs on {device}; give at least one cell for each device")
    return tuple(cells)
