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
    layout = "rows"                   # optional: "rows" or "sequences" (attention;
                                      # see tik_agent/spec/layouts.py)

    [dims]                            # fixed (non-batch) dimensions and the
    N = [256, 1000]                   # values the parity grid covers

    [[inputs]]                        # positional arguments of the entry, in order
    name = "x"
    shape = ["M", "N"]                # "M" is the batch dimension; it must lead
    dtype = "float"                   # "float": the case's dtype; or a dtype name
    # high = "V"                      # integer inputs: values drawn from [0, high)
    # role = "cache"                  # sequences layout: tokens, cache, cu_seqlens,
                                      # seq_lens or block_table (index inputs give
                                      # no shape; "T" and "BLOCKS" are derived dims)

    [kwargs]                          # keyword arguments passed as they are
    eps = 1e-6

    [output]                          # or several [[outputs]] tables, each with a
    shape = ["M", "N"]                # name, in the order the entry returns them
    dtype = "float"                   # as a tuple; each is judged on raw bits

    [sequences]                       # sequences layout only: the dims that set the
    context = "L"                     # longest context, the new tokens per sequence
    chunk = "Q"                       # (1: decode; >= L: whole prefill; else a mix)
    page = "P"                        # and the cache block size

    [parity]
    batch_sizes = [1, 2, 3, 5, 8, 17]
    dtypes = ["float32", "bfloat16", "float16"]
    seeds = [0, 1]
    regimes = ["normal", "zero", "large", "special"]   # or "spread" (tik_agent/spec/regimes.py)
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
    devices = ["cpu", "cuda"]         # optional (default both): the interpreter needs
                                      # small cells; required: at least one cell for
                                      # cpu and one for cuda, or load_spec refuses
                                      # the spec in one line naming the device

    [domain]                          # optional: what the kernel accepts (dims,
    ...                               # dtypes, layouts, keywords, integer values);
                                      # see tik_agent/spec/domain.py

    [tunables]                        # module-level constants of kernel.py that
    GROUP_M = [1, 4, 8]               # leave each row's reduction order alone
    NUM_WARPS = { values = [2, 4, 8], safe_on = ["cpu"] }   # elsewhere: unproven
                                      # (see tik_agent/spec/tunables.py)

    [backward]                        # optional gradient entry in the same file,
    entry = "rms_norm_backward"       # judged with the forward in every parity
    grads = ["dy"]                    # case (see tik_agent/spec/backward.py);
    wrt = ["x", "weight"]             # workload cells with `backward = true`
                                      # time forward plus backward
