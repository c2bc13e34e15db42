"""The configuration survey, worker side: the launcher at every size, no kernel run.

For each axis of the plan (:mod:`tik_agent.judge.configs`) the entry is called
on inputs of each size with every launch recorded and handed an empty grid
(:func:`tik_agent.sandbox.launches.surveying`): the launcher's host code runs
for real, under the host-ops mode like every judged call, Triton handles the
arguments and evaluates the grid as it would (and on a GPU compiles), and no
program runs.  The inputs are real tensors of the real sizes, dtypes and device,
allocated and never written: a launcher cannot read an element (the host-ops
mode refuses it), so it cannot tell a survey call from a judged one by its
inputs.  On the CPU an allocation nobody writes takes address space, not memory.

A launch is described as a *structure* (the kernel, each argument's kind and
tensor dtype, the values that are not integers, the grid's rank, the options'
names) and *numbers* (every integer argument, option and grid entry, in order).
The analysis then asks for the sizes a bisection needs; the record holds every
size surveyed, and the parent runs the same analysis on it.
"""

from __future__ import annotations

import json
from typing import Callable

from tik_agent.judge import configs, joint, joint_sequences
from tik_agent.sandbox import hostops, launches
from tik_agent.sandbox.harness import guarded_call
from tik_agent.spec.cases import Case
from tik_agent.spec.fields import resolve_shape
from tik_agent.spec.schema import KernelSpec


def describe(launch: dict) -> tuple[tuple, list[int]]:
    """One recorded launch as (structure, numbers)."""
    import torch

    kernel, args, kwargs, grid = launch["kernel"], launch["args"], launch["kwargs"], launch["grid"]
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    head, slots = _layout(kernel, len(args), tuple(kwargs))
    structure: list = list(head)
    numbers: list[int] = []
    tensor = torch.Tensor
    for name, where, i in slots:
        _describe_value(name, args[i] if where == "arg" else kwargs[i] if where == "kw" else _DEFAULT,
                        structure, numbers, tensor)
    for value in grid:
        _describe_value("grid", value, structure, numbers, tensor)
    structure.append(("grid rank", len(grid)))
    return tuple(structure), numbers


def _describe_value(name: str, value, structure: list, numbers: list, tensor: type) -> None:
    kind = type(value)
    if kind is int:
        structure.append(name)
        numbers.append(value)
    elif isinstance(value, tensor):
        dtype = value.dtype
        text = _DTYPE_TEXT.get(dtype) or _DTYPE_TEXT.setdefault(dtype, str(dtype))
        structure.append((name, text, value.device.type))
    elif value is _DEFAULT:
        structure.append((name, "default"))
    elif isinstance(value, int) and kind is not bool:  # an int subclass (an IntEnum)
        structure.append(name)
        numbers.append(int(value))
    else:
        structure.append((name, kind.__name__, _text(value)))


_DTYPE_TEXT: dict = {}  # torch dtype -> its str(), which torch builds anew at each call
_SHOWN = 200  # characters of a value's repr kept as they are; a longer one is cut and hashed whole


def _text(value) -> str:
    """A value that is not an integer or a tensor (a float, a string or tuple constexpr), as
    the structure holds it: its repr, cut at :data:`_SHOWN` characters with a digest of the
    whole (two strings that differ only past the cut are two launches)."""
    import hashlib

    text = repr(value)
    if len(text) <= _SHOWN:
        return text
    return text[:_SHOWN] + "...sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_LAYOUTS: dict = {}  # (kernel, its function, positional count, keyword names) -> where each value comes from


def _layout(kernel, n_args: int, keywords: tuple) -> tuple[tuple, list[tuple]]:
    """The structure's head and, per parameter and option in order, its label and where
    its value is (``("arg", index)``, ``("kw", name)`` or the default): the same for every
    launch of one kernel with the same argument shape, so worked out once."""
    # The function too: a kernel object whose ``fn`` were swapped between launches (the static
    # rules forbid the assignment; this does not rely on them) is another layout, another head.
    key = (kernel, getattr(kernel, "fn", None), n_args, keywords)
    try:
        found = _LAYOUTS.get(key)
    except TypeError:  # an unhashable kernel object: worked out anew at each launch
        key, found = None, None
    if found is None:
        fn = getattr(kernel, "fn", None)
        names, constexprs = launches.params(kernel) or ([], frozenset())
        code = getattr(fn, "__code__", None)
        head = ((getattr(fn, "__qualname__", "?"), getattr(code, "co_firstlineno", 0)),)
        slots = []
        for i, n in enumerate(names):
            label = ("constexpr " if n in constexprs else "") + n
            # A keyword overrides a positional argument of the same name, as the launch binds them.
            slots.append((label, "kw", n) if n in keywords else (label, "arg", i) if i < n_args else
                         (label, "default", None))
        slots += [(f"option {k}", "kw", k) for k in sorted(keywords) if k not in names and k not in ("grid", "warmup")]
        found = head, slots
        if key is not None:
            _LAYOUTS[key] = found
    return found


_DEFAULT = object()  # a parameter the launch leaves at its default


