"""Per-call cost of the host-ops mode: guarded_call with and without it, side by side.

    .venv/bin/python benchmarks/bench_hostops.py [--calls 40] [--repeat 5]

Each seed is called on a small input (one row block, so the launch itself is
short and the fixed cost shows) three ways, alternating so that drift hits all
of them: the bare entry, guarded_call with the mode switched off (poisoned
allocations only), and guarded_call as the worker runs it.  Medians of
--repeat batches of --calls calls, in milliseconds per call; then the mode's
fixed cost per call on a launcher that only allocates and takes a view.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from tik_agent.backends import interpreter

interpreter.activate()

import torch  # noqa: E402

from tik_agent.sandbox import harness, hostops, launches  # noqa: E402
from tik_agent.spec.seeds import resolve  # noqa: E402

INPUTS = {
    "rmsnorm": lambda: [torch.randn(4, 256), torch.randn(256)],
    "logprobs": lambda: [torch.randn(4, 256), torch.randint(0, 256, (4,))],
    "matmul": lambda: [torch.randn(4, 32), torch.randn(32, 32)],
}


def _batch(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=sorted(INPUTS))
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    launches.install()
    watching = hostops.watching
    print("| seed | bare, ms | guarded without mode, ms | guarded with mode, ms | mode cost, ms | mode / without |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in args.seeds:
        spec = resolve(name)
        entry = harness.load_seed_entry(spec)
        inputs = INPUTS[name]()
        kwargs = dict(spec.kwargs)
        entry(*inputs, **kwargs)  # warm the interpreter's rewrite cache
        samples: dict[str, list[float]] = {"bare": [], "off": [], "on": []}
        for _ in range(args.repeat):
            samples["bare"].append(_batch(lambda: entry(*inputs, **kwargs), args.calls))
            harness.hostops.watching = contextlib.nullcontext
            try:
                samples["off"].append(_batch(lambda: harness.guarded_call(entry, inputs, kwargs), args.calls))
            finally:
                harness.hostops.watching = watching
            samples["on"].append(_batch(lambda: harness.guarded_call(entry, inputs, kwargs), args.calls))
        bare, off, on = (statistics.median(samples[k]) for k in ("bare", "off", "on"))
        print(f"| {name} | {bare:.3f} | {off:.3f} | {on:.3f} | {on - off:+.3f} | {on / off:.3f} |")
    # The fixed cost alone: a launcher that only allocates and takes a view.
    trivial = lambda x: torch.empty_like(x).view(-1)  # noqa: E731
    x = torch.ones(4, 4)
    off, on = [], []
    for _ in range(args.repeat):
        harness.hostops.watching = contextlib.nullcontext
        try:
            off.append(_batch(lambda: harness.guarded_call(trivial, [x], {}), args.calls * 50))
        finally:
            harness.hostops.watching = watching
        on.append(_batch(lambda: harness.guarded_call(trivial, [x], {}), args.calls * 50))
    fixed = (statistics.median(on) - statistics.median(off)) * 1e3
    print(f"\nfixed cost of the mode per call (allocation + view launcher): {fixed:.1f} us")


if __name__ == "__main__":
    main()
