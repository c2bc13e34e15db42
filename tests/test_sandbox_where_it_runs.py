"""The sandbox where it runs (issue 22, item 4).

* A warm Triton cache copied into the worker's directory stays writable inside: a kernel
  the cache lacks compiles there.  Before, the copy was bound read-only (bwrap binds the
  directory's existing entries read-only) and owned by root while the worker ran as nobody.
* The isolation probe starts what a worker starts: a mechanism under which the worker
  cannot import the package (installed in a folder its user cannot read) fails its probe
  and the next one is used, with the reason in its notice.
"""

import shutil
import sys
from pathlib import Path

import pytest

from tik_agent.sandbox import isolation
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment

WRITE = ("import os; os.makedirs('triton-cache/new', exist_ok=True); "
         "open('triton-cache/new/kernel.json', 'w').write('{}'); open('triton-cache/old/entry', 'a').write('more')")


def _mechanisms():
    found = [pytest.param(isolation.best(), id=f"best-{isolation.best().mechanism}")]
    if shutil.which("unshare") and shutil.which("setpriv"):
        drop = isolation.Isolation("unshare", ("user", "pid", "net"), True, landlock=False, seccomp=False)
        found.append(pytest.param(drop, id="unshare-setpriv", marks=pytest.mark.skipif(
            not isolation._nobody_can_run_python(), reason="nobody cannot reach this Python (a 0700 folder above it)")))
    return found


def _run(workdir: Path, iso, writable: tuple[str, ...]) -> int:
    (workdir / "triton-cache" / "old").mkdir(parents=True)
    (workdir / "triton-cache" / "old" / "entry").write_text("warm")
    result = run_sandboxed([sys.executable, "-I", "-c", WRITE], workdir, SandboxLimits(wall_seconds=60),
                           scrubbed_environment(workdir=workdir), isolation=iso, writable=writable)
    return result.returncode


@pytest.mark.parametrize("iso", _mechanisms())
def test_the_worker_writes_new_entries_into_the_warm_cache(tmp_path, iso):
    workdir = tmp_path / "box"
    workdir.mkdir()
    assert _run(workdir, iso, ("triton-cache",)) == 0
    assert (workdir / "triton-cache" / "new" / "kernel.json").read_text() == "{}"
    assert (workdir / "triton-cache" / "old" / "entry").read_text() == "warmmore"


@pytest.mark.parametrize("iso", _mechanisms())
def test_without_writable_the_cache_is_read_only_inside(tmp_path, iso):
    """The negative control: the same program, the cache not named writable."""
    if not (iso.drop_uid or iso.mechanism == "bwrap"):
        pytest.skip(f"{iso.mechanism} keeps the caller's uid and view: nothing makes the copy read-only")
    workdir = tmp_path / "box"
    workdir.mkdir()
    assert _run(workdir, iso, ()) != 0
    assert not (workdir / "triton-cache" / "new").exists()


def test_a_mechanism_whose_worker_cannot_import_the_package_falls_back(tmp_path, monkeypatch):
    import tik_agent

    if isolation.best().mechanism != "bwrap" or not isolation.best().drop_uid:
        pytest.skip("needs bwrap started as root (the worker drops to nobody)")
    package = tmp_path / "site" / "tik_agent"
    shutil.copytree(Path(tik_agent.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    package.chmod(0o700)  # as a 0700 install folder: root reads it, nobody does not
    monkeypatch.setattr(isolation, "_package_root", lambda: str(tmp_path / "site"))
    isolation.best.cache_clear()
    try:
        chosen = isolation.best()
    finally:
        isolation.best.cache_clear()
    assert chosen.mechanism != "bwrap", chosen
    assert "bwrap: exit" in chosen.why and "tik_agent" in chosen.why, chosen.why
    # The control: the same probe of the real install passes under bwrap.
    monkeypatch.undo()
    assert isolation.best().mechanism == "bwrap" and isolation._probe(isolation.best()) is None