class _Inputs:
    """The inputs of the survey calls along one axis: each input's dtype worked out once
    (it does not depend on the size), its shape and the byte cap per size."""

    def __init__(self, spec: KernelSpec, axis: dict):
        import torch

        self.axis, self.device = axis, axis["device"]
        m, dims = configs.point_of(axis, int(axis["values"][0]) if axis["values"] else 1)
        case = Case(m, dims, axis["dtype"], "normal", 0)
        self.spec = spec
        self.declared = [(inp.shape, getattr(torch, case.dtype_of(inp.name, inp.dtype)))
                         for inp in spec.checked_inputs]
        self.cap = configs.BYTE_CAP.get(self.device, configs.BYTE_CAP["cuda"])

    def at(self, value: int) -> list | None:
        """Unwritten tensors of the sizes at ``value``; None past the byte cap."""
        return self.at_point(*configs.point_of(self.axis, value))

    def at_point(self, m: int, dims: dict) -> list | None:
        """Unwritten tensors of the sizes of batch ``m`` and ``dims``; None past the byte cap."""
        import math

        import torch

        if self.spec.layout == "sequences":
            shapes = [(shape, dt) for shape, (_, dt) in zip(_sequence_shapes(self.spec, m, dims), self.declared)]
        else:
            shapes = [(resolve_shape(shape, m, dims), dt) for shape, dt in self.declared]
        if sum(math.prod(shape) * dt.itemsize for shape, dt in shapes) > self.cap:
            return None
        return [torch.empty(shape, dtype=dt, device=self.device) for shape, dt in shapes]


def _sequence_shapes(spec: KernelSpec, m: int, dims: dict) -> list[tuple[int, ...]]:
    """The input shapes of the uniform full launch of ``m`` sequences at ``dims``: what a
    parity case with ``uniform`` builds (:func:`tik_agent.spec.sequences.survey_sizes`)."""
    from tik_agent.spec.layouts import BLOCKS_DIM, TOKENS_DIM
    from tik_agent.spec.sequences import survey_sizes

    sizes = survey_sizes(spec, m, dims)
    index = {"cu_seqlens": (m + 1,), "seq_lens": (m,), "block_table": (m, sizes["width"])}
    at = {**dims, TOKENS_DIM: sizes["tokens"], BLOCKS_DIM: sizes["blocks"]}
    return [index[inp.role] if inp.role in index else resolve_shape(inp.shape, m, at) for inp in spec.checked_inputs]


def survey_call(entry: Callable, kwargs, inputs: _Inputs, value: int | tuple[int, dict]) -> tuple[object, tuple[int, ...]]:
    """The launches of one call at ``value`` along the axis of ``inputs`` (or at a point of
    combined sizes, ``(m, dims)``)."""
    args = inputs.at_point(*value) if isinstance(value, tuple) else inputs.at(value)
    if args is None:
        return configs.SKIPPED, ()
    try:
        with launches.surveying() as found:
            guarded_call(entry, args, kwargs, which=None)  # as a judged call is made, nothing written
    except hostops.HostComputeError:
        raise  # a judged call would fail the same way: the worker's verdict
    except Exception as exc:  # a launcher that refuses this size: part of its configuration
        return ("raised", type(exc).__name__), ()
    finally:
        del args
    described = [describe(launch) for launch in found]
    return tuple(s for s, _ in described), tuple(n for _, ns in described for n in ns)


def run_survey(spec: KernelSpec, entry: Callable, plan: list[dict], points: list[dict] = (), seed: int = 0) -> dict:
    """Every size of every axis of ``plan``, and those the analysis asks for, then each point
    of combined sizes in ``points`` and those its analysis asks for
    (:mod:`tik_agent.judge.joint`): the record."""
    import time

    start = time.perf_counter()
    structures: dict[str, int] = {}
    texts: dict[tuple, str] = {}

    def text(structure) -> object:  # as the parent reads it from the record
        if structure == configs.SKIPPED:
            return structure
        return texts.get(structure) or texts.setdefault(structure, json.dumps(structure))

    seen: dict[str, dict[int, tuple]] = {}
    probes = {}
    boundaries: list[tuple[str, int]] = []
    for axis in plan:
        inputs, found = _Inputs(spec, axis), seen.setdefault(configs.axis_key(axis), {})

        def probe(value: int, inputs=inputs, found=found) -> tuple:
            if value not in found:
                structure, numbers = survey_call(entry, spec.kwargs, inputs, value)
                found[value] = text(structure), numbers
            return found[value]

        for value in axis["values"]:
            probe(value)
        changes = configs.analyse(axis, probe)  # asks for the sizes its bisections need
        boundaries += [(b.dim, b.value) for b in changes.boundaries]
        probes[configs.axis_key(axis)] = probe
    combined: dict[tuple, tuple] = {}
    if points:
        inputs = _Inputs(spec, plan[0])

        def at_point(m: int, dims: dict) -> tuple:
            key = joint.key_of(m, dims)
            if key not in combined:
                structure, numbers = survey_call(entry, spec.kwargs, inputs, (m, dict(dims)))
                combined[key] = text(structure), numbers
            return combined[key]

        if spec.layout == "sequences":  # asks for the sizes it places, as below
            joint_sequences.judge(joint_sequences.shape_of(spec, plan[0]["device"]), plan, list(points), at_point, probes)
        else:
            joint.judge(plan, list(points), at_point, probes, seed, boundaries)  # asks for the sizes it places
    axes = []
    for axis in plan:
        rows = []
        for value, (structure, numbers) in sorted(seen[configs.axis_key(axis)].items()):
            rows.append([value] if structure == configs.SKIPPED else
                        [value, structures.setdefault(structure, len(structures)), list(numbers)])
        axes.append({"dim": configs.axis_key(axis), "points": rows})
    records = []
    for (m, dims), (structure, numbers) in combined.items():
        records.append([m, dict(dims)] if structure == configs.SKIPPED else
                       [m, dict(dims), structures.setdefault(structure, len(structures)), list(numbers)])
    return {"structures": list(structures), "axes": axes, "joint": records,
            "seconds": round(time.perf_counter() - start, 3)}
