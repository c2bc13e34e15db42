"""Invariance of the ``sequences`` layout: every launch agrees on every token it shares.

The plan of launches is rebuilt here from the case (a pure function), so the
candidate's worker only ships tensors.  Launches are judged in order: a token
first seen in a launch registers that launch's row for it (the full batch
first, then, for positions it did not ask for, the full-sequence forward);
every later row for the same token must hold the same bits.  That one rule
expresses all of attention's parity checks: a sequence alone or in other
company, another cache placement with other garbage and padding, a token
decoded alone against the same token in a prefill chunk and in a training
forward, and chunked prefill split anywhere.

With a backward entry the same rule holds for per-token gradients (``dq``).
A per-slot gradient (``dk_cache``) sums over the new tokens of the slot's own
sequence, so its key is the sequence's chunk: every launch that gives a
sequence the same chunk must give each of its slots the same bits, wherever
its blocks sit, and every slot no sequence owns must be zero.
"""

from __future__ import annotations

from tik_agent.judge.bitcheck import CaseFailure, Check, check_output, same_bits
from tik_agent.sandbox.wire import as_outputs
from tik_agent.spec.layouts import BLOCKS_DIM
from tik_agent.spec.sequences import Launch, case_launch, describe, owned_slots, placement, probe_launches


def judge_probes(spec, case, out) -> None:
    """Raise :class:`~tik_agent.judge.bitcheck.CaseFailure` for the first row that disagrees."""
    declared = spec.checked_outputs
    per_slot = [n for n, o in enumerate(declared) if o.shape[:1] == (BLOCKS_DIM,)]
    per_token = [n for n in range(len(declared)) if n not in per_slot]
    names = tuple(declared[n].name for n in per_token)
    outputs = {"full": out.full, **out.probes}
    known: dict[tuple[int, int], tuple[str, int]] = {}
    chunks_seen: dict[tuple[int, int, int], tuple[str, object]] = {}
    for launch in [case_launch(spec, case), *probe_launches(spec, case)]:
        what = describe(launch)
        if launch.label not in outputs:
            raise CaseFailure(Check.INVARIANCE, f"{what}: no output came back")
        where = placement(spec, case, launch) if per_slot else None
        got = outputs[launch.label]
        check_output(spec, case, got, len(launch.chunks), what, tokens=len(launch.tokens),
                     blocks=where.num_blocks if where else None)
        got = as_outputs(got)
        _judge_tokens(spec, case, launch, what, outputs, known, per_token, names)
        if per_slot:
            _judge_slots(spec, case, launch, what, where, [got[n] for n in per_slot],
                         tuple(declared[n].name for n in per_slot), chunks_seen)


def _judge_tokens(spec, case, launch: Launch, what: str, outputs, known, per_token, names) -> None:
    import torch

    got = as_outputs(outputs[launch.label])
    by_source: dict[str, tuple[list[int], list[int]]] = {}
    for row, token in enumerate(launch.tokens):
        if token in known:
            source, source_row = known[token]
            by_source.setdefault(source, ([], []))[0].append(source_row)
            by_source[source][1].append(row)
        else:
            known[token] = (launch.label, row)
    for source, (source_rows, rows) in by_source.items():
        theirs = as_outputs(outputs[source])
        src = torch.tensor(source_rows, dtype=torch.long, device=got[0].device)
        mine = torch.tensor(rows, dtype=torch.long, device=got[0].device)
        expected = tuple(theirs[n].index_select(0, src).contiguous() for n in per_token)
        actual = tuple(got[n].index_select(0, mine).contiguous() for n in per_token)
        same_bits(Check.INVARIANCE, f"{what} vs {_source(spec, case, source)} "
                  f"(tokens {_tokens(launch, rows)})", expected, actual, names)


def _judge_slots(spec, case, launch: Launch, what: str, where, grads: list, names: tuple[str, ...],
                 chunks_seen: dict) -> None:
    import torch

    flat = [g.reshape(where.num_blocks * g.shape[1], *g.shape[2:]) for g in grads]
    slots = owned_slots(spec, case, launch, where)
    unowned = torch.ones(flat[0].shape[0], dtype=torch.bool)
    for index in slots:
        unowned[index] = False
    for name, g in zip(names, flat):
        stray = g[unowned.to(g.device)]
        if stray.numel() and bool((stray != 0).any() | (stray != stray).any()):
            raise CaseFailure(Check.INVARIANCE, f"{what}: output {name}: a cache slot no sequence owns holds a nonzero "
                                                f"gradient (expected zeros there)")
    for chunk, index in zip(launch.chunks, slots):
        mine = tuple(g.index_select(0, index.to(g.device)).contiguous() for g in flat)
        key = (chunk.seq, chunk.begin, chunk.end)
        if key not in chunks_seen:
            chunks_seen[key] = (launch.label, mine)
            continue
        source, theirs = chunks_seen[key]
        same_bits(Check.INVARIANCE, f"{what} vs {_source(spec, case, source)} (cache slots of sequence "
                  f"{chunk.seq}, new tokens [{chunk.begin},{chunk.end}))", theirs, mine, names)


def _source(spec, case, label: str) -> str:
    if label == "full":
        return "the full batch"
    return next(describe(x) for x in probe_launches(spec, case) if x.label == label)


def _tokens(launch: Launch, rows: list[int]) -> str:
    tokens = launch.tokens
    shown = [f"{tokens[r][0]}@{tokens[r][1]}" for r in rows[:6]]
    return ", ".join(shown) + (", ..." if len(rows) > 6 else "")
