"""Per-call cost of the configuration survey, in one process, without the sandbox.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_survey.py [--seeds rmsnorm logprobs] [--repeat 3] [--joint]

Runs :func:`tik_agent.sandbox.survey.run_survey` over the seed's whole plan for the CPU
(every size up to the exhaustive end, then the drawn and power-of-two sizes, and what
the analysis asks for), as a worker does, with the launch wrapper installed and the
host-ops mode around every call; prints the median wall time of --repeat surveys, the
number of calls and the time per call.  With ``--joint`` the points of combined sizes
(:mod:`tik_agent.judge.joint`) are surveyed too, after the axes, as an evaluation does.
To compare two trees, run this file with PYTHONPATH pointing at each in turn.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tik_agent.backends import interpreter

interpreter.activate()

from tik_agent.judge import configs  # noqa: E402
from tik_agent.sandbox import launches  # noqa: E402
from tik_agent.sandbox.harness import load_seed_entry  # noqa: E402
from tik_agent.sandbox.survey import run_survey  # noqa: E402
from tik_agent.spec.seeds import resolve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=["rmsnorm", "logprobs"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--joint", action="store_true", help="survey the points of combined sizes too")
    args = parser.parse_args()
    launches.install()
    print("| seed | calls | survey s, median (each) | us per call |")
    print("| --- | ---: | --- | ---: |")
    for name in args.seeds:
        spec = resolve(name)
        entry = load_seed_entry(spec)
        rng = random.Random(0)
        plan, points = configs.survey_plan(spec, "cpu", rng), []
        if args.joint:
            from tik_agent.judge import joint

            points = joint.draw(plan, rng)
            plan = joint.with_coordinates(plan, points)
        times, calls = [], 0
        for _ in range(args.repeat):
            start = time.perf_counter()
            record = run_survey(spec, entry, plan, points) if points else run_survey(spec, entry, plan)
            times.append(time.perf_counter() - start)
            calls = sum(len(axis["points"]) for axis in record["axes"]) + len(record.get("joint", []))
        med = statistics.median(times)
        print(f"| {name} | {calls} | {med:.2f} ({', '.join(f'{t:.2f}' for t in times)}) | {med / calls * 1e6:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
