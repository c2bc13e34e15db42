"""The compile-only replay's steps (:mod:`tik_agent.backends.compile_rehearsal`) run as
processes, a number at a time: each from an empty cache of its own (the rehearsal, which
measures what a worker without a warm cache compiles) or into one kept cache folder, a part
of it per check step (a node's warm cache, ``scripts/gpu_check_steps.py warm``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tik_agent.backends.compile_rehearsal import LAUNCHERS_ENV, STEPS
from tik_agent.plaintext import plain

REPLAY_MODULE = "tik_agent.backends.compile_rehearsal"


def step_environment(cache: Path) -> dict[str, str]:
    """A step process's environment: a sandboxed worker's (:func:`scrubbed_environment`: no
    variable of the caller's that could change Triton's cache keys, such as a debug flag),
    with the interpreter's import path and ``cache`` as its Triton cache."""
    from tik_agent.sandbox.environment import scrubbed_environment

    extra = {"TRITON_CACHE_DIR": str(cache)}
    if os.environ.get("PYTHONPATH"):
        extra["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return scrubbed_environment(extra)


def cache_part(step: str) -> str:
    """The folder of a node's warm cache a replay step compiles into: ``probes`` (the probes
    step compiles all seeds' in one process), ``eval-SEED`` (one evaluation's workers copy it,
    a tenth of the whole), ``kernels``."""
    if step.startswith("probes-"):
        return "probes"
    if step.startswith("eval-"):
        return step.partition(":")[0]
    return "kernels"


def run_steps(out: Path, target: str, jobs: int, steps: list[str] | None = None,
              cache: Path | None = None) -> tuple[bool, str]:
    """Each step in a process of its own, ``jobs`` at a time; ``out/compile.json`` is rewritten
    as each step finishes.  Whether every step passed and its kernels table is whole, and the
    tables for ``summary.md``.

    Without ``cache`` (the rehearsal) each step starts with an empty Triton cache of its own,
    as a worker on a node would without a warm one, and the caches are dropped.  With it (a
    node's warm cache: ``gpu_check_steps.py warm``) each step compiles into the part of that
    folder its check step copies (:func:`cache_part`), which is kept: a variant two steps of
    a part share is compiled once, so a step's seconds depend on what ran beside it."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor, as_completed

    steps = list(steps or STEPS)
    report: dict = {"target": target, "steps": [], "kernels": [], "cache": str(cache) if cache else None}
    work = Path(tempfile.mkdtemp(prefix="compile-"))

    def one(step: str) -> dict:
        result, log = work / f"{step}.json", work / f"{step}.log"
        env = step_environment(cache / cache_part(step) if cache else work / f"cache-{step}")
        if cache:  # a node's warm cache: the variants' C launchers too, where libcuda is
            env[LAUNCHERS_ENV] = "1"
        start = time.monotonic()
        with log.open("w") as f:
            done = subprocess.run([sys.executable, "-m", REPLAY_MODULE, step, str(result), "--target", target], env=env,
                                  stdout=f, stderr=subprocess.STDOUT)
        row = json.loads(result.read_text()) if done.returncode == 0 and result.exists() else {"step": step}
        row.update(exit=done.returncode, process_s=round(time.monotonic() - start, 1))
        if done.returncode:
            row["error"] = log.read_text()[-400:]
        return row

    try:
        with ThreadPoolExecutor(jobs) as pool:
            for done in as_completed([pool.submit(one, step) for step in steps]):
                row = done.result()
                report["kernels"] += row.pop("kernels", [])
                report["steps"].append(row)
                (out / "compile.json").write_text(json.dumps(report, indent=1))
                print(f"compile {row['step']}: exit {row['exit']}, {row.get('variants', '-')} variants, "
                      f"{row.get('compile_s', '-')} s compiling, {row['process_s']} s", flush=True)
                if row.get("error"):  # the step's own last lines: a failed step says why in the log
                    tail = [line for line in row["error"].splitlines() if line.strip()][-3:]
                    print("\n".join(f"  {plain(line)}" for line in tail), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    parts = ", ".join(f"{p.name} {cache_summary(p)}" for p in sorted(cache.iterdir()) if p.is_dir()) if cache else ""
    title = (f"## the node's warm Triton cache, for {target} ({jobs} at a time; {parts})"
             if cache else f"## compile-only rehearsal for {target} ({jobs} at a time, each step with an empty cache)")
    lines = [title, "",
             "| step | launches | variants compiled | compile s | step s | exit |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    report["steps"].sort(key=lambda r: steps.index(r["step"]))
    lines += [f"| {r['step']} | {r.get('launches', '-')} | {r.get('variants', '-')} | {r.get('compile_s', '-')} | "
              f"{r['process_s']} | {r['exit']} |" for r in report["steps"]]
    if cache:  # the C launchers of the warm variants (a node's libcuda and C compiler build them)
        built = sum(r.get("launchers_built", 0) for r in report["steps"])
        errors = sorted({r["launcher_error"] for r in report["steps"] if r.get("launcher_error")})
        lines += ["", f"C launchers built into the cache: {built}"
                  + (f"; not built by some steps: {'; '.join(errors)[:300]}" if errors else "")]
    lines += ["", "| seed | cell | kernel | registers | spill bytes | grid | warps | stages | load bytes |",
              "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | --- |"]
    lines += [f"| {k['seed']} | {k['cell']} | {k['kernel']} | {k['registers']} | {k['spill_bytes']} | "
              f"{'x'.join(map(str, k['grid']))} | {k['num_warps']} | {k['num_stages']} | "
              f"{', '.join(map(str, k.get('load_bytes', []))) or '-'} |" for k in report["kernels"]]
    keys = {"seed", "cell", "kernel", "registers", "spill_bytes", "grid", "num_warps", "num_stages"}
    malformed = [k for k in report["kernels"] if not keys <= set(k) or not isinstance(k["grid"], list)]
    whole = not malformed and ("kernels" not in steps or bool(report["kernels"]))
    if not whole:
        lines.append(f"\nThe kernels table lacks {sorted(keys)} in {len(malformed)} rows, or is empty.")
    return whole and all(r["exit"] == 0 for r in report["steps"]), "\n".join(lines)


def cache_variants(cache: Path) -> int:
    """How many compiled variants a Triton cache folder holds: one ``*.json`` of metadata each
    beside its binaries (the ``__grp__*`` groups that list them aside)."""
    return sum(1 for p in Path(cache).rglob("*.json") if p.is_file() and not p.name.startswith("__grp__"))


def cache_summary(cache: Path) -> str:
    """A Triton cache folder's variants and size."""
    size = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file())
    return f"{cache_variants(cache)} variants, {size / 2**20:.0f} MiB"
