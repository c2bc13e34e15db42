"""The optional ``[backward]`` table: a seed's gradient entry, judged like its forward.

::

    [backward]
    entry = "rms_norm_backward"   # in the same kernel file; takes the forward
                                  # inputs, then the upstream gradients, then kwargs
    grads = ["dy"]                # one upstream gradient per forward output, in
                                  # order; each has its output's shape and dtype
    wrt = ["x", "weight"]         # returns the gradient of each of these float
                                  # inputs, in order, in the input's shape and dtype

    [backward.tolerance.bfloat16] # optional, per dtype: the float64 sanity check of
    rtol = 1.6e-2                 # the gradients (default: the forward's tolerance)
    atol = 1e-2

Contract (what the evaluator checks on raw bits, like the forward): a gradient
whose shape leads with the batch dimension (``dx``) is *per row* and must be
batch invariant; a gradient without it (``dweight``, ``db``) is a reduction over
the batch and must equal the seed's bits at every batch size, so its order of
summation may not depend on M.  Every parity case then runs forward and
backward, and judges the forward outputs followed by the gradients.

In the ``sequences`` layout (attention) the upstream gradients are ``tokens``
inputs, generated per sequence and position like the queries.  A gradient of a
``tokens`` input (``dq``) is per token and must agree in every launch that
holds the token; a gradient of a ``cache`` input (``dk_cache``) is per slot:
a slot's value sums over its own sequence's new tokens, so it must agree in
every launch where that sequence has the same chunk, whatever else shares the
launch or where its blocks sit, and a slot no sequence owns must hold zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tik_agent.spec.fields import BATCH_DIM, FLOAT_DTYPES, FieldReader, check_identifier, field_error
from tik_agent.spec.inputs import InputSpec
from tik_agent.spec.layouts import TOKENS_DIM
from tik_agent.spec.outputs import OutputSpec

BACKWARD_FIELDS = {"entry", "grads", "wrt", "tolerance"}


@dataclass(frozen=True)
class BackwardSpec:
    entry: str
    grads: tuple[str, ...]     # names of the upstream gradients, one per forward output
    wrt: tuple[str, ...]       # forward inputs the entry returns gradients of, in order
    tolerances: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # dtype -> (rtol, atol)


def parse_backward(path: Path, table: Mapping[str, Any] | None, inputs, outputs, layout: str) -> BackwardSpec | None:
    if table is None:
        return None
    r = FieldReader(path, table, "backward")
    r.unknown(BACKWARD_FIELDS)
    entry = check_identifier(path, "backward.entry", r.get("entry", str))
    names = {i.name for i in inputs}
    grads = r.get("grads", list)
    if len(grads) != len(outputs):
        raise field_error(path, "backward.grads", f"expected one name per forward output ({len(outputs)})", grads)
    for n, g in enumerate(grads):
        check_identifier(path, f"backward.grads[{n}]", g)
        if g in names or grads.index(g) != n:
            raise field_error(path, f"backward.grads[{n}]", "clashes with an input or another gradient name", g)
    for n, o in enumerate(outputs):
        if o.dtype not in ("float",) + FLOAT_DTYPES:
            raise field_error(path, f"backward.grads[{n}]", f"output {o.name} is not a float output", o.dtype)
    wrt = r.get("wrt", list)
    if not wrt:
        raise field_error(path, "backward.wrt", "expected at least one input to differentiate")
    by_name = {i.name: i for i in inputs}
    for n, w in enumerate(wrt):
        if w not in by_name:
            raise field_error(path, f"backward.wrt[{n}]", f"no such input; inputs are {sorted(names)}", w)
        if not by_name[w].is_float or wrt.index(w) != n:
            raise field_error(path, f"backward.wrt[{n}]", "expected a float input, named once", w)
    tolerances = {}
    for key, raw in r.table_of("tolerance", {}).items():
        where = f"backward.tolerance.{key}"
        if key not in FLOAT_DTYPES or not isinstance(raw, dict):
            raise field_error(path, where, f"expected a table named after one of {list(FLOAT_DTYPES)}", key)
        t = FieldReader(path, raw, where)
        t.unknown({"rtol", "atol"})
        pair = (t.get("rtol", (int, float)), t.get("atol", (int, float)))
        if not all(math.isfinite(v) and v >= 0 for v in pair):
            raise field_error(path, where, "rtol and atol must be finite numbers >= 0", list(pair))
        tolerances[key] = (float(pair[0]), float(pair[1]))
    return BackwardSpec(entry, tuple(grads), tuple(wrt), tolerances)


def grad_inputs(backward: BackwardSpec, outputs: tuple[OutputSpec, ...]) -> tuple[InputSpec, ...]:
    """The upstream gradients as extra inputs of the judged call (generated like inputs)."""
    return tuple(InputSpec(g, o.shape, o.dtype, role="tokens" if o.shape[:1] == (TOKENS_DIM,) else None)
                 for g, o in zip(backward.grads, outputs))


def grad_outputs(backward: BackwardSpec, inputs) -> tuple[OutputSpec, ...]:
    by_name = {i.name: i for i in inputs}
    return tuple(OutputSpec(by_name[w].shape, by_name[w].dtype, f"d{w}", of_input=w) for w in backward.wrt)


def is_batched(output: OutputSpec) -> bool:
    """A per-row output (checked for invariance) rather than a reduction over the batch."""
    return bool(output.shape) and output.shape[0] == BATCH_DIM


def check_backward_source(spec, funcs: Mapping[str, Any]) -> None:
    """The backward entry exists in the kernel file and takes inputs, then grads, first."""
    b = spec.backward
    if b.entry not in funcs:
        raise field_error(spec.spec_path, "backward.entry", f"no top-level function of that name in {spec.source.name}", b.entry)
    args = funcs[b.entry].args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    expected = [i.name for i in spec.inputs] + list(b.grads)
    if params[: len(expected)] != expected:
        raise field_error(spec.spec_path, "backward", f"{b.entry}{tuple(params)} must take {tuple(expected)} first")
    for key in spec.kwargs:
        if key not in params:
            raise field_error(spec.spec_path, f"kwargs.{key}", f"{b.entry} has no such parameter; it takes {params}")
