"""Cost of a full sandboxed evaluation against the same kernel calls run bare.

    .venv/bin/python benchmarks/bench_evaluator.py [--seeds rmsnorm logprobs matmul] [--rounds 3]
    .venv/bin/python benchmarks/bench_evaluator.py --failing [--seeds rmsnorm]

"full" is `evaluate(spec, seed, ...)` from a cold start: the seed's worker
(every fixed case, this evaluation's drawn and literal cases, the seed's
digests on the candidate's timed inputs) plus the candidate worker (candidate
over every case, interleaved timing against the seed with every candidate call
digested), static rules, process start-up, tensor files and judging.  "bare"
makes the same kernel calls in this one process with no sandbox: the same
cases through the same harness for the seed and for the candidate, the same
timing calls, and the seed once more on each of the candidate's timed inputs.  The ratio is the
price of isolation and integrity checks.  Medians over --repeat runs.

    .venv/bin/python benchmarks/bench_evaluator.py --second-run [--seeds rmsnorm] [--repeat 3]

measures instead the start of a run of a seed that an earlier run already
audited: ``setup.create`` (the seed's outputs, its audit, the root commit)
with ``fresh_audit`` ("before": what every start cost before the audit cache)
and without it, finding the audit in the cache ("after").  Both use a
temporary cache, which the first "before" fills; the two alternate.

``--failing`` instead times one evaluation of a candidate that fails parity (the
seed with a one-line edit that changes its bits), against a reference computed
beforehand, as an optimize run does: static rules, the seed's worker for this
evaluation's cases, the candidate's worker, judging.  Most candidates an LLM
writes fail parity, so this is the common attempt.  Two ways alternate in each
repeat: every case run before the outputs are judged (``early_stop=False``: the
gate stops the worker before timing, as before the parity stream) and each case
judged as the worker finishes it, the worker stopped at the first that fails
(the default).  Every run is printed.

    .venv/bin/python benchmarks/bench_evaluator.py --seed-forks [--seeds rmsnorm logprobs] [--repeat 3]

times the same parity-failing evaluation with the seed's worker forked from the
warm server (:mod:`tik_agent.sandbox.forkserver`) and started fresh in the
sandbox (``TIK_AGENT_SEED_FORKS=0``), alternated; the server is started before
the first repeat, as it is once per process in a run.

    .venv/bin/python benchmarks/bench_evaluator.py --survey [--seeds rmsnorm logprobs] [--repeat 3]

times one evaluation of the seed against itself (a candidate that passes, timed as in
an optimize run, against a reference computed beforehand) with the configuration
survey (:mod:`tik_agent.judge.configs`) and without it (``survey=False``),
alternated, and counts the boundary cases the survey added.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tik_agent.backends import interpreter

interpreter.activate()

from tik_agent.sandbox import launches  # noqa: E402
from tik_agent.judge.literals import batch_sizes_around, compared_literals  # noqa: E402
from tik_agent.judge.plan import per_evaluation_cases  # noqa: E402
from tik_agent.spec.cases import make_inputs, workload_case  # noqa: E402
from tik_agent.spec.grid import evaluation_cases  # noqa: E402
from tik_agent.judge.evaluate import compute_reference, evaluate  # noqa: E402
from tik_agent.judge.options import EvalOptions  # noqa: E402
from tik_agent.sandbox.harness import Runner, load_entry  # noqa: E402
from tik_agent.spec.seeds import resolve  # noqa: E402


def bare(spec, rounds: int, warmup: int) -> float:
    launches.install()
    start = time.perf_counter()
    seed = load_entry(spec.source, spec, "seed")
    cand = load_entry(spec.source, spec, "candidate")
    literals = batch_sizes_around(compared_literals(spec.source.read_text()))
    cases = evaluation_cases(spec, "cpu") + per_evaluation_cases(spec, "cpu", literals)
    for entry in (seed, cand):
        runner = Runner(entry, spec, "cpu")
        for case in cases:
            runner.run_case(case)
    kwargs = dict(spec.kwargs)
    cells = spec.workload_for("cpu")
    serial = 0
    for _ in range(warmup + rounds):
        for cell in cells:
            for entry in (cand, seed, seed):  # the third: the seed's digest of the candidate's input
                serial += 1
                inputs = make_inputs(spec, workload_case(cell, serial), "cpu")
                entry(*inputs, **kwargs)
    for cell in cells:  # the re-check, and the seed's digest of it
        inputs = make_inputs(spec, workload_case(cell, 0), "cpu")
        cand(*inputs, **kwargs)
        seed(*inputs, **kwargs)
    return time.perf_counter() - start


def full(spec, rounds: int, warmup: int) -> float:
    start = time.perf_counter()
    verdict = evaluate(spec, spec.source, EvalOptions(device="cpu", rounds=rounds, warmup=warmup))
    if not verdict.passed:
        sys.exit(f"{spec.name}: the seed failed against itself: {verdict.reason}")
    return time.perf_counter() - start


def run_start(spec, workdir: Path, name: str, rounds: int, warmup: int, fresh_audit: bool) -> float:
    from tik_agent.backends import device as devices
    from tik_agent.search import setup
    from tik_agent.run.runconfig import Limits, RunConfig

    config = RunConfig(run_id=name, seed_name=spec.name, seed_source=str(spec.directory), agent="offline",
                       model=None, base_url=None, rng_seed=0, device="cpu", rounds=rounds, warmup=warmup,
                       eval_timeout_s=None, workers=1, limits=Limits(),
                       binding=devices.binding(devices.environment("cpu")))
    start = time.perf_counter()
    setup.create(workdir / name, config, fresh_audit=fresh_audit).close()
    return time.perf_counter() - start


def second_run(names: list[str], rounds: int, warmup: int, repeat: int) -> None:
    print("| seed | cases | start, audit computed (before), s | start, audit reused (after), s | after / before |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="bench-second-run-") as tmp:
        workdir = Path(tmp)
        os.environ["TIK_AGENT_CACHE"] = str(workdir / "cache")
        for name in names:
            spec = resolve(name)
            before, after = [], []
            for i in range(repeat):  # alternate so drift hits both sides
                before.append(run_start(spec, workdir, f"{name}-before-{i}", rounds, warmup, fresh_audit=True))
                after.append(run_start(spec, workdir, f"{name}-after-{i}", rounds, warmup, fresh_audit=False))
            b, a = statistics.median(before), statistics.median(after)
            each_b, each_a = ", ".join(f"{t:.1f}" for t in before), ", ".join(f"{t:.2f}" for t in after)
            print(f"| {name} | {len(evaluation_cases(spec, 'cpu'))} | {b:.1f} ({each_b}) | {a:.2f} ({each_a}) "
                  f"| {a / b:.4f} ({b / a:.0f}x faster) |", flush=True)


# A one-line edit per seed that changes its bits.
WRONG_BITS = {
    "rmsnorm": ("sum_sq / N + eps", "sum_sq / N + 2 * eps"),
    "logprobs": ("lse = safe_row_max + tl.log(total)", "lse = safe_row_max + tl.log(total * 1.000001)"),
}


def failing(spec, rounds: int, warmup: int, reference, workdir: Path, early_stop: bool = True) -> tuple[float, str]:
    old, new = WRONG_BITS[spec.name]
    source = spec.source.read_text()
    if old not in source:
        sys.exit(f"{spec.name}: {old!r} is not in the seed's kernel")
    candidate = workdir / "candidate.py"
    candidate.write_text(source.replace(old, new, 1))
    start = time.perf_counter()
    options = EvalOptions(device="cpu", rounds=rounds, warmup=warmup, early_stop=early_stop)
    verdict = evaluate(spec, candidate, options, reference)
    if verdict.outcome.value != "parity_failed":
        sys.exit(f"{spec.name}: the edited seed was not a parity failure: {verdict.outcome.value}: {verdict.reason}")
    return time.perf_counter() - start, verdict.reason.split(": [")[0]


def main_failing(args) -> None:
    """Each repeat evaluates the same candidate twice, alternated: every case run before the
    first is judged (early_stop=False, the gate's stop only) and judged as each case ends."""
    print("| seed | all cases run, s | stopped at the failing case, s | ratio of medians | first failing case |")
    print("| --- | --- | --- | ---: | --- |")
    for name in args.seeds:
        spec = resolve(name)
        reference = compute_reference(spec, EvalOptions(device="cpu", rounds=args.rounds, warmup=args.warmup))
        runs: dict[bool, list] = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                for early in (False, True):
                    runs[early].append(failing(spec, args.rounds, args.warmup, reference, Path(tmp), early))
        assert {r for _, r in runs[False]} == {r for _, r in runs[True]}, "the two ways gave different verdicts"
        late, early = ([t for t, _ in runs[k]] for k in (False, True))
        each = lambda ts: f"{statistics.median(ts):.1f} ({', '.join(f'{t:.1f}' for t in ts)})"  # noqa: E731
        print(f"| {name} | {each(late)} | {each(early)} | {statistics.median(early) / statistics.median(late):.2f} "
              f"| {runs[True][0][1]} |", flush=True)


def main_seed_forks(args) -> None:
    """Each repeat evaluates the same failing candidate twice, alternated: the seed's worker
    started fresh in the sandbox, then forked from the warm server."""
    from tik_agent.sandbox import forkserver

    print("| seed | seed's worker fresh: wall s, CPU s | forked: wall s, CPU s | ratios of medians (wall, CPU) |")
    print("| --- | --- | --- | ---: |")
    for name in args.seeds:
        spec = resolve(name)
        os.environ[forkserver.SWITCH] = "1"  # the reference also starts the server
        reference = compute_reference(spec, EvalOptions(device="cpu", rounds=args.rounds, warmup=args.warmup))
        runs: dict[str, list] = {"0": [], "1": []}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                for forks in ("0", "1"):
                    os.environ[forkserver.SWITCH] = forks
                    busy = busy_cpu_s()
                    wall, reason = failing(spec, args.rounds, args.warmup, reference, Path(tmp))
                    runs[forks].append((wall, busy_cpu_s() - busy, reason))
        assert {r for *_, r in runs["0"]} == {r for *_, r in runs["1"]}, "the two ways gave different verdicts"
        med = {k: [statistics.median(r[i] for r in runs[k]) for i in (0, 1)] for k in runs}
        each = lambda k: f"{med[k][0]:.1f}, {med[k][1]:.1f} ({'; '.join(f'{w:.1f}, {c:.1f}' for w, c, _ in runs[k])})"  # noqa: E731
        print(f"| {name} | {each('0')} | {each('1')} | {med['1'][0] / med['0'][0]:.2f}, {med['1'][1] / med['0'][1]:.2f} |",
              flush=True)


def main_survey(args) -> None:
    """Each repeat evaluates the seed against itself twice, alternated: without the survey, then with it."""
    print("| seed | without the survey, s | with it, s | ratio of medians | boundary cases |")
    print("| --- | --- | --- | ---: | --- |")
    for name in args.seeds:
        spec = resolve(name)
        reference = compute_reference(spec, EvalOptions(device="cpu", rounds=args.rounds, warmup=args.warmup))
        runs: dict[bool, list] = {False: [], True: []}
        for _ in range(args.repeat):
            for survey in (False, True):
                options = EvalOptions(device="cpu", rounds=args.rounds, warmup=args.warmup, survey=survey)
                start = time.perf_counter()
                verdict = evaluate(spec, spec.source, options, reference)
                if verdict.outcome.value not in ("passed", "slower"):
                    sys.exit(f"{name}: the seed against itself: {verdict.outcome.value}: {verdict.reason}")
                config = sorted(c["case"].split(":")[1] for c in verdict.cases if c["params"]["origin"] == "config")
                runs[survey].append((time.perf_counter() - start, config))
        each = lambda rs: f"{statistics.median(t for t, _ in rs):.1f} ({', '.join(f'{t:.1f}' for t, _ in rs)})"  # noqa: E731
        ratio = statistics.median(t for t, _ in runs[True]) / statistics.median(t for t, _ in runs[False])
        points = collections.Counter(runs[True][0][1])  # the first run's: each point and its cases (other data)
        shown = "; ".join(f"{p} x{n}" if n > 1 else p for p, n in sorted(points.items()))
        print(f"| {name} | {each(runs[False])} | {each(runs[True])} | {ratio:.2f} | {shown} |", flush=True)


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting), from /proc/stat: the
    seed's forked workers are the server's children, which this process's rusage never sees."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", help="default: rmsnorm logprobs matmul (--failing: rmsnorm logprobs)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--second-run", action="store_true",
                        help="time the start of a run of an already audited seed, before and after the audit cache")
    parser.add_argument("--failing", action="store_true",
                        help="time one evaluation of a parity-failing candidate instead (seeds: "
                        + ", ".join(WRONG_BITS) + ")")
    parser.add_argument("--seed-forks", action="store_true",
                        help="time a parity-failing evaluation with the seed's worker forked and started fresh")
    parser.add_argument("--survey", action="store_true",
                        help="time the seed against itself with the configuration survey and without it")
    args = parser.parse_args()
    if args.survey:
        args.seeds = args.seeds or ["rmsnorm", "logprobs"]
        return main_survey(args)
    if args.seed_forks:
        args.seeds = args.seeds or list(WRONG_BITS)
        if not set(args.seeds) <= set(WRONG_BITS):
            parser.error(f"--seed-forks: only {', '.join(WRONG_BITS)} have an edit that changes their bits")
        return main_seed_forks(args)
    if args.second_run:
        second_run(args.seeds or ["rmsnorm"], args.rounds, args.warmup, args.repeat)
        return
    if args.failing:
        args.seeds = args.seeds or list(WRONG_BITS)
        if not set(args.seeds) <= set(WRONG_BITS):
            parser.error(f"--failing: only {', '.join(WRONG_BITS)} have an edit that changes their bits")
        return main_failing(args)
    args.seeds = args.seeds or ["rmsnorm", "logprobs", "matmul"]
    print("| seed | cases | full evaluation, s | bare calls, s | full / bare |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in args.seeds:
        spec = resolve(name)
        fulls, bares = [], []
        for _ in range(args.repeat):  # alternate so drift hits both sides
            fulls.append(full(spec, args.rounds, args.warmup))
            bares.append(bare(spec, args.rounds, args.warmup))
        f, b = statistics.median(fulls), statistics.median(bares)
        print(f"| {name} | {len(evaluation_cases(spec, 'cpu'))} | {f:.1f} | {b:.1f} | {f / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
