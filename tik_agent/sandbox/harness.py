"""Load a kernel file and run its entry over parity cases.

This is the part of evaluation that executes kernel code.  It runs inside a
sandbox worker for candidates, and in-process only for a seed the user asked
us to check.  It produces raw outputs; judging them is :mod:`tik_agent.judge.parity`'s
job, on the trusted side.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import logging
from pathlib import Path
from types import ModuleType
from typing import Callable

from tik_agent.bits import digest
from tik_agent.errors import SpecError
from tik_agent.sandbox import hostops, launches
from tik_agent.sandbox.poison import poisoned_allocations
from tik_agent.sandbox.sequence_runs import run_sequence_case
from tik_agent.sandbox.wire import CaseOutputs, as_outputs
from tik_agent.spec.backward import is_batched
from tik_agent.spec.cases import Case, SubBatch, case_kwargs, make_inputs, rows_alone, subbatches
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

_module_counter = itertools.count()


class KernelLoadError(Exception):
    """The kernel file failed to import or has no usable entry."""


def load_kernel(path: Path, role: str) -> ModuleType:
    """Import a kernel file under a private module name.

    Loaded from the file (not ``exec`` of a string) so that Triton's
    interpreter sees real source and does its AST rewrite; the module is not
    entered in ``sys.modules``, so other code cannot look it up by name.
    """
    name = f"_tik_{role}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:  # lineno is None for a file the parser cannot read at all (a NUL byte)
        where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
        raise KernelLoadError(f"{where}: syntax error: {exc.msg}") from None
    except Exception as exc:  # any import-time failure of user code is reported, not raised
        raise KernelLoadError(f"{path}: import failed: {type(exc).__name__}: {exc}") from None
    return module


def entry_of(module: ModuleType, spec: KernelSpec, path: Path) -> Callable:
    fn = getattr(module, spec.entry, None)
    if not callable(fn):
        raise KernelLoadError(f"{path}: defines no function {spec.entry!r} (the spec's entry)")
    params = list(inspect.signature(fn).parameters)
    expected = [i.name for i in spec.inputs] + list(spec.kwargs)
    if params[: len(expected)] != expected:
        raise KernelLoadError(f"{path}: {spec.entry}{tuple(params)} does not take {tuple(expected)} first")
    return fn


class TrainingStep:
    """Forward then backward, as one judged call: it takes the inputs followed by
    the upstream gradients and returns the outputs followed by the gradients."""

    def __init__(self, forward: Callable, backward: Callable, n_inputs: int):
        self.forward, self.backward, self.n_inputs = forward, backward, n_inputs

    def __call__(self, *args, **kwargs):
        inputs = args[: self.n_inputs]
        out = self.forward(*inputs, **kwargs)
        grads = self.backward(*args, **kwargs)
        return as_outputs(out) + as_outputs(grads)


def backward_of(module: ModuleType, spec: KernelSpec, path: Path) -> Callable:
    name = spec.backward.entry
    fn = getattr(module, name, None)
    if not callable(fn):
        raise KernelLoadError(f"{path}: defines no function {name!r} (the spec's backward entry)")
    params = list(inspect.signature(fn).parameters)
    expected = [i.name for i in spec.checked_inputs] + list(spec.kwargs)
    if params[: len(expected)] != expected:
        raise KernelLoadError(f"{path}: {name}{tuple(params)} does not take {tuple(expected)} first")
    return fn


def load_entry(path: Path, spec: KernelSpec, role: str,
               prepare: Callable[[ModuleType], None] | None = None) -> Callable:
    """The callable every judged call goes through: the entry, or with a backward
    entry a :class:`TrainingStep` of both (``prepare``: called on the module first)."""
    module = load_kernel(path, role)
    if prepare is not None:
        prepare(module)
    forward = entry_of(module, spec, path)
    if spec.backward is None:
        return forward
    return TrainingStep(forward, backward_of(module, spec, path), len(spec.inputs))


def load_seed_entry(spec: KernelSpec) -> Callable:
    """The seed's entry; a failure here is bad input (exit 2), not a rejection."""
    try:
        return load_entry(spec.source, spec, "seed")
    except KernelLoadError as exc:
        raise SpecError(str(exc)) from None


