"""Inputs and launches of the ``sequences`` layout: packed sequences over a paged cache.

A case of this layout is ``m`` sequences.  Sequence ``i`` has a whole context of
``L_i`` positions of which the last ``q_i`` are its new tokens.  Every float
input's values are generated *per sequence and per position* (the queries of
all ``L_i`` positions, the cache rows of all ``L_i`` positions) from the case's
seed and the sequence's index, so a sequence carries the same data whatever
else shares the launch, which positions a launch asks for and where its cache
blocks sit.  That is what lets the harness re-run a token alone, inside other
chunks, or inside a full-sequence forward, and demand the same bits.

A *launch* is a list of chunks ``(sequence, begin, end)``: the new tokens are
positions ``begin..end-1`` and the context is ``end`` long.  Building one
(:func:`build_launch`) places each sequence's cache blocks at random physical
blocks (shuffled, not contiguous), fills every slot it does not own (other
blocks, the tail of a last block, spare blocks) with garbage that depends on
the launch, and pads the block table with spare columns pointing anywhere in
the cache.  A kernel that reads what it does not own, or follows the padding,
sees different garbage in different launches.

Lengths depend only on the case's shape (``m`` and dims), never its seed, so
every timing call of a workload cell does the same amount of work.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from tik_agent.spec.dims import dims_combinations, smallest_dims
from tik_agent.spec.fields import resolve_shape
from tik_agent.spec.input_layout import place
from tik_agent.spec.schema import KernelSpec

# Slots a sequence does not own hold this garbage, by launch: NaN in some
# launches, huge finite values in others (a kernel that reads them either
# turns NaN or changes its bits), so two placements of the same tokens differ
# exactly when the kernel reads outside what it owns.
GARBAGE = (float("nan"), 1.0, -0.5)  # NaN, then fractions of the dtype's largest finite value
SPARE_BLOCKS = 3
DATA_BLOCK = 64  # positions per independently seeded block of generated data
# Per-sequence probes (forward, decode, chunked prefill) cover at most this
# many sequences of a case: each costs launches under the interpreter.
PROBED_SEQUENCES = 3
CHUNK_PIECES = 3


@dataclass(frozen=True)
class Chunk:
    """New tokens ``begin..end-1`` of sequence ``seq``; its context is ``end`` long."""

    seq: int
    begin: int
    end: int

    @property
    def tokens(self) -> list[tuple[int, int]]:
        return [(self.seq, p) for p in range(self.begin, self.end)]


@dataclass(frozen=True)
class Launch:
    """One call of the entry: its chunks and the seed of its cache placement."""

    label: str
    chunks: tuple[Chunk, ...]
    placement: int = 0

    @property
    def tokens(self) -> list[tuple[int, int]]:
        return [t for c in self.chunks for t in c.tokens]


def _seed_of(*parts) -> int:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def lengths(spec: KernelSpec, m: int, dims: Mapping[str, int], uniform: bool = False) -> list[tuple[int, int]]:
    """(context length, new tokens) per sequence, a function of the shape only.

    ``uniform``: every sequence has the context ``L`` and ``min(Q, L)`` new tokens, so
    that the sizes a launcher sees (tokens, block-table width, cache blocks) follow
    the shape in a plain way (:func:`survey_sizes`): the configuration survey's points.

    The first sequence has the whole context ``L`` (a long-context decode in
    every mix); the others' are drawn from [ceil(L/2), L].  With ``Q == 1`` every sequence
    decodes one token; with ``Q >= L`` every sequence is prefilled whole (a
    prefill or a training forward); in between the sequences cycle through
    decode, a chunk of 2..Q new tokens and a whole prefill, so one launch mixes
    all three the way a serving engine's batches do.
    """
    import torch

    seq = spec.sequences
    top, chunk = dims[seq.context], dims[seq.chunk]
    if uniform:
        return [(top, min(chunk, top))] * m
    gen = torch.Generator().manual_seed(_seed_of("lengths", m, sorted(dims.items())))
    out = []
    for i in range(m):
        length = top if i == 0 else int(torch.randint((top + 1) // 2, top + 1, (1,), generator=gen))
        if chunk == 1:
            new = 1
        elif chunk >= top:
            new = length
        else:
            kind = i % 3
            new = 1 if kind == 0 else length if kind == 2 else int(torch.randint(2, chunk + 1, (1,), generator=gen))
        out.append((length, min(new, length)))
    return out


def full_launch(spec: KernelSpec, m: int, dims: Mapping[str, int], uniform: bool = False) -> Launch:
    return Launch("full", tuple(Chunk(i, length - new, length)
                                for i, (length, new) in enumerate(lengths(spec, m, dims, uniform))))


def case_launch(spec: KernelSpec, case) -> Launch:
    """The full launch of ``case``: the one parity is judged on."""
    return full_launch(spec, case.m, case.dims, case.uniform)


# The configuration survey's own sizes of a uniform launch, beside the spec's dims of a point:
# cache blocks past those the sequences own and :data:`SPARE_BLOCKS`, and block-table columns
# past a sequence's own and one (a parity case carries them as ``Case.spare`` and ``Case.pad``).
SPARE, PAD = "+spare", "+pad"


def survey_sizes(spec: KernelSpec, m: int, dims: Mapping[str, int]) -> dict[str, int]:
    """What a launcher sees of the uniform full launch of ``m`` sequences at ``dims``
    (:func:`placement` of launch 0): new tokens, block-table width and cache blocks."""
    seq = spec.sequences
    top, page = dims[seq.context], dims[seq.page]
    owned = -(-top // page)
    return {"tokens": m * min(dims[seq.chunk], top), "width": owned + 1 + int(dims.get(PAD, 0)),
            "blocks": m * owned + SPARE_BLOCKS + int(dims.get(SPARE, 0))}


def positions(spec: KernelSpec, case, seq: int, inp, begin: int, end: int):
    """One float input's values at positions begin..end-1 of a sequence, in the case's dtype.

    Generated in blocks of ``DATA_BLOCK`` positions, each from its own seed, so
    a decode step of a long context draws only the blocks it reads.
    """
    import torch

    from tik_agent.spec.regimes import apply_regime, inject_special

    tail = resolve_shape(inp.shape[2 if inp.role == "cache" else 1:], 1, case.dims)
    parts = []
    for block in range(begin // DATA_BLOCK, -(-end // DATA_BLOCK)):
        gen = torch.Generator().manual_seed(_seed_of("data", case.id, case.seed, seq, inp.name, block))
        base = torch.randn((DATA_BLOCK, *tail), generator=gen, dtype=torch.float32)
        t = apply_regime(base, case.regime, case.dtype, gen).to(getattr(torch, case.dtype))
        parts.append(inject_special(t, gen) if case.regime == "special" else t)
    first = begin // DATA_BLOCK * DATA_BLOCK
    return torch.cat(parts)[begin - first: end - first]


@dataclass(frozen=True)
class Placement:
    """Where a launch's cache blocks sit: ``blocks[i]`` are chunk i's physical blocks in order."""

    num_blocks: int
    table: object                 # (chunks, width) int64 block table, spare columns included
    blocks: tuple[object, ...]    # per chunk, its owned physical blocks (int64)


def placement(spec: KernelSpec, case, launch: Launch) -> Placement:
    """The block placement of one launch: a function of the case and the launch only."""
    import torch

    page = case.dims[spec.sequences.page]
    gen = torch.Generator().manual_seed(_seed_of("placement", case.id, case.seed, launch.placement))
    owned = [-(-c.end // page) for c in launch.chunks]
    # a uniform case's full launch: the spare blocks and columns the survey's point had
    spare, pad = (case.spare, case.pad) if case.uniform and launch.label == "full" else (0, 0)
    num_blocks = sum(owned) + SPARE_BLOCKS + launch.placement % 3 + spare
    physical = torch.randperm(num_blocks, generator=gen)
    # Spare columns, and every column past a sequence's own, point anywhere.
    width = max(owned) + 1 + launch.placement % 2 + pad
    table = torch.randint(0, num_blocks, (len(launch.chunks), width), generator=gen, dtype=torch.int64)
    blocks, taken = [], 0
    for row, n in enumerate(owned):
        blocks.append(physical[taken: taken + n])
        taken += n
        table[row, :n] = blocks[-1]
    return Placement(num_blocks, table, tuple(blocks))


def owned_slots(spec: KernelSpec, case, launch: Launch, where: Placement) -> list:
    """Per chunk, the flat cache slot (block * page + offset) of each of its positions 0..end-1."""
    import torch

    page = case.dims[spec.sequences.page]
    out = []
    for chunk, blocks in zip(launch.chunks, where.blocks):
        slots = torch.arange(chunk.end)
        out.append(blocks[slots // page] * page + slots % page)
    return out


def build_launch(spec: KernelSpec, case, launch: Launch, device: str = "cpu") -> list:
    """The judged call's positional inputs for one launch of ``case`` (with a backward
    entry, the upstream gradients follow the inputs, generated per token like them)."""
    import torch

    page = case.dims[spec.sequences.page]
    dtype = getattr(torch, case.dtype)
    where = placement(spec, case, launch)
    garbage = GARBAGE[launch.placement % len(GARBAGE)]
    if not math.isnan(garbage):
        garbage *= torch.finfo(dtype).max
    caches = {i.name: torch.full((where.num_blocks, page, *resolve_shape(i.shape[2:], 1, case.dims)), garbage, dtype=dtype)
              for i in spec.inputs if i.role == "cache"}
    for chunk, blocks in zip(launch.chunks, where.blocks):
        slots = torch.arange(chunk.end)
        for inp in spec.inputs:
            if inp.role == "cache":
                caches[inp.name][blocks[slots // page], slots % page] = positions(spec, case, chunk.seq, inp, 0, chunk.end)
    counts = torch.tensor([0] + [c.end - c.begin for c in launch.chunks], dtype=torch.int64)
    index = {
        "cu_seqlens": torch.cumsum(counts, 0),
        "seq_lens": torch.tensor([c.end for c in launch.chunks], dtype=torch.int64),
        "block_table": where.table,
    }
    out = []
    for inp in spec.checked_inputs:
        if inp.role == "cache":
            t = caches[inp.name]
        elif inp.is_float:
            t = torch.cat([positions(spec, case, c.seq, inp, c.begin, c.end) for c in launch.chunks])
        else:
            t = index[inp.role].to(getattr(torch, inp.dtype))
        out.append(place(spec, case, inp.name, t.to(device)))
    return out


def lengths_of(spec: KernelSpec, case) -> list[tuple[int, int]]:
    return lengths(spec, case.m, case.dims, case.uniform)


def token_count(spec: KernelSpec, case) -> int:
    return sum(new for _, new in lengths_of(spec, case))


def probe_launches(spec: KernelSpec, case) -> list[Launch]:
    """The launches an invariance case runs besides the full one, in judging order.

    Every token of a probe either also appears in an earlier launch (its bits
    must match there) or is first seen here (the forward registers the
    positions the full launch did not ask for).
    """
    import torch

    full = case_launch(spec, case)
    m = len(full.chunks)
    gen = torch.Generator().manual_seed(_seed_of("probes", case.id, case.seed))
    out = [Launch(f"alone:{c.seq}", (c,), placement=1 + c.seq) for c in full.chunks] if m > 1 else []
    for k in range(case.subbatches if m > 1 else 0):
        size = int(torch.randint(1, m, (1,), generator=gen))
        picked = torch.randperm(m, generator=gen)[:size]
        out.append(Launch(f"sub:{k}", tuple(full.chunks[int(i)] for i in picked), placement=2 + k))
    out.append(Launch("placement", full.chunks, placement=4))
    probed = [(i, length) for i, (length, _) in enumerate(lengths_of(spec, case))][:PROBED_SEQUENCES]
    out.append(Launch("forward", tuple(Chunk(i, 0, length) for i, length in probed), placement=5))
    # The last token of every probed sequence, decoded together: long contexts.
    out.append(Launch("decodes", tuple(Chunk(i, length - 1, length) for i, length in probed), placement=6))
    for i, length in probed:
        p = int(torch.randint(0, length, (1,), generator=gen))
        out.append(Launch(f"decode:{i}:{p}", (Chunk(i, p, p + 1),), placement=7 + i))
    pieces = []
    for i, length in probed:
        cuts = sorted(int(c) for c in torch.randperm(max(length - 1, 1), generator=gen)[: CHUNK_PIECES - 1] + 1)
        bounds = [0] + [c for c in cuts if 0 < c < length] + [length]
        pieces.append([Chunk(i, a, b) for a, b in zip(bounds, bounds[1:])])
    for k in range(max(len(p) for p in pieces)):
        chunks = tuple(p[k] for p in pieces if k < len(p))
        out.append(Launch(f"chunks:{k}", chunks, placement=9 + k))
    return out


def describe(launch: Launch) -> str:
    """A launch in words, for failure messages."""
    kind, _, rest = launch.label.partition(":")
    seqs = [c.seq for c in launch.chunks]
    if kind == "alone":
        return f"sequence {rest} alone"
    if kind == "sub":
        return f"sub-batch of sequences {seqs}"
    if kind == "placement":
        return "the same batch in other cache blocks (other garbage, wider block table)"
    if kind == "forward":
        return f"full-sequence forward of sequences {seqs}"
    if kind == "decodes":
        return f"the last tokens of sequences {seqs} decoded together"
    if kind == "decode":
        seq, pos = rest.split(":")
        return f"position {pos} of sequence {seq} decoded alone"
    if kind == "chunks":
        spans = [f"{c.seq}:[{c.begin},{c.end})" for c in launch.chunks]
        return f"chunked-prefill piece {rest} ({', '.join(spans)})"
    return "the full batch"


def hidden_dims(spec: KernelSpec, dims: Mapping[str, int]) -> dict[str, int]:
    """Held-out shapes: unseen context, chunk and page sizes over published head dims."""
    seq = spec.sequences
    out = dict(dims)
    for name in (seq.context, seq.chunk, seq.page):
        values = spec.dims[name]
        lo, hi = min(values), max(values)
        out[name] = ((lo + hi) // 2) | 1 if hi - lo > 2 else hi + 13
    return out


def make_inputs(spec: KernelSpec, case, device: str = "cpu") -> list:
    """The inputs of a case's full launch (what parity with the seed is judged on)."""
    return build_launch(spec, case, case_launch(spec, case), device)


