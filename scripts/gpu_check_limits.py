"""The GPU check's step limits (``scripts/gpu-check.sh`` asks ``limit STEP ...`` before each
timed step): the step's estimated run time with a warm Triton cache, plus the seconds its
launches took to compile from an empty cache in the compile-only rehearsal, cut to what the
check's budget has left once the later steps' run estimates are set aside.

With a warm cache the compile seconds go unused, and a step ends when its work does: a limit
only says how long a step may take before the check gives up on it.  Counting them makes a
cold cache (keys that did not match on the node) slow a step rather than kill it, and the
budget keeps the whole within its 10 minutes of a session's 15 minutes of device time.

Stdlib only: the shell runs it with the node's interpreter before anything is imported.
"""

from __future__ import annotations

import math
import sys

SEEDS = ("rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention")

# Seconds each process of the warm step (tik_agent.backends.compile_rehearsal.warm_steps) took
# from an empty cache of its own, compiling and in all, on the 2-core CPU machine with triton
# 3.6.0 (the node's), two at a time:
#   PYTHONPATH=$PWD .venv-triton36/bin/python scripts/gpu_check_steps.py compile OUT --jobs 2 \
#     --steps $(python -c "from tik_agent.backends.compile_rehearsal import warm_steps; print(*warm_steps())")
# Measured 2026-12-06 (docs/gpu.md).  Re-measure when a seed's kernels change:
# tests/test_gpu_check_limits.py fails when a warm step has no row.
REHEARSAL = {
    "kernels": (5.0, 12.4),
    "probes-rmsnorm:ROWS_PER_PROGRAM=1": (4.6, 6.8),
    "probes-rmsnorm:ROWS_PER_PROGRAM=2": (4.6, 7.0),
    "probes-rmsnorm:ROWS_PER_PROGRAM=4": (4.5, 6.7),
    "probes-rmsnorm:ROWS_PER_PROGRAM=8": (4.8, 6.8),
    "probes-rmsnorm:ROWS_PER_PROGRAM=16": (5.6, 7.6),
    "probes-rmsnorm:NUM_WARPS=1": (18.5, 21.0),
    "probes-rmsnorm:NUM_WARPS=2": (9.2, 11.2),
    "probes-rmsnorm:NUM_WARPS=4": (4.8, 7.0),
    "probes-rmsnorm:NUM_WARPS=8": (4.0, 6.0),
    "probes-rmsnorm:NUM_WARPS=16": (3.1, 5.2),
    "probes-add_rmsnorm:ROWS_PER_PROGRAM=1": (4.9, 7.5),
    "probes-add_rmsnorm:ROWS_PER_PROGRAM=2": (5.6, 8.1),
    "probes-add_rmsnorm:ROWS_PER_PROGRAM=4": (6.0, 8.2),
    "probes-add_rmsnorm:ROWS_PER_PROGRAM=8": (6.1, 8.4),
    "probes-add_rmsnorm:ROWS_PER_PROGRAM=16": (9.8, 12.1),
    "probes-add_rmsnorm:NUM_WARPS=1": (15.8, 18.1),
    "probes-add_rmsnorm:NUM_WARPS=2": (7.8, 10.2),
    "probes-add_rmsnorm:NUM_WARPS=4": (5.5, 7.8),
    "probes-add_rmsnorm:NUM_WARPS=8": (4.2, 6.4),
    "probes-add_rmsnorm:NUM_WARPS=16": (4.0, 6.2),
    "probes-logprobs:ROWS_PER_PROGRAM=1": (1.8, 5.6),
    "probes-logprobs:ROWS_PER_PROGRAM=2": (1.5, 4.1),
    "probes-logprobs:ROWS_PER_PROGRAM=4": (1.5, 4.1),
    "probes-logprobs:ROWS_PER_PROGRAM=8": (1.6, 4.3),
    "probes-logprobs:NUM_WARPS=4": (1.8, 4.3),
    "probes-logprobs:NUM_WARPS=8": (1.6, 4.4),
    "probes-logprobs:NUM_WARPS=16": (1.6, 4.2),
    "probes-matmul:BLOCK_M=16": (17.2, 18.9),
    "probes-matmul:BLOCK_M=32": (5.5, 7.2),
    "probes-matmul:BLOCK_M=64": (7.8, 9.7),
    "probes-matmul:BLOCK_M=128": (12.2, 14.1),
    "probes-matmul:BLOCK_N=32": (5.9, 7.5),
    "probes-matmul:BLOCK_N=64": (7.8, 9.6),
    "probes-matmul:BLOCK_N=128": (12.6, 14.5),
    "probes-matmul:GROUP_M=1": (13.1, 15.0),
    "probes-matmul:GROUP_M=4": (13.4, 15.3),
    "probes-matmul:GROUP_M=8": (12.7, 15.0),
    "probes-matmul:GROUP_M=16": (11.8, 13.8),
    "probes-matmul:NUM_WARPS=2": (94.3, 96.0),
    "probes-matmul:NUM_WARPS=4": (25.8, 27.7),
    "probes-matmul:NUM_WARPS=8": (10.8, 12.6),
    "probes-matmul:NUM_STAGES=2": (11.5, 13.1),
    "probes-matmul:NUM_STAGES=3": (11.3, 13.2),
    "probes-matmul:NUM_STAGES=4": (12.2, 14.1),
    "probes-matmul:NUM_STAGES=5": (12.0, 13.7),
    "probes-matmul:BLOCK_K=16": (7.7, 9.5),
    "probes-matmul:BLOCK_K=32": (12.6, 14.4),
    "probes-matmul:BLOCK_K=64": (24.7, 26.5),
    "probes-attention:BLOCK_Q=1": (19.2, 32.9),
    "probes-attention:BLOCK_Q=2": (11.3, 19.9),
    "probes-attention:BLOCK_Q=4": (10.0, 18.1),
    "probes-attention:BLOCK_Q=8": (11.0, 19.3),
    "probes-attention:BLOCK_Q=16": (14.3, 21.9),
    "probes-attention:HEADS_PER_PROGRAM=1": (9.8, 18.0),
    "probes-attention:HEADS_PER_PROGRAM=2": (9.6, 17.4),
    "probes-attention:HEADS_PER_PROGRAM=4": (12.6, 20.3),
    "probes-attention:NUM_WARPS=2": (15.9, 23.8),
    "probes-attention:NUM_WARPS=4": (10.0, 17.9),
    "probes-attention:NUM_WARPS=8": (7.5, 15.2),
    "eval-rmsnorm:cases=even": (17.1, 20.3),
    "eval-rmsnorm:cases=odd": (12.1, 19.7),
    "eval-rmsnorm:survey": (7.1, 27.3),
    "eval-rmsnorm:cells": (1.2, 2.9),
    "eval-add_rmsnorm:cases=even": (17.0, 24.4),
    "eval-add_rmsnorm:cases=odd": (18.6, 35.3),
    "eval-add_rmsnorm:survey": (4.2, 15.9),
    "eval-add_rmsnorm:cells": (1.1, 2.9),
    "eval-logprobs:cases=even": (5.8, 8.2),
    "eval-logprobs:cases=odd": (4.0, 10.7),
    "eval-logprobs:survey": (2.5, 10.2),
    "eval-logprobs:cells": (1.1, 2.9),
    "eval-matmul:cases=even": (72.3, 74.7),
    "eval-matmul:cases=odd": (53.4, 129.0),
    "eval-matmul:survey": (18.8, 31.1),
    "eval-matmul:cells": (0.9, 2.6),
    "eval-attention:cases=even": (28.3, 31.6),
    "eval-attention:cases=odd": (30.4, 40.6),
    "eval-attention:survey": (65.3, 83.6),
    "eval-attention:cells": (1.9, 7.4),
}

