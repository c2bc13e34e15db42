"""``spec.toml`` -> frozen dataclasses, validated at the edge.

A seed directory holds ``kernel.py`` (the Triton kernel and its launcher, the
*entry*), ``spec.toml`` (this schema) and optionally ``reference.py`` (a float64
torch reference used as a sanity check, never as the parity target).  Every
error names the file, the field and the offending value.  The schema::

    [kernel]
    name = "rmsnorm"                  # identifier, used in run names
    description = "one line"
    entry = "rms_norm"                # launcher function in kernel.py
    source = "kernel.py"              # optional
    reference = "reference.py"        # optional; function `reference`

    [dims]                            # fixed (non-batch) dimensions and the
    N = [256, 1000]                   # values the parity grid covers

    [[inputs]]                        # positional arguments of the entry, in order
    name = "x"
    shape = ["M", "N"]                # "M" is the batch dimension; it must lead
    dtype = "float"                   # "float": the case's dtype; or a dtype name
    # high = "V"                      # integer inputs: values drawn from [0, high)

    [kwargs]                          # keyword arguments passed as they are
    eps = 1e-6

    [output]
    shape = ["M", "N"]
    dtype = "float"

    [parity]
    batch_sizes = [1, 2, 3, 5, 8, 17]
    dtypes = ["float32", "bfloat16", "float16"]
    seeds = [0, 1]
    regimes = ["normal", "zero", "large", "special"]
    subbatches = 2                    # random sub-batches per invariance check

    [tolerance.float32]               # float64 sanity reference; one per dtype
    rtol = 1e-5
    atol = 1e-6

    [[workload]]                      # timing cells: an inference and a training mix
    name = "decode"
    M = 4
    N = 4096
    dtype = "bfloat16"
    weight = 4.0
    devices = ["cpu", "cuda"]         # optional: the interpreter needs small cells

    [tunables]                        # module-level constants of kernel.py that
    GROUP_M = [1, 4, 8]               # leave each row's reduction order alone
    NUM_WARPS = { values = [2, 4, 8], safe_on = ["cpu"] }   # elsewhere: unproven
                                      # (see tik_agent/spec/tunables.py)
"""

from __future__ import annotations

import ast
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tik_agent import pyparse
from tik_agent.errors import SpecError

BATCH_DIM = "M"
FLOAT_DTYPES = ("float32", "bfloat16", "float16")
INT_DTYPES = ("int64", "int32")
CASE_DTYPE = "float"  # placeholder: the parity case's float dtype
REGIMES = ("normal", "zero", "large", "special")
SPEC_FILE = "spec.toml"

Scalar = int | float | bool | str


def _err(path: Path, where: str, problem: str, value: Any = ...) -> SpecError:
    got = "" if value is ... else f" (got {value!r})"
    return SpecError(f"{path}: {where}: {problem}{got}")


@dataclass(frozen=True)
class InputSpec:
    """One positional argument of the entry."""

    name: str
    shape: tuple[str | int, ...]
    dtype: str
    high: str | int | None = None

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


@dataclass(frozen=True)
class OutputSpec:
    shape: tuple[str | int, ...]
    dtype: str

    def resolve_dtype(self, case_dtype: str) -> str:
        return case_dtype if self.dtype == CASE_DTYPE else self.dtype


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


@dataclass(frozen=True)
class ParityGrid:
    batch_sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    seeds: tuple[int, ...]
    regimes: tuple[str, ...]
    subbatches: int


@dataclass(frozen=True)
class WorkloadCell:
    """One timing shape; ``weight`` is its share of the workload."""

    name: str
    m: int
    dims: Mapping[str, int]
    dtype: str
    weight: float
    devices: tuple[str, ...] = ("cpu", "cuda")


@dataclass(frozen=True)
class KernelSpec:
    name: str
    description: str
    entry: str
    directory: Path
    source: Path
    reference: Path | None
    inputs: tuple[InputSpec, ...]
    kwargs: Mapping[str, Scalar]
    output: OutputSpec
    dims: Mapping[str, tuple[int, ...]]
    parity: ParityGrid
    tolerances: Mapping[str, Tolerance]
    workload: tuple[WorkloadCell, ...]
    tunables: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)
    # name -> devices where its values are known to keep bits; absent: every device
    tunables_safe_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def spec_path(self) -> Path:
        return self.directory / SPEC_FILE

    def workload_for(self, device: str) -> tuple[WorkloadCell, ...]:
        return tuple(c for c in self.workload if device in c.devices)

    def signature_text(self) -> str:
        params = [i.name for i in self.inputs] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.entry}({', '.join(params)})"


