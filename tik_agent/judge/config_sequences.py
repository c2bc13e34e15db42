"""The configuration survey's axes in the ``sequences`` layout (attention).

A launcher of this layout sees no lengths (it may not read an element): it sees the
number of sequences, the packed new tokens, the block table's width, the cache's
blocks and page size, and the head counts.  Each survey point is the *uniform* full
launch of ``m`` sequences at some dims (every sequence with context ``L`` and
``min(Q, L)`` new tokens: :func:`tik_agent.spec.sequences.survey_sizes`), which a
parity case with ``uniform`` rebuilds exactly, so a change the survey finds is judged
at the very launch that showed it.

One axis per dimension of the domain that is a range, swept as the rows layout's are
(:mod:`tik_agent.judge.configs`), with the others at values drawn from the spec's
grid.  Some axes carry another dimension with them (``tied``), so that what moves
along the axis is one size a launcher sees and not several at once:

* the chunk ``Q`` takes the context up to it (``L = max(L, Q)``): every token is new,
  and the tokens grow with ``Q`` alone;
* the page size ``P`` takes the context with it (``L = k * P``): the block table's
  width and the cache's blocks stay fixed while the page grows;
* the divisor of a ratio (``Hkv`` under ``Hq = r * Hkv``) takes the other with it, once
  at each ratio allowed (an axis of its own per ratio, keyed ``Hkv (Hq = 4 Hkv)``), so
  every pair of head counts in the domain is on an axis; the ratio's own dimension
  (``Hq``) is swept over its allowed ratios, its divisor at its smallest; each of
  these axes of three sizes or more, MHA's (the smallest ratio's) included, has a twin
  over one sequence of many tokens (``twin``), whose changes are judged where the short
  axis does not show them, and each twin a bridge (``bridge``): the chunk swept at the
  twin's first head counts and context, from one new token to the twin's chunk;
* the context's and the chunk's sweeps hold one sequence, so that the packed tokens
  and the cache's blocks take every count along them.

Every point has spare cache blocks and block-table columns drawn from the secret
(``+spare``, ``+pad``: a parity case carries them), and two more axes sweep each.

Points of combined sizes are drawn beside the axes (:mod:`tik_agent.judge.joint_sequences`):
a kernel variant one launches and no axis launched is judged there.  What stays open:
a change of numbers alone at combined sizes (nothing predicts a point's numbers here,
as the rows layout's joint analysis does; no far points either), and launches of drawn
lengths, which the grid's cases and the invariance probes judge where they land.
"""

from __future__ import annotations

import random

from tik_agent.judge.survey_axes import EXHAUSTIVE, axis_key, beyond, log_uniform, point_of
from tik_agent.spec.cases import MAX_BATCH, largest_batch
from tik_agent.spec.fields import BATCH_DIM
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.sequences import PAD, SPARE

# Sequences of a sweep along another dimension (drawn per evaluation): each is a parity
# case's worth of launches under the interpreter.
SURVEY_SEQUENCES = (2, 4)
# Changes one evaluation judges over the axes.  The seed's own launch changes at 8 points
# (tik_agent 2026-12-06): the grid's and the block table's first steps along most axes, and
# the two KV heads of the largest ratio's short axis.
BUDGET = 20
# Batches surveyed one by one: past the few a CPU evaluation judges (a change there is a
# refusal), so that a grid of ``T // BLOCK_Q + M`` is told from a line before the samples.
BATCH_PREDICTED = 64
# Spare cache blocks and block-table columns: drawn for every point up to these, swept one by
# one up to GEOMETRY_JUDGED and sampled past it (an engine's cache holds many blocks no
# sequence of the batch owns, and its table may be much wider than a batch needs).  A change
# past GEOMETRY_JUDGED is refused, as past any axis's judged end: its case would be a cache
# of up to a million blocks.
SPARE_DRAWN, PAD_DRAWN = 64, 16
# The largest context and page, and chunk, a grouped axis's geometry draws: its judged cases
# hold up to 128 query heads, and an attention case under the interpreter costs per head,
# token and tile (one at Hq = 128 over 20 tokens and 3 tiles took 15 s).
GROUPED_SIZE, GROUPED_CHUNK, GROUPED_SHORT = 32, 16, 8
# Beside each grouped axis of three sizes or more, a twin over one sequence of many new tokens
# (from GROUPED_LONG_FROM, past the most the draws above reach, to the device's GROUPED_LONG):
# a switch on head counts and the packed tokens (``T > 64``) or one sequence is seen there.
# Its changes that its twin shows at the same size, the same way, are judged on the twin's
# cheaper geometry; the others at its own (a boundary case of 32 query heads, one sequence of
# 76 new tokens in a context of 103, took 22 s in-process under the interpreter).
GROUPED_LONG_FROM, GROUPED_LONG = 65, {"cpu": 128, "cuda": 1024}
GEOMETRY_JUDGED, GEOMETRY_TOP = 128, 1 << 20
# A bridge's chunks surveyed one by one (every one on the CPU, whose twins stop at 128).
BRIDGE_EXHAUSTIVE = 256


