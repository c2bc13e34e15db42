"""How a case's batch is laid out in the entry's inputs: plain rows, or packed sequences.

``rows`` (the default): the batch dimension ``M`` leads every batched input
and the output; a row alone or a sub-batch is a slice along it.

``sequences`` (attention): ``M`` is the number of sequences, packed over a
paged cache.  Every input has a ``role``: ``tokens`` (float, shape
``["T", ...]``: one row per new token, packed), ``cache`` (float, shape
``["BLOCKS", page, ...]``: the paged cache), and the integer index inputs
``cu_seqlens`` ((M + 1,) offsets of each sequence's new tokens), ``seq_lens``
((M,) whole context lengths) and ``block_table`` ((M, max_blocks) physical
block of each logical block), whose shapes follow from their role and are not
given.  ``T`` and ``BLOCKS`` are derived per case.  The ``[sequences]`` table
names the dims that set the sequences: ``context`` (the longest context),
``chunk`` (new tokens per sequence: 1 decodes, ``>= context`` prefills whole,
in between mixes decode, chunks and prefill) and ``page`` (the cache block
size).  See :mod:`tik_agent.spec.sequences` for how lengths and data follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tik_agent.spec.fields import BATCH_DIM, INT_DTYPES, FieldReader, field_error

LAYOUTS = ("rows", "sequences")
TOKENS_DIM, BLOCKS_DIM = "T", "BLOCKS"
FLOAT_ROLES = ("tokens", "cache")
INDEX_ROLES = ("cu_seqlens", "seq_lens", "block_table")
ROLES = FLOAT_ROLES + INDEX_ROLES


@dataclass(frozen=True)
class SequenceSpec:
    """Which dims set the sequences of a ``sequences`` layout case."""

    context: str
    chunk: str
    page: str


def derived_dims(layout: str) -> tuple[str, ...]:
    return (TOKENS_DIM, BLOCKS_DIM) if layout == "sequences" else ()


def parse_layout(path: Path, kernel: FieldReader) -> str:
    layout = kernel.get("layout", str, "rows")
    if layout not in LAYOUTS:
        raise field_error(path, "kernel.layout", f"unknown layout; expected one of {list(LAYOUTS)}", layout)
    return layout


def parse_sequences(path: Path, table: Mapping[str, Any] | None, layout: str, dims: Mapping[str, Any]) -> SequenceSpec | None:
    if layout != "sequences":
        if table is not None:
            raise field_error(path, "sequences", "only a spec with kernel.layout = \"sequences\" takes this table")
        return None
    if table is None:
        raise field_error(path, "sequences", "missing: the sequences layout names its context, chunk and page dims")
    r = FieldReader(path, table, "sequences")
    r.unknown({"context", "chunk", "page"})
    names = {}
    for key in ("context", "chunk", "page"):
        value = r.get(key, str)
        if value not in dims:
            raise field_error(path, f"sequences.{key}", "unknown dimension; declare it under [dims]", value)
        names[key] = value
    return SequenceSpec(**names)


def check_role(path: Path, where: str, layout: str, role: Any, dtype: str, shape: Any) -> str | None:
    """The role of one input, consistent with its dtype and shape (``shape`` None when not given)."""
    if layout != "sequences":
        if role is not None:
            raise field_error(path, f"{where}.role", "roles belong to the sequences layout", role)
        return None
    if role not in ROLES:
        raise field_error(path, f"{where}.role", f"the sequences layout needs a role, one of {list(ROLES)}", role)
    if role in INDEX_ROLES:
        if dtype not in INT_DTYPES:
            raise field_error(path, f"{where}.dtype", f"an index input ({role}) is an integer tensor", dtype)
        if shape is not None:
            raise field_error(path, f"{where}.shape", f"the shape of a {role} input follows from its role; leave it out", shape)
        return role
    if dtype in INT_DTYPES:
        raise field_error(path, f"{where}.dtype", f"a {role} input holds floats", dtype)
    lead = TOKENS_DIM if role == "tokens" else BLOCKS_DIM
    if not shape or shape[0] != lead:
        raise field_error(path, f"{where}.shape", f"a {role} input's first dimension is {lead!r}", shape)
    return role


def check_sequence_spec(path: Path, inputs, outputs, seq: SequenceSpec | None) -> None:
    """Every index role once, at least one tokens input, caches paged by the page dim."""
    if seq is None:
        return
    roles = [i.role for i in inputs]
    for role in INDEX_ROLES + ("tokens",):
        if role not in roles:
            raise field_error(path, "inputs", f"the sequences layout needs an input with role {role!r}")
    for role in INDEX_ROLES:
        if roles.count(role) > 1:
            raise field_error(path, "inputs", f"more than one input with role {role!r}")
    for n, inp in enumerate(inputs):
        if inp.role == "cache" and (len(inp.shape) < 2 or inp.shape[1] != seq.page):
            raise field_error(path, f"inputs[{n}].shape", f"a cache's second dimension is the page dim {seq.page!r}", list(inp.shape))
        if BATCH_DIM in inp.shape:
            raise field_error(path, f"inputs[{n}].shape",
                              f"in the sequences layout {BATCH_DIM!r} counts sequences and is no dimension", list(inp.shape))
    for n, out in enumerate(outputs):
        if not out.shape or out.shape[0] != TOKENS_DIM:
            raise field_error(path, f"outputs[{n}].shape", f"an output's first dimension is {TOKENS_DIM!r}", list(out.shape))
