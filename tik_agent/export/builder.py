"""``export_wheel``: a run's accepted kernel -> one standalone wheel.

Steps: read and validate the run's kernel and records (:mod:`.source`), name
the distribution, write the certificate, render the package from the
template (:mod:`.project`), then build it with setuptools' PEP 517 backend
through ``pip wheel`` (offline: no index, no build isolation, no
dependencies) and move the single wheel into the output directory, replacing
any earlier wheel of the same distribution there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from tik_agent.errors import TikError, UsageError
from tik_agent.export import certificate as certificates
from tik_agent.export.project import CERTIFICATE_FILE, Distribution, distribution, render_project
from tik_agent.export.source import read_source

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 300


class BuildFailed(TikError):
    """The PEP 517 build of the generated project failed (a tik-agent bug, not bad input)."""


def export_wheel(run_dir: Path | str, out_dir: Path | str, commit: str | None = None, name: str | None = None,
                 version: str | None = None) -> Path:
    """Build the wheel of the run's best kernel (or ``commit``) into ``out_dir``; return its path."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out: {out_dir} exists and is not a directory")
    with tempfile.TemporaryDirectory(prefix="tik-export-") as tmp:
        work = Path(tmp)
        source = read_source(run_dir, commit, work)
        dist = distribution(source.spec.name, source.commit, name, version)
        certificate = certificates.build_certificate(source, _distribution_record(dist, source.spec.entry))
        project = work / "project"
        render_project(project, source, dist, certificate)
        wheel = _build(project, work / "dist")
        placed = _place(wheel, out_dir, dist)
    log.debug("exported %s %s (commit %s) to %s", dist.name, dist.version, source.commit[:12], placed)
    return placed


def _distribution_record(dist: Distribution, entry: str) -> dict:
    return {"name": dist.name, "version": dist.version, "import_name": dist.import_name,
            "op": f"{dist.namespace}::{entry}"}


def _build(project: Path, dist_dir: Path) -> Path:
    """``pip wheel`` with setuptools.build_meta, offline; exactly one wheel comes out."""
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
            "--disable-pip-version-check", "--no-input", "--quiet", "--wheel-dir", str(dist_dir), str(project)]
    # pip's own configuration (indexes, find-links) has no say: the build is offline and local.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    try:
        proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"building the wheel took more than {BUILD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise BuildFailed(f"building the wheel failed (pip exit {proc.returncode}):\n{(proc.stderr or proc.stdout)[-3000:]}")
    wheels = sorted(dist_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildFailed(f"expected one wheel from the build, found {[w.name for w in wheels]}")
    return wheels[0]


def _place(wheel: Path, out_dir: Path, dist: Distribution) -> Path:
    """Copy ``wheel`` into ``out_dir``; earlier wheels of this distribution there are removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    staging = out_dir / f".{wheel.name}.tmp"
    shutil.copyfile(wheel, staging)
    for old in out_dir.glob("*.whl"):
        try:
            same = canonicalize_name(parse_wheel_filename(old.name)[0]) == dist.name
        except InvalidWheelFilename:
            continue
        if same and old.name != target.name:
            log.info("replacing %s", old)
            old.unlink()
    staging.replace(target)
    return target.resolve()


def wheel_certificate(wheel: Path | str) -> dict:
    """The certificate inside an exported wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(f"/{CERTIFICATE_FILE}")
                 and ".dist-info/" not in n]
        if len(names) != 1:
            raise UsageError(f"{wheel}: not a wheel exported by tik-agent (no {CERTIFICATE_FILE})")
        return json.loads(zf.read(names[0]))
