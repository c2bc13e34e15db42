"""Throughput of the optimisation loop with the offline agent.

    .venv/bin/python benchmarks/bench_optimize.py [--seed rmsnorm] [--iterations 6] [--workers 1 2] [--small]
        [--executor local|ray]

One run is created (reference and seed audit: reported as set-up, not
counted), then copied once per ``--workers`` value and optimised for
``--iterations`` attempts.  For each it reports attempts and evaluations per
minute, and the share of the loop's wall time during which no evaluation was
running (proposals, git, journal, start-up): the loop's own overhead.
``--small`` shrinks the parity grid and the timing cell to a few seconds per
evaluation.  ``--executor ray`` evaluates on Ray actors instead (one per
worker) in a local Ray instance the benchmark starts with as many CPUs as the
largest ``--workers``; the actors' start-up is reported apart, not counted.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path

from tik_agent.backends import device as devices
from tik_agent.search import setup
from tik_agent.agents.offline import OfflineAgent
from tik_agent.run.journal import finished_records
from tik_agent.search.executor import EXECUTORS, open_executor
from tik_agent.search.optimize import Optimizer
from tik_agent.run.runconfig import Limits, RunConfig, utc_now
from tik_agent.spec.seeds import seed_directory

SMALL_WORKLOAD = """[[workload]]
name = "gpu"
M = 4
N = 4096
dtype = "bfloat16"
devices = ["cuda"]

[[workload]]
name = "small"
M = 16
N = 512
dtype = "float32"
devices = ["cpu"]

[tunables]
"""


def small_copy(seed_dir: Path, dest: Path) -> Path:
    target = dest / "small-seed"
    shutil.copytree(seed_dir, target)
    t = (target / "spec.toml").read_text()
    for pattern, value in ((r"batch_sizes = \[[^\]]*\]", "batch_sizes = [1, 3]"),
                           (r"dtypes = \[[^\]]*\]", 'dtypes = ["float32"]'), (r"seeds = \[[^\]]*\]", "seeds = [0]"),
                           (r"regimes = \[[^\]]*\]", 'regimes = ["normal", "special"]'),
                           (r"(?m)^N = \[[^\]]*\]", "N = [256]")):
        t = re.sub(pattern, value, t)
    head, tunables = t[: t.index("[[workload]]")], t[t.index("[tunables]") + len("[tunables]\n"):]
    (target / "spec.toml").write_text(head + SMALL_WORKLOAD + tunables)
    return target


def union_seconds(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def bench(template: Path, work: Path, workers: int, iterations: int, executor: str = "local") -> dict:
    path = work / f"workers-{workers}"
    shutil.copytree(template, path)
    config = RunConfig.load(path).extended(limits={"iterations": iterations}, workers=workers)
    session = setup.reopen(path, config)
    pool, started = None, time.time()
    try:
        pool = open_executor(executor, session, workers=workers)
        startup = time.time() - started
        start = time.time()
        summary = Optimizer(session, OfflineAgent(seed=0), executor=pool).run()
        wall = time.time() - start
    finally:
        if pool is not None:
            pool.close()
        session.close()
    records = finished_records(path)
    evaluations = len(list(path.glob("attempts/*/report.json"))) + len(list(path.glob("attempts/*/confirm.json")))
    busy = union_seconds([(r.finished_at - r.eval_s, r.finished_at) for r in records if r.eval_s])
    return {"workers": workers, "startup": startup, "attempts": len(records), "evaluations": evaluations, "wall": wall,
            "per_min": 60 * len(records) / wall, "evals_per_min": 60 * evaluations / wall,
            "outside": 1 - busy / wall, "best": summary.best_speedup, "accepted": summary.accepted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", default="rmsnorm")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="a shrunk parity grid and timing cell")
    parser.add_argument("--executor", choices=EXECUTORS, default="local")
    args = parser.parse_args()
    if args.executor == "ray":  # one local instance for every --workers value, closed at the end
        import ray

        ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False,
                 object_store_memory=100 * 1024**2, log_to_driver=False, configure_logging=False)

    work = Path(tempfile.mkdtemp(prefix="tik-bench-optimize-"))
    seed = seed_directory(args.seed)
    if args.small:
        seed = small_copy(seed, work)
    env = devices.environment("cpu")
    config = RunConfig(run_id="bench", seed_name=args.seed, seed_source=str(seed), agent="offline", model=None,
                       base_url=None, rng_seed=0, device="cpu", rounds=args.rounds, warmup=1, eval_timeout_s=900.0,
                       workers=1, limits=Limits(iterations=args.iterations), binding=devices.binding(env),
                       created=utc_now())
    start = time.time()
    setup.create(work / "template", config).close()
    print(f"{args.seed}{' (small)' if args.small else ''}: set-up (seed outputs and audit) {time.time() - start:.1f} s")
    results = [bench(work / "template", work, w, args.iterations, args.executor) for w in args.workers]
    print(f"executor {args.executor}")
    print(f"{'workers':>7} {'start s':>7} {'attempts':>8} {'evals':>5} {'wall s':>7} {'attempts/min':>12} {'evals/min':>9} "
          f"{'outside eval':>12} {'accepted':>8} {'best':>7}")
    for r in results:
        print(f"{r['workers']:>7} {r['startup']:>7.1f} {r['attempts']:>8} {r['evaluations']:>5} {r['wall']:>7.1f} {r['per_min']:>12.2f} "
              f"{r['evals_per_min']:>9.2f} {r['outside']:>12.1%} {r['accepted']:>8} {r['best']:>6.2f}x")
    by = {r["workers"]: r for r in results}
    if 1 in by and 2 in by:
        print(f"--workers 2 vs 1: {by[2]['per_min'] / by[1]['per_min']:.2f}x attempts/min, "
              f"{by[2]['evals_per_min'] / by[1]['evals_per_min']:.2f}x evaluations/min")
    shutil.rmtree(work, ignore_errors=True)
    if args.executor == "ray":
        import ray

        ray.shutdown()


if __name__ == "__main__":
    main()
