"""A wheel's package rendered the way ``tik-agent export`` renders it, without a run:
for tests of the package's own modules (the op, its autograd, the drop-in, verify())."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tik_agent.export.builder import _distribution_record
from tik_agent.export.certificate import build_certificate
from tik_agent.export.project import distribution, render_project
from tik_agent.export.source import ExportSource
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec


def render_package(dest: Path, seed_dir: Path, evaluation: dict | None = None) -> tuple[Path, str]:
    """(directory to put on PYTHONPATH, import name) of the package of ``seed_dir``'s kernel.

    Without ``evaluation`` the certificate lists the seed's CPU evaluation cases as
    passed without running them: a stand-in for tests of routing, never of parity."""
    spec = load_spec(seed_dir)
    if evaluation is None:
        evaluation = {"outcome": "passed", "environment": {"device": "cpu"},
                      "cases": [{"case": c.id, "passed": True, "checks": []} for c in evaluation_cases(spec, "cpu")]}
    kernel = (seed_dir / "kernel.py").read_bytes()
    source = ExportSource(run_id="test", commit="c" * 40, root_commit="r" * 40, attempt_id=None, parent_commit=None,
                          spec=spec, spec_source=(seed_dir / "spec.toml").read_bytes(), seed_source=kernel,
                          kernel_source=kernel, evaluation=evaluation, trailers={}, ancestry=())
    dist = distribution(spec.name, source.commit)
    render_project(dest, source, dist, build_certificate(source, _distribution_record(dist, spec.entry)))
    return dest, dist.import_name


def run_fresh(path: Path, body: str) -> dict:
    """Run ``body`` in a fresh interpreter with ``path`` on PYTHONPATH (no interpreter mode
    forced: the package decides); ``body`` prints one JSON line last."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET",)}
    env["PYTHONPATH"] = str(path)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