def edge_dims(spec: KernelSpec, spans: Mapping, device: str) -> list[dict[str, int]]:
    """The domain's edges in this layout: heads at the grid's smallest combination but for the
    head counts' extremes; context, chunk and page each at their smallest, then at the
    largest ``device`` judges."""
    seq = spec.sequences
    low = {name: int(s.values[0] if s.values else s.low) for name, s in spans.items()}
    heads = smallest_dims(spec)
    base = {**heads, seq.context: low[seq.context], seq.chunk: low[seq.chunk], seq.page: low[seq.page]}
    top = {name: int(s.values[-1] if s.values else s.judged_high(device)) for name, s in spans.items()}
    out = [base, {**base, seq.context: top[seq.context], seq.chunk: 1}]   # a long decode
    short = min(top[seq.context], max(low[seq.context], top[seq.page] + 1))
    out.append({**base, seq.context: short, seq.chunk: top[seq.chunk]})   # a whole prefill
    out.append({**base, seq.context: short, seq.page: top[seq.page]})     # the largest page
    fitted = [_fit_ratios(spec, d) for d in out]
    for name, s in spans.items():  # head counts and head dims, each at its ends
        if name in (seq.context, seq.chunk, seq.page):
            continue
        for value in (s.values or (s.low, s.high)):
            fitted.append(_fit_ratios(spec, {**base, name: int(value)}, pinned=name))
    return [d for d in fitted if d is not None]


