"""Cost of whole evaluations of the configuration corpus (tests/adversarial/configs).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_corpus.py [FILE ...] [--repeat 2]

Evaluates each named file of the corpus (all of them by default) as its test does:
``evaluate`` without timing, on the corpus's small rmsnorm spec, against one reference
computed first.  Prints, per file, the median wall time of --repeat evaluations, the
outcome and how many cases the configuration survey added (``origin="config"``).  To
compare two trees, point PYTHONPATH at each in turn: the corpus files and the spec come
from this file's tree, the evaluator from PYTHONPATH's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
CORPUS = HERE / "tests" / "adversarial" / "configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="file names in tests/adversarial/configs (default: all)")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from seedutil import corpus_rmsnorm
    from tik_agent.judge.evaluate import compute_reference, evaluate
    from tik_agent.judge.options import EvalOptions
    from tik_agent.spec.schema import load_spec

    names = args.files or sorted(p.name for p in CORPUS.glob("*.py"))
    spec = load_spec(corpus_rmsnorm(Path(tempfile.mkdtemp(prefix="bench-corpus-"))))
    options = EvalOptions(device="cpu", timing=False)
    reference = compute_reference(spec, options)
    print("| file | s, median (each) | outcome | config cases |")
    print("| --- | --- | --- | ---: |")
    for name in names:
        times, verdict = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            verdict = evaluate(spec, CORPUS / name, options, reference)
            times.append(time.perf_counter() - start)
        config = sum(1 for c in verdict.cases if c["params"]["origin"] == "config")
        print(f"| {name} | {statistics.median(times):.1f} ({', '.join(f'{t:.1f}' for t in times)}) | "
              f"{verdict.outcome.value} | {config} |", flush=True)


if __name__ == "__main__":
    main()
