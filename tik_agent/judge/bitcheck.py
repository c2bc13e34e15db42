"""The comparisons every judged check is made of: one output's declared shape and dtype,
and raw-bit equality of outputs.  A failure raises :class:`CaseFailure` naming the
:class:`Check`; :mod:`tik_agent.judge.parity` (the row layout) and
:mod:`tik_agent.judge.sequence_checks` (the sequences layout) both judge with these.
"""

from __future__ import annotations

from enum import Enum

from tik_agent.bits import Mismatch, first_mismatch, meta_difference
from tik_agent.sandbox.wire import as_outputs
from tik_agent.spec.cases import Case
from tik_agent.spec.fields import resolve_shape
from tik_agent.spec.layouts import BLOCKS_DIM, TOKENS_DIM
from tik_agent.spec.outputs import OutputSpec
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.sequences import case_launch, placement, token_count


class Check(str, Enum):
    OUTPUT = "output"            # a tensor of the declared shape and dtype came back
    LAUNCH = "launch"            # a Triton kernel from the kernel's own file ran
    INPUTS = "inputs"            # inputs are bit-identical after the call
    DETERMINISM = "determinism"  # two runs, same bits (also catches unwritten outputs)
    INVARIANCE = "invariance"    # rows alone and sub-batches match the full batch
    PARITY = "parity"            # same bits as the seed
    REFERENCE = "reference"      # close to the float64 reference (seed sanity)


class CaseFailure(Exception):
    """A case failed ``check``: the message a user sees and, for bits, the first mismatch."""

    def __init__(self, check: Check, message: str, mismatch: Mismatch | None = None):
        super().__init__(message)
        self.check, self.message, self.mismatch = check, message, mismatch


def expected_meta(spec: KernelSpec, case: Case, m: int, output: OutputSpec | None = None,
                  tokens: int | None = None, blocks: int | None = None) -> tuple[tuple[int, ...], str]:
    """Shape and dtype of an output for ``m`` rows (or, in the sequences layout, ``tokens``
    tokens over ``blocks`` cache blocks; the full launch's when not given)."""
    output = output or spec.output
    dims = dict(case.dims)
    if spec.layout == "sequences":
        dims[TOKENS_DIM] = token_count(spec, case) if tokens is None else tokens
        if BLOCKS_DIM in output.shape:
            dims[BLOCKS_DIM] = (placement(spec, case, case_launch(spec, case)).num_blocks
                                if blocks is None else blocks)
    return resolve_shape(output.shape, m, dims), output.dtype_in(case)


def check_output(spec: KernelSpec, case: Case, out, m: int, what: str, tokens: int | None = None,
                 blocks: int | None = None) -> None:
    """``out`` is what :func:`expected_meta` declares: a tensor of that shape and dtype, or
    the tuple of them several outputs make; ``what`` names the call in the message."""
    import torch

    declared = spec.checked_outputs
    several = len(declared) > 1
    if several and not (isinstance(out, (tuple, list)) and len(out) == len(declared)):
        raise CaseFailure(Check.OUTPUT, f"{what}: returned {type(out).__name__}, expected a tuple of {len(declared)} "
                                        f"tensors ({', '.join(o.name for o in declared)})")
    for output, t in zip(declared, as_outputs(out)):
        name = f"{what}: output {output.name}" if several else what
        shape, dtype = expected_meta(spec, case, m, output, tokens, blocks)
        if not isinstance(t, torch.Tensor):
            raise CaseFailure(Check.OUTPUT, f"{name}: returned {type(t).__name__}, expected a tensor")
        if tuple(t.shape) != shape or t.dtype != getattr(torch, dtype):
            raise CaseFailure(Check.OUTPUT, f"{name}: got {tuple(t.shape)} {t.dtype}, expected {shape} torch.{dtype}")


def same_bits(check: Check, what: str, expected, actual, names: tuple[str, ...] = ()) -> None:
    """Raw-bit equality of one output, or of each of several (``names`` label them)."""
    expected, actual = as_outputs(expected), as_outputs(actual)
    if len(actual) != len(expected):
        raise CaseFailure(check, f"{what}: {len(actual)} outputs, expected {len(expected)}")
    for i, (e, a) in enumerate(zip(expected, actual)):
        label = f"{what}: output {names[i] if i < len(names) else i}" if len(expected) > 1 else what
        meta = meta_difference(e, a)
        if meta:
            raise CaseFailure(check, f"{label}: {meta}")
        mm = first_mismatch(e, a)
        if mm:
            raise CaseFailure(check, f"{label}: {mm.describe()}", mm)