def resolve_shape(shape: tuple[str | int, ...], m: int, dims: Mapping[str, int]) -> tuple[int, ...]:
    out = []
    for d in shape:
        if d == BATCH_DIM:
            out.append(m)
        elif isinstance(d, str):
            out.append(dims[d])
        else:
            out.append(d)
    return tuple(out)


# --------------------------------------------------------------------------- parsing


class _Reader:
    """Typed field access on one TOML table, with errors naming the field."""

    def __init__(self, path: Path, table: Mapping[str, Any], where: str):
        self.path, self.table, self.where = path, table, where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.table:
            if default is ...:
                raise _err(self.path, self._name(key), "missing required field")
            return default
        value = self.table[key]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise _err(self.path, self._name(key), f"expected {_kind_name(kind)}", value)
        if not isinstance(value, kind):
            raise _err(self.path, self._name(key), f"expected {_kind_name(kind)}", value)
        return value

    def table_of(self, key: str, default: Any = ...) -> Mapping[str, Any]:
        return self.get(key, dict, default)

    def unknown(self, allowed: set[str]) -> None:
        for key in self.table:
            if key not in allowed:
                raise _err(self.path, self._name(key), f"unknown field; expected one of {sorted(allowed)}")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a table", bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _identifier(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise _err(path, where, "expected a Python identifier", value)
    return value