# Each timed step's run time on an H200 with a warm cache, seconds: estimates, as no GPU run
# has measured one yet (docs/gpu.md), in the order the check runs them.  The warm step's own
# estimate is warm_s(): its processes scheduled onto the node's cores.
RUN_S = {
    "warm": 0,
    "probes": 40,
    **{f"eval-{seed}": (60 if seed == "attention" else 30) for seed in SEEDS},
    "optimize": 90,
    "export": 30,
}
# The warm processes whose launches each timed step makes, by prefix.  An evaluation's two
# workers compile side by side (one evaluation's seconds); the probes run their seeds one after
# another; optimize audits the seed (an evaluation of rmsnorm) and then compiles its 3
# candidates, which the offline agent makes by changing a constant (each about the seed's
# variants again).
COLD = {
    "warm": [],
    "probes": ["probes-"],
    **{f"eval-{seed}": [f"eval-{seed}:"] for seed in SEEDS},
    "optimize": ["eval-rmsnorm:"] * 4,
    "export": [],
}
MIN_S = 10        # a step given less than this is skipped: it could not start a worker
SLACK = 1.25      # on the warm step's estimate: process starts, a slower CPU than this one's


def compile_s(step: str) -> float:
    """Seconds a timed step spends compiling with an empty cache (the rehearsal's, summed over
    the warm processes that replay its launches: an upper bound, as they share variants)."""
    return sum(c for prefix in COLD[step] for name, (c, _) in REHEARSAL.items() if name.startswith(prefix))


def want(step: str) -> int:
    return math.ceil(RUN_S[step] + compile_s(step))


def warm_s(jobs: int) -> int:
    """The warm step's estimate: its processes scheduled longest first onto ``jobs`` cores, as
    a pool that takes the next one when one finishes does."""
    loads = [0.0] * max(1, jobs)
    for _, seconds in sorted(REHEARSAL.values(), key=lambda row: -row[1]):
        loads[loads.index(min(loads))] += seconds
    return math.ceil(max(loads) * SLACK)


def limit(step: str, left: float, after: list[str], jobs: int = 1, compiles: bool = True) -> int:
    """``step``'s limit with ``left`` seconds of the budget remaining and the steps ``after`` it
    still to run: what it wants, but never the run time those are estimated to need.
    ``compiles`` False: the CPU interpreter's rehearsal, where nothing compiles.
    0: skip it, too little is left to start a worker."""
    wanted = warm_s(jobs) if step == "warm" else want(step) if compiles else RUN_S[step]
    given = min(wanted, left - sum(RUN_S[s] for s in after))
    return int(given) if given >= MIN_S else 0


def main(argv: list[str]) -> int:
    """``limit STEP LEFT_S JOBS [--interpreted] [LATER_STEP...]`` prints one step's limit (0: skip it)."""
    interpreted = "--interpreted" in argv
    argv = [a for a in argv if a != "--interpreted"]
    if len(argv) < 4 or argv[0] != "limit" or not {argv[1], *argv[4:]} <= set(RUN_S):
        print("usage: gpu_check_limits.py limit STEP LEFT_S JOBS [--interpreted] [LATER_STEP...] "
              f"(steps: {', '.join(RUN_S)})", file=sys.stderr)
        return 2
    print(limit(argv[1], float(argv[2]), argv[4:], int(argv[3]), compiles=not interpreted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