"""

from __future__ import annotations

import ast
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tik_agent import pyparse
from tik_agent.errors import SpecError
from tik_agent.spec.backward import BackwardSpec, check_backward_source, grad_inputs, grad_outputs, parse_backward
from tik_agent.spec.domain import Domain, parse_domain
from tik_agent.spec.fields import (
    BATCH_DIM, FLOAT_DTYPES, FieldReader, check_choice_list, check_identifier, check_int_list, field_error, read_text,
)
from tik_agent.spec.inputs import InputSpec, parse_inputs
from tik_agent.spec.layouts import SequenceSpec, check_sequence_spec, derived_dims, parse_layout, parse_sequences
from tik_agent.spec.outputs import OutputSpec, parse_outputs
from tik_agent.spec.regimes import REGIMES
from tik_agent.spec.tunables import parse_entry
from tik_agent.spec.workload import WorkloadCell, parse_workload

SPEC_FILE = "spec.toml"

Scalar = int | float | bool | str


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
class KernelSpec:
    name: str
    description: str
    entry: str
    directory: Path
    source: Path
    reference: Path | None
    inputs: tuple[InputSpec, ...]
    kwargs: Mapping[str, Scalar]
    outputs: tuple[OutputSpec, ...]
    dims: Mapping[str, tuple[int, ...]]
    parity: ParityGrid
    tolerances: Mapping[str, Tolerance]
    workload: tuple[WorkloadCell, ...]
    tunables: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)
    # name -> devices where its values are known to keep bits; absent: every device
    tunables_safe_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    layout: str = "rows"
    sequences: SequenceSpec | None = None
    backward: BackwardSpec | None = None
    domain: Domain | None = None  # load_spec always sets it: declared, or the default

    @property
    def checked_inputs(self) -> tuple[InputSpec, ...]:
        """What a judged call takes: the inputs, then the upstream gradients if any."""
        return self.inputs + (grad_inputs(self.backward, self.outputs) if self.backward else ())

    @property
    def checked_outputs(self) -> tuple[OutputSpec, ...]:
        """What a judged call returns: the outputs, then the gradients if any."""
        return self.outputs + (grad_outputs(self.backward, self.inputs) if self.backward else ())

    @property
    def output(self) -> OutputSpec:
        """The first output (the only one for most kernels)."""
        return self.outputs[0]

    @property
    def spec_path(self) -> Path:
        return self.directory / SPEC_FILE

    def workload_for(self, device: str) -> tuple[WorkloadCell, ...]:
        return tuple(c for c in self.workload if device in c.devices)

    def signature_text(self) -> str:
        params = [i.name for i in self.inputs] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.entry}({', '.join(params)})"


def load_spec(directory: Path | str) -> KernelSpec:
    """Read and validate ``directory/spec.toml`` and the files it names."""
    directory = Path(directory)
    path = directory / SPEC_FILE
    if not path.is_file():
        raise SpecError(f"{path}: no spec file (a seed directory needs {SPEC_FILE} and kernel.py)")
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    top = FieldReader(path, data, "")
    top.unknown({"kernel", "dims", "inputs", "kwargs", "output", "outputs", "parity", "tolerance", "workload",
                 "tunables", "sequences", "backward", "domain"})

    kernel = FieldReader(path, top.table_of("kernel"), "kernel")
    kernel.unknown({"name", "description", "entry", "source", "reference", "layout"})
    layout = parse_layout(path, kernel)
    name = kernel.get("name", str)
    if not name.replace("-", "_").isidentifier():
        raise field_error(path, "kernel.name", "expected letters, digits, '-' or '_'", name)
    entry = check_identifier(path, "kernel.entry", kernel.get("entry", str))
    source = directory / kernel.get("source", str, "kernel.py")
    if not source.is_file():
        raise field_error(path, "kernel.source", "file not found", str(source))
    ref_name = kernel.get("reference", str, None)
    reference = None
    if ref_name is not None:
        reference = directory / ref_name
        if not reference.is_file():
            raise field_error(path, "kernel.reference", "file not found", str(reference))
    elif (directory / "reference.py").is_file():
        reference = directory / "reference.py"

    dims = _parse_dims(path, top.table_of("dims", {}))
    sequences = parse_sequences(path, top.table_of("sequences", None), layout, dims)
    inputs = parse_inputs(path, top.get("inputs", list), dims, layout)
    kwargs = dict(top.table_of("kwargs", {}))
    for key, value in kwargs.items():
        check_identifier(path, f"kwargs.{key}", key)
        if not isinstance(value, (int, float, bool, str)):
            raise field_error(path, f"kwargs.{key}", "expected a number, boolean or string", value)

    outputs = parse_outputs(path, top, dims, derived_dims(layout))
    if layout == "rows":
        for n, output in enumerate(outputs):
            if not output.shape or output.shape[0] != BATCH_DIM:
                where = "output" if len(outputs) == 1 else f"outputs[{n}]"
                raise field_error(path, f"{where}.shape",
                                  f"the output must be batched: its first dimension must be {BATCH_DIM!r}", list(output.shape))
        if not any(i.batched for i in inputs):
            raise field_error(path, "inputs", f"at least one input must carry the batch dimension {BATCH_DIM!r}")
    check_sequence_spec(path, inputs, outputs, sequences)

    parity = _parse_parity(path, top.table_of("parity"))
    tolerances = _parse_tolerances(path, top.table_of("tolerance", {}), parity.dtypes)
    backward = parse_backward(path, top.table_of("backward", None), inputs, outputs, layout)
    workload = parse_workload(path, top.get("workload", list), dims)
    for n, cell in enumerate(workload):
        if cell.backward and backward is None:
            raise field_error(path, f"workload[{n}].backward", "a training cell needs a [backward] entry")
    tunables, safe_on = _parse_tunables(path, top.table_of("tunables", {}))

    spec = KernelSpec(
        name=name, description=kernel.get("description", str, ""), entry=entry,
        directory=directory, source=source, reference=reference, inputs=inputs,
        kwargs=kwargs, outputs=outputs, dims=dims, parity=parity, tolerances=tolerances,
        workload=workload, tunables=tunables, tunables_safe_on=safe_on, layout=layout, sequences=sequences,
        backward=backward,
    )
    _check_source_matches(spec)
    # Last: the domain is checked against everything above, which must stand first.
    return replace(spec, domain=parse_domain(path, top.table_of("domain", None), {
        "inputs": inputs, "dims": dims, "parity": parity, "kwargs": kwargs, "workload": workload, "layout": layout}))


def _parse_dims(path: Path, table: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    dims = {}
    for key, value in table.items():
        check_identifier(path, f"dims.{key}", key)
        if key == BATCH_DIM:
            raise field_error(path, f"dims.{key}", "the batch dimension's sizes go in parity.batch_sizes")
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        dims[key] = check_int_list(path, f"dims.{key}", value, 1)
    return dims


def _parse_parity(path: Path, table: Mapping[str, Any]) -> ParityGrid:
    r = FieldReader(path, table, "parity")
    r.unknown({"batch_sizes", "dtypes", "seeds", "regimes", "subbatches"})
    batch_sizes = check_int_list(path, "parity.batch_sizes", r.get("batch_sizes", list), 1)
    if 1 not in batch_sizes:
        raise field_error(path, "parity.batch_sizes", "must include 1 (a row alone)", list(batch_sizes))
    if not any(b % 2 for b in batch_sizes if b > 1):
        raise field_error(path, "parity.batch_sizes", "must include an odd size above 1", list(batch_sizes))
    dtypes = check_choice_list(path, "parity.dtypes", r.get("dtypes", list), FLOAT_DTYPES)
    seeds = check_int_list(path, "parity.seeds", r.get("seeds", list), 0)
    regimes = check_choice_list(path, "parity.regimes", r.get("regimes", list, list(REGIMES)), REGIMES)
    subbatches = r.get("subbatches", int, 2)
    if subbatches < 0:
        raise field_error(path, "parity.subbatches", "expected an integer >= 0", subbatches)
    return ParityGrid(batch_sizes, dtypes, seeds, regimes, subbatches)


def _parse_tolerances(path: Path, table: Mapping[str, Any], dtypes: tuple[str, ...]) -> dict[str, Tolerance]:
    tolerances = {}
    for key, raw in table.items():
        where = f"tolerance.{key}"
        if key not in FLOAT_DTYPES:
            raise field_error(path, where, f"unknown dtype; expected one of {list(FLOAT_DTYPES)}", key)
        if not isinstance(raw, dict):
            raise field_error(path, where, "expected a table with rtol and atol", raw)
        r = FieldReader(path, raw, where)
        r.unknown({"rtol", "atol"})
        rtol, atol = r.get("rtol", (int, float)), r.get("atol", (int, float))
        for fname, v in (("rtol", rtol), ("atol", atol)):
            if not math.isfinite(v) or v < 0:
                raise field_error(path, f"{where}.{fname}", "expected a finite number >= 0", v)
        tolerances[key] = Tolerance(float(rtol), float(atol))
    for d in dtypes:
        if d not in tolerances:
            raise field_error(path, f"tolerance.{d}", "missing: every parity dtype needs a tolerance for the float64 reference")
    return tolerances


def _parse_tunables(path: Path, table: Mapping[str, Any]) -> tuple[dict, dict]:
    tunables, safe_on = {}, {}
    for key, entry in table.items():
        where = f"tunables.{key}"
        check_identifier(path, where, key)
        values, devices = parse_entry(path, where, entry)
        if devices is not None:
            safe_on[key] = devices
        if not isinstance(values, list) or not values:
            raise field_error(path, where, "expected a non-empty list of candidate values", values)
        for j, v in enumerate(values):
            if not isinstance(v, (int, float, bool, str)):
                raise field_error(path, f"{where}[{j}]", "expected a number, boolean or string", v)
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
        tree = pyparse.parse(read_text(src), filename=str(src))
    except SyntaxError as exc:
        raise SpecError(f"{src}:{exc.lineno}: kernel file does not parse: {exc.msg}") from None
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if spec.entry not in funcs:
        raise field_error(spec.spec_path, "kernel.entry", f"no top-level function of that name in {src.name}; found {sorted(funcs)}", spec.entry)
    args = funcs[spec.entry].args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    expected = [i.name for i in spec.inputs]
    if params[: len(expected)] != expected:
        raise field_error(spec.spec_path, "inputs", f"names must match the first parameters of {spec.entry}{tuple(params)}", expected)
    for key in spec.kwargs:
        if key not in params:
            raise field_error(spec.spec_path, f"kwargs.{key}", f"{spec.entry} has no such parameter; it takes {params}")
    if spec.backward is not None:
        check_backward_source(spec, funcs)
    constants = module_constants(tree)
    for key in spec.tunables:
        if key not in constants:
            raise field_error(spec.spec_path, f"tunables.{key}", f"{src.name} has no module-level constant of that name")
