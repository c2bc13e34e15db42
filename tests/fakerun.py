"""A run directory made with git alone (no evaluation): a bundled seed's root commit and accepted
commits whose verdicts are written, not computed, for tests of the views and of certification."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from tik_agent.run.lineage import LineageWriter, format_trailers
from tik_agent.spec.seeds import BUNDLED_DIR


def fake_run(base: Path, kernels: list[bytes], seed: str = "rmsnorm") -> Path:
    """``base/run``: the seed, then each of ``kernels`` accepted from the previous one (a0001, ...)."""
    run = base / "run"
    writer = LineageWriter.init(run)
    for name in ("kernel.py", "spec.toml"):
        shutil.copy2(BUNDLED_DIR / seed / name, run / name)
    (run / "evaluation.json").write_text(json.dumps({"kind": "seed", "cases": []}))
    root = writer.commit_root(["kernel.py", "spec.toml", "evaluation.json"], f"seed: {seed}\n\nKind: seed")
    (run / "run.json").write_text(json.dumps({"schema": 1, "seed": seed}))
    parent = root
    for i, kernel in enumerate(kernels, 1):
        attempt = f"a{i:04d}"
        folder = base / attempt
        folder.mkdir()
        (folder / "candidate.py").write_bytes(kernel)
        (folder / "evaluation.json").write_text(json.dumps({
            "kind": "variant", "outcome": "passed", "cases": [{"case": "par:x", "passed": True}],
            "speedup": 1.5 * i, "candidate_sha256": hashlib.sha256(kernel).hexdigest()}))
        trailers = {"Attempt-Id": attempt, "Parent-Commit": parent, "Speedup-Vs-Seed": f"{1.5 * i}",
                    "Speedup-Vs-Parent": "1.5"}
        parent = writer.commit_variant(attempt, parent, folder / "candidate.py", folder / "evaluation.json",
                                       f"{attempt}: variant\n\n{format_trailers(trailers)}")
    writer.set_best(parent)
    return run
