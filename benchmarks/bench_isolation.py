"""What the OS isolation costs per worker start, side by side with the bare process sandbox.

    .venv/bin/python benchmarks/bench_isolation.py [--repeat 5] [--eval]

Each repeat starts, in alternating order, the same program under the strongest
isolation this machine gives and under the bare process sandbox
(``tik_agent.sandbox.isolation.PROCESS``): a trivial interpreter start, and the
worker's real start-up (importing torch and triton).  With ``--eval`` it also
runs a trivial evaluation (the seed's reference worker over a few parity cases)
both ways.  Medians in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tik_agent.sandbox import isolation
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment

PROGRAMS = {"python start": "pass", "import torch+triton": "import torch, triton"}


def start(code: str, iso) -> float:
    with tempfile.TemporaryDirectory(prefix="tik-bench-") as tmp:
        env = scrubbed_environment({"TRITON_INTERPRET": "1"}, workdir=Path(tmp))
        t0 = time.perf_counter()
        result = run_sandboxed([sys.executable, "-I", "-c", code], Path(tmp), SandboxLimits(wall_seconds=300), env,
                               isolation=iso)
        elapsed = time.perf_counter() - t0
    if not result.ok:
        raise SystemExit(f"{code!r} failed under {iso.mechanism}: {result.stderr[-500:]}")
    return elapsed


def reference(iso) -> float:
    from tik_agent.judge.evaluate import compute_reference
    from tik_agent.judge.options import EvalOptions
    from tik_agent.spec.grid import evaluation_cases
    from tik_agent.spec.seeds import resolve

    spec = resolve("rmsnorm")
    cases = evaluation_cases(spec, "cpu")[:4]
    original = isolation.best
    isolation.best = lambda: iso
    try:
        t0 = time.perf_counter()
        compute_reference(spec, EvalOptions(timing=False), cases)
        return time.perf_counter() - t0
    finally:
        isolation.best = original


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--eval", action="store_true", help="also a trivial evaluation (slower)")
    args = parser.parse_args()
    strong = isolation.best()
    bare = isolation.PROCESS
    print(f"isolation: {strong.report().level} by {strong.mechanism} ({', '.join(strong.layers)})")
    jobs = {name: (lambda iso, code=code: start(code, iso)) for name, code in PROGRAMS.items()}
    if args.eval:
        jobs["trivial evaluation (4 cases)"] = reference
    print(f"{'what':32} {'isolated s':>11} {'process s':>10} {'ratio':>7}")
    for name, job in jobs.items():
        times = {"iso": [], "bare": []}
        for i in range(args.repeat):
            order = [("iso", strong), ("bare", bare)] if i % 2 == 0 else [("bare", bare), ("iso", strong)]
            for key, iso in order:
                times[key].append(job(iso))
        a, b = statistics.median(times["iso"]), statistics.median(times["bare"])
        print(f"{name:32} {a:11.3f} {b:10.3f} {a / b:7.2f}")


if __name__ == "__main__":
    main()