def guarded_call(entry: Callable, inputs: list, kwargs, which: int | None = 0):
    """Call an entry the way every judged call is made: the one place where the
    harness wraps untrusted code (poisoned allocations, the host-ops mode, a launch
    that raised failing the call, and whatever else must be active around each
    call), for parity cases, timed calls and survey calls alike (``which=None``:
    the survey, allocations not written).  Raises
    :class:`~tik_agent.sandbox.hostops.HostComputeError` when the call computed with
    torch outside a Triton launch, and :class:`~tik_agent.sandbox.launches.LaunchCaughtError`
    when a launch raised and the entry went on."""
    launches.install()  # idempotent; the host-ops mode relies on its launch exemption
    with poisoned_allocations(which), hostops.watching(unwritten=which is None), launches.judged():
        return entry(*inputs, **dict(kwargs))


class Runner:
    """Calls one entry on the inputs of a case, with poisoned free memory."""

    def __init__(self, entry: Callable, spec: KernelSpec, device: str):
        self.entry, self.spec, self.device = entry, spec, device

    def call(self, case: Case, inputs: list, which: int = 0):
        return guarded_call(self.entry, inputs, case_kwargs(self.spec, case), which)

    def run_case(self, case: Case) -> CaseOutputs:
        if self.spec.layout == "sequences":
            return run_sequence_case(self, case)
        inputs = make_inputs(self.spec, case, self.device)
        with launches.recording() as rec:
            full = self.call(case, inputs, 0)
            # A large case runs its full batch once: cost is per row, and parity
            # with the seed already rejects unwritten (poisoned) elements.
            again = None if case.runs_once else self.call(case, inputs, 1)
            rows = None
            subs = []
            if case.invariance:
                rows = self._rows_alone(case, inputs, full)
                for sub in subbatches(case):
                    subs.append((sub, self._sub_batch(case, inputs, sub)))
        return CaseOutputs(full, again, rows, subs, dict(rec), digest(inputs))

    def _select(self, inputs: list, pick) -> list:
        return [pick(t) if spec_in.batched else t for spec_in, t in zip(self.spec.checked_inputs, inputs)]

    def _rows_alone(self, case: Case, inputs: list, full):
        import torch

        # A reduction over the batch (dweight) has no rows to join: it is judged
        # against the seed at every batch size instead, and kept here as row 0's.  The
        # other rows' are dropped as each row finishes: a large case's rows alone would
        # otherwise hold one whole gradient per row (a 4096-row matmul step: 4096 dbs).
        batched = [is_batched(o) for o in self.spec.checked_outputs]
        outs = []
        for i in rows_alone(case):
            row_inputs = self._select(inputs, lambda t: t[i : i + 1].clone())
            out = self.call(case, row_inputs, i % 2)
            parts, multi = as_outputs(out), isinstance(out, (tuple, list))
            if not all(isinstance(t, torch.Tensor) for t in parts):
                return out
            outs.append(parts if not outs else tuple(t if b else None for t, b in zip(parts, batched)))
            del parts, out
        joined = tuple(torch.cat(parts, dim=0) if b else parts[0] for b, parts in zip(batched, zip(*outs)))
        return joined if multi else joined[0]

    def _sub_batch(self, case: Case, inputs: list, sub: SubBatch):
        import torch

        if sub.prefix:
            picked = self._select(inputs, lambda t: t[: len(sub.index)])
        else:
            index = torch.tensor(sub.index, dtype=torch.long, device=self.device)
            picked = self._select(inputs, lambda t: padded_rows(t.index_select(0, index)))
        return self.call(case, picked, 0)


# Elements added to each row of a shuffled sub-batch's inputs (see padded_rows).
ROW_PAD = 3


def padded_rows(t):
    """``t``'s values as a view of a wider buffer: each row (last dimension) is followed by
    ``ROW_PAD`` elements that are not part of it (NaN for floats), so its row stride is
    larger than its width.  The shuffled sub-batches get their inputs this way: what a
    caller passes is often such a view (a slice of a fused projection), and a kernel that
    takes the width for the row stride, or reads past a row's end, then differs from its
    own full batch.  1-D inputs are left as they are."""
    import torch

    if t.dim() < 2 or t.shape[-1] == 0:
        return t
    wide = torch.empty((*t.shape[:-1], t.shape[-1] + ROW_PAD), dtype=t.dtype, device=t.device)
    wide.fill_(float("nan") if t.is_floating_point() else 0)
    wide[..., : t.shape[-1]] = t
    return wide[..., : t.shape[-1]]
