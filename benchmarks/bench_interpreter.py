"""The Triton interpreter's overhead: as triton ships it against tik-agent's speed-ups.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_interpreter.py [--seeds rmsnorm matmul] [--cases 15] [--repeat 3]

Each seed's first ``--cases`` evaluation cases run in this process through the worker's
harness (every launch the judge makes for a case: full batch, second run, rows alone,
sub-batches), alternately with the interpreter's pieces as triton ships them and with the
ones :mod:`tik_agent.backends.interpreter_speed` installs (its docstring lists them).
``--only NAME`` swaps that piece alone.  Prints each run, the medians, their ratio, and the
outputs' digest per variant: the bits must be the same.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tik_agent.backends import interpreter

interpreter.activate()

from triton.language import core as tl_core  # noqa: E402
from triton.language import semantic as tl_semantic  # noqa: E402
from triton.runtime import interpreter as triton_interpreter  # noqa: E402

from tik_agent.bits import digest  # noqa: E402
from tik_agent.sandbox import launches  # noqa: E402
from tik_agent.sandbox.harness import Runner, load_entry  # noqa: E402
from tik_agent.spec.grid import evaluation_cases  # noqa: E402
from tik_agent.spec.seeds import resolve  # noqa: E402


# name -> (owner, attribute): what interpreter_speed replaces (keeping the original as __wrapped__).
HELPERS = {
    "_patch_builtin": (triton_interpreter, "_patch_builtin"),
    "_patch_lang": (triton_interpreter, "_patch_lang"),
    "_get_np_dtype": (triton_interpreter, "_get_np_dtype"),
    "block_type": (tl_core.block_type, "__init__"),
    "tensor": (tl_core.tensor, "__init__"),
    "broadcast": (tl_semantic.TritonSemantic, "broadcast_impl_value"),
    "bf16_casts": (triton_interpreter, "_convert_float"),
    "overflow_check": (tl_semantic.TritonSemantic, "binary_op_sanitize_overflow_impl"),
}


def use(installed: dict, shipped: bool) -> None:
    """Put the shipped pieces (or tik-agent's) in place; with ``_patch_lang``, the launch's
    wrapper that tells a device-function call inside a launch goes too."""
    for name, fn in installed.items():
        owner, attribute = HELPERS[name]
        setattr(owner, attribute, fn.__wrapped__ if shipped else fn)
    if "_patch_lang" in installed:
        triton_interpreter.GridExecutor.__call__ = LAUNCH.__wrapped__ if shipped else LAUNCH


LAUNCH = triton_interpreter.GridExecutor.__call__


def tensors(out) -> list:
    full = out.full
    return list(full) if isinstance(full, (list, tuple)) else [full]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=["rmsnorm", "matmul"])
    parser.add_argument("--cases", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=HELPERS)
    args = parser.parse_args()
    installed = {name: getattr(*HELPERS[name]) for name in ((args.only,) if args.only else HELPERS)}
    missing = [name for name, fn in installed.items() if not hasattr(fn, "__wrapped__")]
    if missing:
        raise SystemExit(f"this triton's {', '.join(missing)} not replaced by tik-agent: nothing to compare")
    launches.install()
    print(f"swapped: {', '.join(installed)}")
    print("| seed | cases | as shipped, s (runs) | tik-agent's, s (runs) | tik-agent's / shipped | same bits |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name in args.seeds:
        spec = resolve(name)
        runner = Runner(load_entry(spec.source, spec, "seed"), spec, "cpu")
        cases = evaluation_cases(spec, "cpu")[: args.cases]
        runner.run_case(cases[0])  # first-launch costs outside the figures
        times: dict[str, list[float]] = {"walk": [], "cached": []}
        digests: dict[str, set[str]] = {"walk": set(), "cached": set()}
        for _ in range(args.repeat):
            for variant in ("walk", "cached"):
                use(installed, shipped=variant == "walk")
                start = time.perf_counter()
                outs = [runner.run_case(case) for case in cases]
                times[variant].append(time.perf_counter() - start)
                digests[variant].add(digest([t for out in outs for t in tensors(out)]))
        use(installed, shipped=False)
        walk, fast = statistics.median(times["walk"]), statistics.median(times["cached"])
        same = len(digests["walk"] | digests["cached"]) == 1
        runs = {k: ", ".join(f"{t:.2f}" for t in v) for k, v in times.items()}
        print(f"| {name} | {len(cases)} | {walk:.2f} ({runs['walk']}) | {fast:.2f} ({runs['cached']}) "
              f"| {fast / walk:.2f}x | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
