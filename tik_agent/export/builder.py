"""``export_wheel``: a run's accepted kernel -> one standalone wheel (``export_seed_wheel``:
a seed itself, certified by its own audit).

Steps: read and validate the run's kernel and records (:mod:`.source`), name
the distribution, write the certificate, render the package from the
template (:mod:`.project`), then build it with setuptools' PEP 517 backend
through ``pip wheel`` (offline: no index, no build isolation, no
dependencies) and put the single wheel into the output directory.

The build is reproducible: the certificate's time and the wheel's file times
are the exported commit's, so exporting one commit under one name and version
twice gives the same bytes.  Nothing already in the output directory is
removed or overwritten: earlier wheels (other versions, other commits) stay;
a file of the new wheel's name with the same bytes is kept as it is; one with
other bytes is refused unless ``force``, which replaces that one file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tik_agent.errors import TikError, UsageError
from tik_agent.export import certificate as certificates
from tik_agent.export.project import CERTIFICATE_FILE, Distribution, distribution, render_project
from tik_agent.export.source import ExportSource, read_source

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 300
# Zip entries cannot be dated before 1980; SOURCE_DATE_EPOCH is clamped to it.
ZIP_EPOCH = 315532800


class BuildFailed(TikError):
    """The PEP 517 build of the generated project failed (a tik-agent bug, not bad input)."""


def export_wheel(run_dir: Path | str, out_dir: Path | str, commit: str | None = None, name: str | None = None,
                 version: str | None = None, force: bool = False) -> Path:
    """Build the wheel of the run's best kernel (or ``commit``) into ``out_dir``; return its path.

    A file of the wheel's name already in ``out_dir`` is kept when it holds the same
    bytes; with other bytes it is a :class:`UsageError` unless ``force`` (then it is
    replaced, with a warning).  Nothing else in ``out_dir`` is touched."""
    out_dir = _checked_out_dir(out_dir)
    with tempfile.TemporaryDirectory(prefix="tik-export-") as tmp:
        source = read_source(run_dir, commit, Path(tmp))
        placed = _export(source, Path(tmp), out_dir, name, version, force)
    log.debug("exported commit %s to %s", source.commit[:12], placed)
    return placed


def export_seed_wheel(seed: str | Path, out_dir: Path | str, name: str | None = None, version: str | None = None,
                      force: bool = False, device: str | None = None, fresh_audit: bool = False) -> Path:
    """Build the wheel of a seed itself (a bundled seed's name or a seed directory), certified
    by the seed's own audit (from the seed-audit cache when it holds it), into ``out_dir``.
    No run directory is made; ``out_dir`` is treated as by :func:`export_wheel`."""
    from tik_agent.export.seedsource import read_seed_source

    out_dir = _checked_out_dir(out_dir)
    with tempfile.TemporaryDirectory(prefix="tik-export-") as tmp:
        source, audit = read_seed_source(seed, Path(tmp) / "audit", device, fresh_audit)
        placed = _export(source, Path(tmp), out_dir, name, version, force)
    log.debug("exported the seed %s (audit %s, %s) to %s", source.spec.name, audit.key.digest[:12],
              "reused" if audit.reused else "computed", placed)
    return placed


def _checked_out_dir(out_dir: Path | str) -> Path:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out: {out_dir} exists and is not a directory")
    return out_dir


def _export(source: ExportSource, work: Path, out_dir: Path, name: str | None, version: str | None,
            force: bool) -> Path:
    """Certificate, project, build and placement of ``source``'s wheel (``work``: a scratch folder)."""
    dist = distribution(source.spec.name, source.commit, name, version, label=source.version_label)
    certificate = certificates.build_certificate(source, _distribution_record(dist, source.spec.entry))
    project = work / "project"
    render_project(project, source, dist, certificate)
    wheel = _build(project, work / "dist", source.committed_at)
    return _place(wheel, out_dir, force)


def _distribution_record(dist: Distribution, entry: str) -> dict:
    return {"name": dist.name, "version": dist.version, "import_name": dist.import_name,
            "op": f"{dist.namespace}::{entry}"}


def _build(project: Path, dist_dir: Path, epoch: int | None = None) -> Path:
    """``pip wheel`` with setuptools.build_meta, offline; exactly one wheel comes out.  With
    ``epoch`` (seconds) every file in the wheel is dated then, so the bytes depend on the
    sources only."""
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
            "--disable-pip-version-check", "--no-input", "--quiet", "--wheel-dir", str(dist_dir), str(project)]
    # pip's own configuration (indexes, find-links) has no say: the build is offline and local.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(max(int(epoch), ZIP_EPOCH))
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


def _place(wheel: Path, out_dir: Path, force: bool = False) -> Path:
    """Copy ``wheel`` into ``out_dir`` under its own name, never touching another file there.

    The copy goes to a temporary name of its own first and is removed on any
    failure, so ``out_dir`` never holds a partial wheel; it takes the wheel's
    name only if that name is free (or ``force`` and it holds other bytes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    if os.path.lexists(target):
        if target.is_file() and target.read_bytes() == wheel.read_bytes():
            log.info("%s: already there with the same bytes; kept", target)
            return target.resolve()
        _refuse(target, force)
    fd, name = tempfile.mkstemp(dir=out_dir, prefix=f".{wheel.name}.", suffix=".part")
    os.close(fd)
    staging = Path(name)
    try:
        shutil.copyfile(wheel, staging)
        shutil.copymode(wheel, staging)  # mkstemp's 0600 would hide the wheel from other users
        if not _link_new(staging, target):
            _refuse(target, force)  # raises unless force
            staging.replace(target)
            log.warning("%s: overwritten (--force); it held other bytes", target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
    return target.resolve()


def _refuse(target: Path, force: bool) -> None:
    """A file of the wheel's name with other bytes: an error unless ``force`` (never a directory)."""
    if target.is_dir():
        raise UsageError(f"--out: {target} is a directory; the wheel needs that name (nothing was changed)")
    if not force:
        raise UsageError(f"--out: {target} already exists with other bytes than this export; it was left as it "
                         "is (pass --force to overwrite it, or export with another --version or --out)")


def _link_new(staging: Path, target: Path) -> bool:
    """Give ``staging``'s file the name ``target`` if that name is free; False if it is taken.
    A hard link fails rather than replace a file that appeared since the first look."""
    try:
        os.link(staging, target)
    except FileExistsError:
        return False
    except OSError:
        # A file system without hard links: look, then rename (a narrow window, not an atomic step).
        if os.path.lexists(target):
            return False
        staging.replace(target)
    return True


def wheel_certificate(wheel: Path | str) -> dict:
    """The certificate inside an exported wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(f"/{CERTIFICATE_FILE}")
                 and ".dist-info/" not in n]
        if len(names) != 1:
            raise UsageError(f"{wheel}: not a wheel exported by tik-agent (no {CERTIFICATE_FILE})")
        return json.loads(zf.read(names[0]))