def _int_list(path: Path, where: str, value: Any, minimum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise _err(path, where, "expected a non-empty list of integers", value)
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise _err(path, f"{where}[{i}]", f"expected an integer >= {minimum}", v)
    return tuple(value)


def _choice_list(path: Path, where: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _err(path, where, f"expected a non-empty list from {list(allowed)}", value)
    for i, v in enumerate(value):
        if v not in allowed:
            raise _err(path, f"{where}[{i}]", f"unknown value; expected one of {list(allowed)}", v)
    return tuple(value)


def _shape(path: Path, where: str, value: Any, dims: Mapping[str, Any]) -> tuple[str | int, ...]:
    if not isinstance(value, list):
        raise _err(path, where, "expected a list of dimensions", value)
    for i, d in enumerate(value):
        if isinstance(d, str):
            if d != BATCH_DIM and d not in dims:
                raise _err(path, f"{where}[{i}]", f"unknown dimension; declare it under [dims] or use {BATCH_DIM!r}", d)
            if d == BATCH_DIM and i != 0:
                raise _err(path, f"{where}[{i}]", f"the batch dimension {BATCH_DIM!r} must come first", value)
        elif isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise _err(path, f"{where}[{i}]", "expected a dimension name or a positive integer", d)
    return tuple(value)


def _dtype(path: Path, where: str, value: Any) -> str:
    allowed = (CASE_DTYPE,) + FLOAT_DTYPES + ("float64",) + INT_DTYPES
    if value not in allowed:
        raise _err(path, where, f"unknown dtype; expected one of {list(allowed)}", value)
    return value


def load_spec(directory: Path | str) -> KernelSpec:
    """Read and validate ``directory/spec.toml`` and the files it names."""
    directory = Path(directory)
    path = directory / SPEC_FILE
    if not path.is_file():
        raise SpecError(f"{path}: no spec file (a seed directory needs {SPEC_FILE} and kernel.py)")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    top = _Reader(path, data, "")
    top.unknown({"kernel", "dims", "inputs", "kwargs", "output", "parity", "tolerance", "workload", "tunables"})

    kernel = _Reader(path, top.table_of("kernel"), "kernel")
    kernel.unknown({"name", "description", "entry", "source", "reference"})
    name = kernel.get("name", str)
    if not name.replace("-", "_").isidentifier():
        raise _err(path, "kernel.name", "expected letters, digits, '-' or '_'", name)
    entry = _identifier(path, "kernel.entry", kernel.get("entry", str))
    source = directory / kernel.get("source", str, "kernel.py")
    if not source.is_file():
        raise _err(path, "kernel.source", "file not found", str(source))
    ref_name = kernel.get("reference", str, None)
    reference = None
    if ref_name is not None:
        reference = directory / ref_name
        if not reference.is_file():
            raise _err(path, "kernel.reference", "file not found", str(reference))
    elif (directory / "reference.py").is_file():
        reference = directory / "reference.py"

    dims = _parse_dims(path, top.table_of("dims", {}))
    inputs = _parse_inputs(path, top.get("inputs", list), dims)
    kwargs = dict(top.table_of("kwargs", {}))
    for key, value in kwargs.items():
        _identifier(path, f"kwargs.{key}", key)
        if not isinstance(value, (int, float, bool, str)):
            raise _err(path, f"kwargs.{key}", "expected a number, boolean or string", value)

    out = _Reader(path, top.table_of("output"), "output")
    out.unknown({"shape", "dtype"})
    output = OutputSpec(_shape(path, "output.shape", out.get("shape", list), dims), _dtype(path, "output.dtype", out.get("dtype", str)))
    if not output.shape or output.shape[0] != BATCH_DIM:
        raise _err(path, "output.shape", f"the output must be batched: its first dimension must be {BATCH_DIM!r}", list(output.shape))
    if not any(i.batched for i in inputs):
        raise _err(path, "inputs", f"at least one input must carry the batch dimension {BATCH_DIM!r}")

    parity = _parse_parity(path, top.table_of("parity"))
    tolerances = _parse_tolerances(path, top.table_of("tolerance", {}), parity.dtypes)
    workload = _parse_workload(path, top.get("workload", list), dims)
    tunables, safe_on = _parse_tunables(path, top.table_of("tunables", {}))

    spec = KernelSpec(
        name=name, description=kernel.get("description", str, ""), entry=entry,
        directory=directory, source=source, reference=reference, inputs=inputs,
        kwargs=kwargs, output=output, dims=dims, parity=parity, tolerances=tolerances,
        workload=workload, tunables=tunables, tunables_safe_on=safe_on,
    )
    _check_source_matches(spec)
    return spec


def _parse_dims(path: Path, table: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    dims = {}
    for key, value in table.items():
        _identifier(path, f"dims.{key}", key)
        if key == BATCH_DIM:
            raise _err(path, f"dims.{key}", "the batch dimension's sizes go in parity.batch_sizes")
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        dims[key] = _int_list(path, f"dims.{key}", value, 1)
    return dims


def _parse_inputs(path: Path, items: list, dims: Mapping[str, Any]) -> tuple[InputSpec, ...]:
    if not items:
        raise _err(path, "inputs", "expected at least one [[inputs]] table")
    seen: set[str] = set()
    inputs = []
    for i, raw in enumerate(items):
        where = f"inputs[{i}]"
        if not isinstance(raw, dict):
            raise _err(path, where, "expected a table", raw)
        r = _Reader(path, raw, where)
        r.unknown({"name", "shape", "dtype", "high"})
        name = _identifier(path, f"{where}.name", r.get("name", str))
        if name in seen:
            raise _err(path, f"{where}.name", "duplicate input name", name)
        seen.add(name)
        shape = _shape(path, f"{where}.shape", r.get("shape", list), dims)
        dtype = _dtype(path, f"{where}.dtype", r.get("dtype", str))
        high = r.get("high", (str, int), None)
        if dtype in INT_DTYPES:
            if high is None:
                raise _err(path, f"{where}.high", "integer inputs need an upper bound (a dimension name or an integer)")
            if isinstance(high, str) and high not in dims:
                raise _err(path, f"{where}.high", "unknown dimension", high)
            if isinstance(high, int) and high < 1:
                raise _err(path, f"{where}.high", "expected a positive integer", high)
        elif high is not None:
            raise _err(path, f"{where}.high", "only integer inputs take a bound", high)
        inputs.append(InputSpec(name, shape, dtype, high))
    return tuple(inputs)


def _parse_parity(path: Path, table: Mapping[str, Any]) -> ParityGrid:
    r = _Reader(path, table, "parity")
    r.unknown({"batch_sizes", "dtypes", "seeds", "regimes", "subbatches"})
    batch_sizes = _int_list(path, "parity.batch_sizes", r.get("batch_sizes", list), 1)
    if 1 not in batch_sizes:
        raise _err(path, "parity.batch_sizes", "must include 1 (a row alone)", list(batch_sizes))
    if not any(b % 2 for b in batch_sizes if b > 1):
        raise _err(path, "parity.batch_sizes", "must include an odd size above 1", list(batch_sizes))
    dtypes = _choice_list(path, "parity.dtypes", r.get("dtypes", list), FLOAT_DTYPES)
    seeds = _int_list(path, "parity.seeds", r.get("seeds", list), 0)
    regimes = _choice_list(path, "parity.regimes", r.get("regimes", list, list(REGIMES)), REGIMES)
    subbatches = r.get("subbatches", int, 2)
    if subbatches < 0:
        raise _err(path, "parity.subbatches", "expected an integer >= 0", subbatches)
    return ParityGrid(batch_sizes, dtypes, seeds, regimes, subbatches)


def _parse_tolerances(path: Path, table: Mapping[str, Any], dtypes: tuple[str, ...]) -> dict[str, Tolerance]:
    tolerances = {}
    for key, raw in table.items():
        where = f"tolerance.{key}"
        if key not in FLOAT_DTYPES:
            raise _err(path, where, f"unknown dtype; expected one of {list(FLOAT_DTYPES)}", key)
        if not isinstance(raw, dict):
            raise _err(path, where, "expected a table with rtol and atol", raw)
        r = _Reader(path, raw, where)
        r.unknown({"rtol", "atol"})
        rtol, atol = r.get("rtol", (int, float)), r.get("atol", (int, float))
        for fname, v in (("rtol", rtol), ("atol", atol)):
            if not math.isfinite(v) or v < 0:
                raise _err(path, f"{where}.{fname}", "expected a finite number >= 0", v)
        tolerances[key] = Tolerance(float(rtol), float(atol))
    for d in dtypes:
        if d not in tolerances:
            raise _err(path, f"tolerance.{d}", "missing: every parity dtype needs a tolerance for the float64 reference")
    return tolerances


def _parse_workload(path: Path, items: list, dims: Mapping[str, Any]) -> tuple[WorkloadCell, ...]:
    if not items:
        raise _err(path, "workload", "expected at least one [[workload]] cell")
    cells = []
    names: set[str] = set()
    for i, raw in enumerate(items):
        where = f"workload[{i}]"
        if not isinstance(raw, dict):
            raise _err(path, where, "expected a table", raw)
        r = _Reader(path, raw, where)
        name = r.get("name", str)
        if name in names:
            raise _err(path, f"{where}.name", "duplicate cell name", name)
        names.add(name)
        m = r.get(BATCH_DIM, int)
        if m < 1:
            raise _err(path, f"{where}.{BATCH_DIM}", "expected an integer >= 1", m)
        dtype = r.get("dtype", str)
        if dtype not in FLOAT_DTYPES:
            raise _err(path, f"{where}.dtype", f"unknown dtype; expected one of {list(FLOAT_DTYPES)}", dtype)
        weight = r.get("weight", (int, float), 1.0)
        if not math.isfinite(weight) or weight <= 0:
            raise _err(path, f"{where}.weight", "expected a positive number", weight)
        devices = r.get("devices", list, ["cpu", "cuda"])
        for j, d in enumerate(devices):
            if d not in ("cpu", "cuda"):
                raise _err(path, f"{where}.devices[{j}]", "unknown device; expected 'cpu' or 'cuda'", d)
        cell_dims = {}
        for key, value in raw.items():
            if key in ("name", BATCH_DIM, "dtype", "weight", "devices"):
                continue
            if key not in dims:
                raise _err(path, f"{where}.{key}", f"unknown field or dimension; dimensions are {sorted(dims)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _err(path, f"{where}.{key}", "expected a positive integer", value)
            cell_dims[key] = value
        for d in dims:
            if d not in cell_dims:
                raise _err(path, f"{where}.{d}", "missing: every workload cell gives every dimension")
        cells.append(WorkloadCell(name, m, cell_dims, dtype, float(weight), tuple(devices)))
    for device in ("cpu", "cuda"):
        if not any(device in c.devices for c in cells):
            raise _err(path, "workload", f"no cell runs on {device}; give at least one cell for each device")
    return tuple(cells)


def _parse_tunables(path: Path, table: Mapping[str, Any]) -> tuple[dict, dict]:
    from tik_agent.spec.tunables import parse_entry

    tunables, safe_on = {}, {}
    for key, entry in table.items():
        where = f"tunables.{key}"
        _identifier(path, where, key)
        values, devices = parse_entry(path, where, entry)
        if devices is not None:
            safe_on[key] = devices
        if not isinstance(values, list) or not values:
            raise _err(path, where, "expected a non-empty list of candidate values", values)
        for j, v in enumerate(values):
            if not isinstance(v, (int, float, bool, str)):
                raise _err(path, f"{where}[{j}]", "expected a number, boolean or string", v)
        tunables[key] = tuple(values)
    return tunables, safe_on


def module_constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` assignments of a kernel file."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found


def _check_source_matches(spec: KernelSpec) -> None:
    """The entry exists with the declared parameters; tunables are constants."""
    src = spec.source
    try:
        tree = pyparse.parse(src.read_text(), filename=str(src))
    except SyntaxError as exc:
        raise SpecError(f"{src}:{exc.lineno}: kernel file does not parse: {exc.msg}") from None
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if spec.entry not in funcs:
        raise _err(spec.spec_path, "kernel.entry", f"no top-level function of that name in {src.name}; found {sorted(funcs)}", spec.entry)
    args = funcs[spec.entry].args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    expected = [i.name for i in spec.inputs]
    if params[: len(expected)] != expected:
        raise _err(spec.spec_path, "inputs", f"names must match the first parameters of {spec.entry}{tuple(params)}", expected)
    for key in spec.kwargs:
        if key not in params:
            raise _err(spec.spec_path, f"kwargs.{key}", f"{spec.entry} has no such parameter; it takes {params}")
    constants = module_constants(tree)
    for key in spec.tunables:
        if key not in constants:
            raise _err(spec.spec_path, f"tunables.{key}", f"{src.name} has no module-level constant of that name")
