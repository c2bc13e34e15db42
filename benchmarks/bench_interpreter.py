"""The Triton interpreter's launch overhead: its own member walk against tik-agent's cached names.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_interpreter.py [--seeds rmsnorm matmul] [--cases 15] [--repeat 3]

Each seed's first ``--cases`` evaluation cases run in this process through the worker's
harness (every launch the judge makes for a case: full batch, second run, rows alone,
sub-batches), alternately with the interpreter's ``_patch_builtin`` as triton ships it
(``inspect.getmembers`` on every launch and every device-function call) and with the one
:func:`tik_agent.backends.interpreter.activate` installs (builtin names listed once).
Prints each run, the medians, their ratio, and the outputs' digest per variant: the bits
must be the same.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time

from tik_agent.backends import interpreter

interpreter.activate()

from triton.runtime import interpreter as triton_interpreter  # noqa: E402

from tik_agent.bits import digest  # noqa: E402
from tik_agent.sandbox import launches  # noqa: E402
from tik_agent.sandbox.harness import Runner, load_entry  # noqa: E402
from tik_agent.spec.grid import evaluation_cases  # noqa: E402
from tik_agent.spec.seeds import resolve  # noqa: E402


def shipped_walk(pkg, builder, scope):
    """triton's own ``_patch_builtin``, as 3.9 has it."""
    for name, member in inspect.getmembers(pkg):
        if triton_interpreter.tl.core.is_builtin(member):
            triton_interpreter._patch_attr(pkg, name, member, builder, scope)


def tensors(out) -> list:
    full = out.full
    return list(full) if isinstance(full, (list, tuple)) else [full]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=["rmsnorm", "matmul"])
    parser.add_argument("--cases", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cached = triton_interpreter._patch_builtin
    if not getattr(cached, interpreter._NAMES_CACHE_MARK, False):
        raise SystemExit("this triton's _patch_builtin is not cached by tik-agent: nothing to compare")
    launches.install()
    print("| seed | cases | triton's walk, s (runs) | cached names, s (runs) | cached / walk | same bits |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name in args.seeds:
        spec = resolve(name)
        runner = Runner(load_entry(spec.source, spec, "seed"), spec, "cpu")
        cases = evaluation_cases(spec, "cpu")[: args.cases]
        runner.run_case(cases[0])  # first-launch costs outside the figures
        times: dict[str, list[float]] = {"walk": [], "cached": []}
        digests: dict[str, set[str]] = {"walk": set(), "cached": set()}
        for _ in range(args.repeat):
            for variant, patch in (("walk", shipped_walk), ("cached", cached)):
                triton_interpreter._patch_builtin = patch
                start = time.perf_counter()
                outs = [runner.run_case(case) for case in cases]
                times[variant].append(time.perf_counter() - start)
                digests[variant].add(digest([t for out in outs for t in tensors(out)]))
        triton_interpreter._patch_builtin = cached
        walk, fast = statistics.median(times["walk"]), statistics.median(times["cached"])
        same = len(digests["walk"] | digests["cached"]) == 1
        runs = {k: ", ".join(f"{t:.2f}" for t in v) for k, v in times.items()}
        print(f"| {name} | {len(cases)} | {walk:.2f} ({runs['walk']}) | {fast:.2f} ({runs['cached']}) "
              f"| {fast / walk:.2f}x | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