def _fit_ratios(spec: KernelSpec, dims: dict[str, int], pinned: str | None = None) -> dict[str, int] | None:
    """``dims`` with each ratio of the domain kept, or None when none can be: the other
    dimension of a ratio than ``pinned`` moves, to the smallest size that fits."""
    out = dict(dims)
    for name, (over, allowed) in spec.domain.ratios.items():
        if spec.domain.fits({name: out[name], over: out[over]}):
            continue
        if pinned == over:
            options = [(name, out[over] * r) for r in allowed]
        else:
            options = [(over, out[name] // r) for r in reversed(allowed) if out[name] % r == 0]
        options = [(n, v) for n, v in options if v in spec.domain.dims[n]]
        if not options:
            return None
        out[options[0][0]] = options[0][1]
    return out if spec.domain.fits(out) else None


def drawn_dims(spec: KernelSpec, rng, near) -> dict[str, int]:
    """A drawn case's dims: heads from the grid, context, chunk and page near powers of two."""
    seq = spec.sequences
    spans = spec.domain.dims
    dims = dict(rng.choice(dims_combinations(spec)))
    dims[seq.context] = near(spans[seq.context], rng, DRAWN_CONTEXT_CAP)
    dims[seq.chunk] = near(spans[seq.chunk], rng, dims[seq.context])
    dims[seq.page] = near(spans[seq.page], rng, DRAWN_PAGE_CAP)
    return dims


DRAWN_CONTEXT_CAP = 64
DRAWN_PAGE_CAP = 32
