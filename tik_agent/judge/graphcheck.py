"""Judge the graph phase: what the replays that decide the speedup computed.

The candidate's worker reports, per workload cell, the number of calls it
captured, the Triton launches its capture made, the first (round, call) where
its replay differed in bits from the seed graph's replay on the same inputs,
and, for the rounds the plan chose to digest, the digest of every call's output,
the first slot whose inputs the replay changed, and the digests of the seed
graph's outputs on the same data (the seed is timed in the candidate's process:
in those rounds what it computed there is checked too).  The seed's own worker
computed the seed's digests on the same rounds (it never ran the candidate).

Every difference is an integrity failure: the same candidate already matched
the seed bit for bit in its eager calls, so a replay that does not is a kernel
that behaves differently when it is replayed (remembered answers, counters in
device memory, another kernel under capture).
"""

from __future__ import annotations

from pathlib import Path

from tik_agent.outcomes import Outcome
from tik_agent.judge.timedcheck import TimedFailure


def _fail(cell: str, what: str, call: int = 0) -> TimedFailure:
    return TimedFailure(Outcome.INTEGRITY_FAILED, f"graphs:{cell}: {what}", cell, call)


def judge_graph(plan_graph: dict, got: dict, seed: dict, kernel_file: Path) -> TimedFailure | None:
    """The first graph-phase failure, or None when every replay matched the seed."""
    own = str(Path(kernel_file).resolve())
    for cell, g in plan_graph.items():
        ref = seed.get(cell)
        if ref is None:
            return _fail(cell, "[graph] the seed's worker reported no graph reference for this cell")
        calls = (got.get("calls") or {}).get(cell)
        if calls != ref["calls"]:
            return _fail(cell, f"[graph] the worker captured {calls} calls, the seed's worker chose {ref['calls']}")
        launches = dict((got.get("launches") or {}).get(cell) or {})
        foreign = sorted(f for f in launches if f != own)
        if foreign:
            return _fail(cell, f"[launch] the captured calls launched kernels defined outside the kernel file: "
                               f"{foreign}")
        if launches.get(own, 0) == 0:
            return _fail(cell, "[launch] the captured calls launched no Triton kernel from the kernel file")
        mismatch = (got.get("mismatch") or {}).get(cell)
        if mismatch:
            r, j = mismatch
            return _fail(cell, f"[replay] replay {r + 1}, call {j + 1} differs in bits from the seed graph's "
                               "on the same inputs", j + 1)
        checked = (got.get("checked") or {}).get(cell) or {}
        for r in g["checked"]:
            entry = checked.get(str(r))
            if entry is None:
                return _fail(cell, f"[replay] the worker kept no digests of replay {r + 1}")
            if entry.get("inputs_changed") is not None:
                return _fail(cell, f"[inputs] replay {r + 1} changed the inputs of call "
                                   f"{int(entry['inputs_changed']) + 1}", int(entry["inputs_changed"]) + 1)
            want = ref["digests"].get(str(r), [])
            have = list(entry.get("out") or [])
            if len(have) != len(want):
                return _fail(cell, f"[replay] replay {r + 1} reported {len(have)} outputs, {len(want)} were captured")
            bad = next((j for j, (a, b) in enumerate(zip(have, want)) if a != b), None)
            if bad is not None:
                return _fail(cell, f"[replay] replay {r + 1}, call {bad + 1} differs from the seed's own worker on "
                                   "the same inputs", bad + 1)
            failed = _seed_differs(cell, r, list(entry.get("seed_out") or []), want)
            if failed is not None:
                return failed
    return None


def _seed_differs(cell: str, r: int, have: list, want: list) -> TimedFailure | None:
    """The seed's graph, timed in the candidate's process, against the seed's own worker."""
    bad = next((j for j, (a, b) in enumerate(zip(have, want)) if a != b), None)
    if bad is not None:
        return _fail(cell, f"[seed] the seed graph's replay on the data of round {r + 1}, call {bad + 1}, in the "
                           "candidate's process differs from the seed's own worker", bad + 1)
    if len(have) != len(want):
        return _fail(cell, f"[seed] the worker reported {len(have)} digests of the seed graph's replay on the data "
                           f"of round {r + 1}, {len(want)} were captured")
    return None