def _grouped(axis: dict, spec: KernelSpec, device: str, rng: random.Random) -> list[dict]:
    """The divisor of a ratio (the KV heads) swept again at each other allowed ratio, the
    other dimension (the query heads) carried at that multiple: every pair of head counts
    in the domain is on one axis, grouped-query attention with several KV heads (Llama's
    32 over 8) included.  Each of these axes has a geometry of its own drawn from the
    secret (sequences, context, chunk, page, head dim), so that a switch on head counts
    *and* another size (``Hq == 32 and Hkv == 8 and page != 8``) is not held away from
    every axis by one fixed geometry: it is seen where an axis's draw meets it.  The
    draws stop at 64 tokens; an axis of three sizes or more has a twin over one sequence
    of more (:func:`_long_geometry`), where ``... and T > 64`` and ``... and num_seqs == 1``
    are seen (docs/security.md, section 7)."""
    domain, name = spec.domain, axis["dim"]
    other, allowed = next((n, a) for n, (o, a) in domain.ratios.items() if o == name)
    # the twins' listed dimensions (the head dim): the spec geometry's, drawn, for all of them and
    # their bridges, so that a bridge's change the chunk's own axis shows the same way is judged there
    out, listed = [], {n: axis["dims"][n] for n, span in domain.dims.items() if span.values}
    for ratio in sorted(allowed)[1:]:
        high = min(int(domain.dims[name].judged_high(device)), int(domain.dims[other].judged_high(device)) // ratio)
        top = min(int(domain.dims[name].high), int(domain.dims[other].high) // ratio)
        low = int(domain.dims[name].low)
        if high < low:
            continue
        exhaustive = min(high, EXHAUSTIVE, top)
        values = list(range(low, exhaustive + 1)) + beyond(exhaustive, top, rng)
        # An axis of two sizes (the largest ratio's) cannot fit a rule to a number that moves:
        # both its points are judged in every evaluation, so its geometry is drawn small.
        m, dims = _geometry(spec, device, rng, axis, GROUPED_SHORT if len(values) < 3 else GROUPED_SIZE)
        short = {**axis, "key": f"{name} ({other} = {ratio} {name})", "m": m, "dims": dims, "values": values,
                 "tied": {other: ["times", ratio]}, "exhaustive": exhaustive, "high": high, "top": top}
        out.append(short)
        long = _long_geometry(spec, device, rng, dims) if len(values) >= 3 else None
        if long is not None:
            out += _twin(spec, device, rng, short, long, listed)
    # MHA (the axis of the smallest ratio, at the spec's geometry) gets a twin too, of a
    # short geometry drawn as the others' (its page and context), and after them: the draws
    # above do not move with it
    if len(axis["values"]) >= 3:
        long = _long_geometry(spec, device, rng, _geometry(spec, device, rng, axis, GROUPED_SIZE)[1])
        if long is not None:
            out += _twin(spec, device, rng, axis, long, listed)
    return out


def _twin(spec: KernelSpec, device: str, rng: random.Random, short: dict, long: dict, listed: dict) -> list[dict]:
    """A short axis's long twin, and the twin's bridge: the chunk swept over one sequence at
    the twin's first head counts, from one new token past the twin's chunk.  A switch that
    fires along the whole twin and changes only a number the kernel reads (``bump =
    int(T > 64 and Hq == 4 * Hkv)``, a run-time argument) shows no change along the twin
    nor at its start; along the bridge it changes where the tokens cross (a red team's,
    judged 2 of 6 without it)."""
    names, key = spec.sequences, axis_key(short)
    twin = {**short, "key": f"{key} one long sequence", "m": 1, "dims": {**long, **listed}, "twin": key}
    _, at = point_of(twin, min(twin["values"]))  # the twin's first head counts and context
    most = int(at[names.chunk])
    every = min(most, BRIDGE_EXHAUSTIVE)  # on a GPU's longer twins, sampled past it as any axis
    bridge = {**short, "dim": names.chunk, "key": f"{names.chunk} ({key} at its first size)", "m": 1, "dims": at,
              "values": list(range(1, every + 1)) + beyond(every, most, rng), "tied": {names.context: ["at_least", 1]},
              "exhaustive": every, "high": int(spec.domain.dims[names.chunk].judged_high(device)), "top": most,
              "bridge": key}
    return [twin, bridge]


def _long_geometry(spec: KernelSpec, device: str, rng: random.Random, dims: dict) -> dict | None:
    """One sequence's sizes for a grouped axis's long twin: its chunk drawn log-uniform from
    GROUPED_LONG_FROM to the device's GROUPED_LONG, the context a few positions more, the
    page of the short geometry."""
    names, out = spec.sequences, dict(dims)
    chunk, context = spec.domain.dims[names.chunk], spec.domain.dims[names.context]
    most = min(GROUPED_LONG.get(device, GROUPED_LONG["cuda"]), int(chunk.judged_high(device)),
               int(context.judged_high(device)))
    if most < GROUPED_LONG_FROM:
        return None
    out[names.chunk] = log_uniform(rng, GROUPED_LONG_FROM, most)
    out[names.context] = min(out[names.chunk] + rng.randint(0, GROUPED_SIZE), int(context.judged_high(device)))
    return out


def _geometry(spec: KernelSpec, device: str, rng: random.Random, axis: dict, size: int) -> tuple[int, dict]:
    """Sequences and the other sizes of one grouped axis, drawn log-uniform within what the
    device judges and at most ``size`` (the chunk at most GROUPED_CHUNK too)."""
    names, dims = spec.sequences, dict(axis["dims"])
    for name in (names.context, names.chunk, names.page):
        span, most = spec.domain.dims[name], min(size, GROUPED_CHUNK) if name == names.chunk else size
        dims[name] = log_uniform(rng, int(span.low), min(most, int(span.judged_high(device))))
    for name, span in spec.domain.dims.items():
        if span.values:
            dims[name] = int(rng.choice(list(span.values)))
    return rng.randint(1, SURVEY_SEQUENCES[1] if size > GROUPED_SHORT else 2), dims


def survey_plan(spec: KernelSpec, device: str, rng: random.Random, dtype: str) -> list[dict]:
    """One axis per range of the domain, the sequences first."""
    domain, names = spec.domain, spec.sequences
    base = {name: int(rng.choice(values)) for name, values in sorted(spec.dims.items())}
    # The cache geometry of every point, drawn: a launcher must not tell a survey's launch
    # (or its boundary case) from an engine's by the blocks or columns it does not own.
    base.update({SPARE: rng.randint(0, SPARE_DRAWN), PAD: rng.randint(0, PAD_DRAWN)})
    m = rng.randint(*SURVEY_SEQUENCES)
    over = {o: (name, allowed) for name, (o, allowed) in domain.ratios.items()}
    axes = []
    for name, span in sorted(domain.dims.items(), key=lambda kv: kv[0] != BATCH_DIM):
        if span.values:  # a list of values: the edge cases judge each one
            continue
        low, high, top = int(span.low), int(span.judged_high(device)), int(span.high)
        tied: dict[str, list] = {}
        if name == BATCH_DIM:
            # On the CPU a batch entry is a whole sequence: as many as the grid's and the
            # workload's largest batch and one more (literal and drawn sizes stop there too).
            high = largest_batch(spec, device) + 1 if device == "cpu" else min(high, MAX_BATCH.get(device, high))
        elif name in domain.ratios:  # over its ratios, the divisor at its smallest (the cheapest cases)
            divisor, allowed = domain.ratios[name]
            least = int(domain.dims[divisor].low)
            tied[divisor] = ["fixed", least]
            values = sorted({least * r for r in allowed} & set(range(low, high + 1)))
            top = high
        else:
            if name == names.chunk:
                tied[names.context] = ["at_least", 1]
            elif name == names.page:
                context = domain.dims[names.context]
                blocks = max(1, min(base[names.context] // base[name], int(context.judged_high(device)) // high))
                tied[names.context] = ["times", blocks]
                top = min(top, int(context.high) // blocks)
            elif name in over:  # the other at the smallest ratio (1: MHA), so every count is surveyed
                other, allowed = over[name]
                ratio = min(allowed)
                tied[other] = ["times", ratio]
                high = min(high, int(domain.dims[other].judged_high(device)) // ratio)
                top = min(top, int(domain.dims[other].high) // ratio)
        if name in domain.ratios:
            exhaustive = high
        else:  # every size up to EXHAUSTIVE, then sampled up to the domain's end (as the rows layout)
            # (the batch on the CPU: past the few judged, enough sizes to tell a floor from a line)
            exhaustive = min(max(high, BATCH_PREDICTED) if name == BATCH_DIM else high, EXHAUSTIVE, top)
            values = list(range(low, exhaustive + 1)) + beyond(exhaustive, top, rng)
        if not values:
            continue
        # The context's and the chunk's sweeps hold one sequence, so that the packed tokens
        # and the cache's blocks take every count along them (with m sequences, only multiples of m).
        axis = {"dim": name, "m": 1 if name in (names.context, names.chunk) else m, "dims": base, "dtype": dtype,
                "values": values, "tied": tied, "exhaustive": exhaustive, "high": high, "top": top,
                "device": device, "budget": BUDGET}
        axes.append(axis)
        if name in over:
            axes += _grouped(axis, spec, device, rng)
    # The cache's blocks and the block table's width, each on its own.
    for name, high in ((SPARE, GEOMETRY_JUDGED), (PAD, GEOMETRY_JUDGED)):
        values = list(range(0, high + 1)) + beyond(high, GEOMETRY_TOP, rng)
        axes.append({"dim": name, "m": m, "dims": base, "dtype": dtype, "values": values, "tied": {},
                     "exhaustive": high, "high": high, "top": GEOMETRY_TOP, "device": device,
                     "budget": BUDGET})
    return axes

