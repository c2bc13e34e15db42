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
"""

from __future__ import annotations

from tik_agent.judge.parity import Check, _check_output, _Fail, _same_bits
from tik_agent.spec.sequences import Launch, describe, full_launch, probe_launches


def judge_probes(spec, case, out) -> None:
    """Raise the parity module's failure for the first row that disagrees."""
    import torch

    outputs = {"full": out.full, **out.probes}
    known: dict[tuple[int, int], tuple[str, int]] = {}
    for launch in [full_launch(spec, case.m, case.dims), *probe_launches(spec, case)]:
        what = describe(launch)
        if launch.label not in outputs:
            raise _Fail(Check.INVARIANCE, f"{what}: no output came back")
        got = outputs[launch.label]
        _check_output(spec, case, got, len(launch.chunks), what, tokens=len(launch.tokens))
        by_source: dict[str, tuple[list[int], list[int]]] = {}
        for row, token in enumerate(launch.tokens):
            if token in known:
                source, source_row = known[token]
                by_source.setdefault(source, ([], []))[0].append(source_row)
                by_source[source][1].append(row)
            else:
                known[token] = (launch.label, row)
        for source, (source_rows, rows) in by_source.items():
            expected = outputs[source].index_select(0, torch.tensor(source_rows, dtype=torch.long, device=got.device))
            actual = got.index_select(0, torch.tensor(rows, dtype=torch.long, device=got.device))
            _same_bits(Check.INVARIANCE, f"{what} vs {_source(spec, case, source)} "
                       f"(tokens {_tokens(launch, rows)})", expected.contiguous(), actual.contiguous())


def _source(spec, case, label: str) -> str:
    if label == "full":
        return "the full batch"
    return next(describe(x) for x in probe_launches(spec, case) if x.label == label)


def _tokens(launch: Launch, rows: list[int]) -> str:
    tokens = launch.tokens
    shown = [f"{tokens[r][0]}@{tokens[r][1]}" for r in rows[:6]]
    return ", ".join(shown) + (", ..." if len(rows) > 6 else "")
