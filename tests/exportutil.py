"""The export tests' run: a lineage made the way ``tik-agent optimize`` makes one, its
wheel and the wheel unpacked, each built once per test session (:mod:`shared`).

The run's root is a small rmsnorm seed and its accepted commits carry real verdicts
from :func:`tik_agent.judge.evaluate.evaluate` on this machine; the variants change
``ROWS_PER_PROGRAM`` (identical bits, fewer programs).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

from seedutil import copy_seed, edit, shrink_grid
from shared import built_once
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import LineageWriter, format_trailers

SEED_FILES = ("kernel.py", "spec.toml", "reference.py")
RUN_NAME = "rmsnorm-20260101-000000"
PACKAGE = "tik_kernel_rmsnorm"


def make_run(base: Path, variants: tuple[str, ...] = ("4",), device: str = "cpu") -> Path:
    """A run directory of the tiny rmsnorm seed with one accepted commit per ROWS_PER_PROGRAM value.

    ``main`` is left on the first variant (the best); an empty tuple gives a
    run that accepted nothing.
    """
    from tik_agent.backends import device as devices
    from tik_agent.judge.evaluate import compute_reference, evaluate
    from tik_agent.judge.options import EvalOptions
    from tik_agent.spec.schema import load_spec

    base.mkdir(parents=True, exist_ok=True)
    seed = copy_seed("rmsnorm", base / "seeds")
    # Batches of one and five (five leaves a partial program for both variants, 4 and 2 rows a
    # program): the checks need cases, not many.
    shrink_grid(seed, batch_sizes="[1, 5]", dims={"N": "[100, 257]"})
    spec = load_spec(seed)
    run = base / "runs" / RUN_NAME
    writer = LineageWriter.init(run)
    for name in SEED_FILES:
        shutil.copy2(seed / name, run / name)
    env = devices.environment(device)
    (run / "evaluation.json").write_text(json.dumps({"schema": 1, "kind": "seed", "environment": env, "cases": [],
                                                     "timing": [], "speedup": 1.0}))
    root = writer.commit_root([*SEED_FILES, "evaluation.json"], "seed: rmsnorm\n\nKind: seed")
    (run / "run.json").write_text(json.dumps({"schema": 1, "seed": "rmsnorm", "device": device}))
    (run / "summary.json").write_text(json.dumps({"run_id": run.name, "seed": "rmsnorm"}))
    options = EvalOptions(device=device, rounds=3)
    reference = compute_reference(spec, options) if variants else None
    parent, parent_file, best = root, seed / "kernel.py", None
    for i, rows in enumerate(variants, start=1):
        attempt = f"a{i:04d}"
        folder = run / "attempts" / attempt
        folder.mkdir(parents=True)
        candidate = folder / "candidate.py"
        shutil.copy2(seed / "kernel.py", candidate)
        edit(candidate, "ROWS_PER_PROGRAM = 1", f"ROWS_PER_PROGRAM = {rows}")
        for _ in range(3):  # a variant measured slower on a loaded CPU is timing noise: measure it again
            verdict = evaluate(spec, candidate, options, reference, parent=parent_file)
            if verdict.outcome is not Outcome.SLOWER:
                break
        assert verdict.passed, verdict.reason
        record = dict(verdict.to_dict(), kind="variant", attempt_id=attempt, parent_commit=parent)
        (folder / "evaluation.json").write_text(json.dumps(record, indent=2))
        trailers = {"Attempt-Id": attempt, "Parent-Commit": parent, "Speedup-Vs-Seed": f"{verdict.speedup:.4f}",
                    "Speedup-Vs-Parent": f"{verdict.speedup_vs_parent:.4f}",
                    "Parity-Cases": f"{verdict.cases_passed}/{len(verdict.cases)}", "Device": device,
                    "Agent": "offline", "Model": "none", "Tokens-Input": "0", "Tokens-Output": "0"}
        sha = writer.commit_variant(attempt, parent, candidate, folder / "evaluation.json",
                                    f"{attempt}: ROWS_PER_PROGRAM = {rows}\n\n{format_trailers(trailers)}")
        best = best or sha
        parent, parent_file = sha, candidate
    if best:
        writer.set_best(best)
    return run


def shared_run() -> Path:
    """One run with two accepted commits (a0001 the best), for every export test module."""
    return built_once("export-run", lambda base: make_run(base, variants=("4", "2"))) / "runs" / RUN_NAME


def shared_wheel() -> Path:
    """The wheel ``export`` makes of :func:`shared_run`'s best commit (read-only: copy to change it)."""
    from tik_agent.export import export_wheel

    dist = built_once("export-wheel", lambda d: export_wheel(shared_run(), d))
    (wheel,) = dist.glob("*.whl")
    return wheel


def shared_unpacked() -> Path:
    """:func:`shared_wheel` unpacked: a directory to put on PYTHONPATH."""
    def unpack(target: Path) -> None:
        with zipfile.ZipFile(shared_wheel()) as zf:
            zf.extractall(target)

    return built_once("export-unpacked", unpack)


def git_file(run: Path, ref: str, path: str) -> bytes:
    return subprocess.run(["git", "cat-file", "blob", f"{ref}:{path}"], cwd=run, capture_output=True, check=True).stdout


def git_rev(run: Path, ref: str) -> str:
    return subprocess.run(["git", "rev-parse", f"{ref}^{{commit}}"], cwd=run, capture_output=True, text=True,
                          check=True).stdout.strip()
