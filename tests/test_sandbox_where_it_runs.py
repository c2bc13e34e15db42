"""The sandbox where it runs (issue 22, item 4).

* A warm Triton cache copied into the worker's directory takes new entries inside: a kernel
  the cache lacks compiles there.  Before, the copy was bound read-only (bwrap binds the
  directory's existing entries read-only) and owned by root while the worker ran as nobody.
  What it holds (the seed's compiled kernels, timed in the candidate's worker) stays as it
  was copied: no entry can be changed, removed or renamed, nor the cache itself.
* The isolation probe starts what a worker starts: a mechanism under which the worker
  cannot import the package (installed in a folder its user cannot read) fails its probe
  and the next one is used, with the reason in its notice.
* The package installed below a 0700 folder (as a ``mktemp -d`` install is): under bwrap the
  worker, dropped to nobody, imports it (bwrap binds it into the worker's view); under
  unshare with setpriv (bubblewrap absent) nobody cannot, so the worker keeps the caller's
  uid and the notice names the folder; once the folder is open to others (as
  ``scripts/gpu-check.sh`` makes its own), the worker runs as nobody and imports it.
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tik_agent.sandbox import isolation
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment

ADD = ("import os; os.makedirs('triton-cache/new', exist_ok=True); "
       "open('triton-cache/new/kernel.json', 'w').write('{}')")
# What a candidate would do to the seed's compiled kernels in the cache: each must fail.
TAMPER = {
    "append": "open('triton-cache/old/entry', 'a').write('more')",
    "replace": "open('triton-cache/old/entry', 'w').write('forged')",
    "remove": "import os; os.remove('triton-cache/old/entry')",
    "rename entry": "import os; os.rename('triton-cache/old', 'triton-cache/moved')",
    "rename cache": "import os; os.rename('triton-cache', 'elsewhere')",
}


def _mechanisms():
    found = [pytest.param(isolation.best(), id=f"best-{isolation.best().mechanism}")]
    if shutil.which("unshare") and shutil.which("setpriv"):
        drop = isolation.Isolation("unshare", ("user", "pid", "net"), True, landlock=False, seccomp=False)
        found.append(pytest.param(drop, id="unshare-setpriv", marks=pytest.mark.skipif(
            isolation._unreachable_for_nobody() is not None,
            reason="nobody cannot reach this Python or the package (a 0700 folder above it)")))
    return found


def _run(workdir: Path, iso, program: str, append_only: tuple[str, ...]) -> int:
    if not (workdir / "triton-cache").exists():
        (workdir / "triton-cache" / "old").mkdir(parents=True)
        (workdir / "triton-cache" / "old" / "entry").write_text("warm")
    result = run_sandboxed([sys.executable, "-I", "-c", program], workdir, SandboxLimits(wall_seconds=60),
                           scrubbed_environment(workdir=workdir), isolation=iso, append_only=append_only)
    return result.returncode


def _box(tmp_path: Path, iso) -> Path:
    """The worker's directory, for a mechanism that can protect the copy at all."""
    if not (iso.mechanism == "bwrap" or iso.drop_uid):
        pytest.skip(f"{iso.mechanism} keeps the caller's uid and view: nothing protects the copy")
    workdir = tmp_path / "box"
    workdir.mkdir()
    return workdir


@pytest.mark.parametrize("iso", _mechanisms())
def test_the_worker_adds_entries_to_the_warm_cache_and_changes_none(tmp_path, iso):
    workdir = _box(tmp_path, iso)
    assert _run(workdir, iso, ADD, ("triton-cache",)) == 0
    assert (workdir / "triton-cache" / "new" / "kernel.json").read_text() == "{}"
    for what, program in TAMPER.items():
        assert _run(workdir, iso, program, ("triton-cache",)) != 0, what
    assert (workdir / "triton-cache" / "old" / "entry").read_text() == "warm"


@pytest.mark.parametrize("iso", _mechanisms())
def test_without_append_only_the_cache_takes_no_new_entry(tmp_path, iso):
    """The negative control: the same program, the cache not named append-only."""
    workdir = _box(tmp_path, iso)
    assert _run(workdir, iso, ADD, ()) != 0
    assert not (workdir / "triton-cache" / "new").exists()


def _best_with(tmp_path: Path, monkeypatch, spoil) -> isolation.Isolation:
    """The mechanism chosen when the package the worker imports is a copy ``spoil`` edited."""
    import tik_agent

    package = tmp_path / "site" / "tik_agent"
    shutil.copytree(Path(tik_agent.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    spoil(package)
    monkeypatch.setattr(isolation, "_package_root", lambda: str(tmp_path / "site"))
    isolation.best.cache_clear()
    try:
        return isolation.best()
    finally:
        isolation.best.cache_clear()


def test_a_mechanism_whose_worker_cannot_import_the_package_falls_back(tmp_path, monkeypatch):
    if isolation.best().mechanism != "bwrap" or not isolation.best().drop_uid:
        pytest.skip("needs bwrap started as root (the worker drops to nobody)")
    chosen = _best_with(tmp_path, monkeypatch, lambda package: package.chmod(0o700))  # root reads it, nobody not
    assert chosen.mechanism != "bwrap", chosen
    assert "bwrap: exit" in chosen.why and "tik_agent" in chosen.why, chosen.why
    # The control: the same probe of the real install passes under bwrap.
    monkeypatch.undo()
    assert isolation.best().mechanism == "bwrap" and isolation._probe(isolation.best()) is None


def test_the_probe_imports_the_worker_not_only_the_interpreter(tmp_path, monkeypatch):
    """A package whose worker module cannot be imported: a bare interpreter (the probe
    before) starts fine under every mechanism, so only a probe that does what a worker
    does finds that no mechanism can run an evaluation."""
    chosen = _best_with(tmp_path, monkeypatch, lambda package: (package / "sandbox" / "worker.py").unlink())
    assert chosen.mechanism == "process" and not chosen.seccomp and not chosen.landlock, chosen
    assert "No module named 'tik_agent.sandbox.worker'" in chosen.why, chosen.why


# A worker dropped to nobody without a mount view needs an interpreter nobody can run; this
# machine's own may lie under /root (0700).  The system's interpreter of the same minor version,
# in a venv outside any closed folder that reaches this interpreter's site-packages (torch,
# triton) through a .pth file, stands in for a node's.
INSTALL_AND_CHOOSE = """
import json, shutil, sys
site, hide_bwrap = sys.argv[1], sys.argv[2] == "1"
sys.path.insert(0, site)
import tik_agent
assert tik_agent.__file__.startswith(site), tik_agent.__file__
from tik_agent.sandbox import isolation
if hide_bwrap:  # a node without bubblewrap
    which = shutil.which
    shutil.which = lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k)
chosen = isolation.best()
print(json.dumps({"mechanism": chosen.mechanism, "drop_uid": chosen.drop_uid, "why": chosen.why,
                  "probe": isolation._probe(chosen)}))
"""


@pytest.fixture(scope="module")
def nobody_python():
    import os
    import site

    system = Path(f"/usr/bin/python3.{sys.version_info.minor}")
    if os.geteuid() != 0 or not system.exists() or not shutil.which("setpriv") or not shutil.which("unshare"):
        pytest.skip("needs root, setpriv, unshare and the system's python3 of this minor version")
    base = Path(tempfile.mkdtemp(prefix="tik-nobody-", dir="/tmp"))
    base.chmod(0o755)
    try:
        made = subprocess.run([str(system), "-m", "venv", "--without-pip", str(base / "venv")], capture_output=True)
        if made.returncode:
            pytest.skip(f"the system's python cannot make a venv: {made.stderr.decode()[-200:]}")
        (base / "venv" / "lib" / f"python3.{sys.version_info.minor}" / "site-packages" / "outer.pth").write_text(
            "\n".join(site.getsitepackages()) + "\n")
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _choose(base: Path, parent_mode: int, hide_bwrap: bool) -> dict:
    """The package copied below ``base/parent`` (mode ``parent_mode``), then the mechanism the
    system's interpreter chooses there and whether its probe passes."""
    import tik_agent

    parent = base / f"parent-{parent_mode:o}-{int(hide_bwrap)}"
    shutil.copytree(Path(tik_agent.__file__).parent, parent / "site" / "tik_agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    parent.chmod(parent_mode)
    done = subprocess.run([str(base / "venv" / "bin" / "python"), "-c", INSTALL_AND_CHOOSE, str(parent / "site"),
                           "1" if hide_bwrap else "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), parent=str(parent))


def test_under_bwrap_a_worker_as_nobody_imports_the_package_from_a_0700_parent(nobody_python):
    if not shutil.which("bwrap") or isolation.best().mechanism != "bwrap":
        pytest.skip("needs a working bubblewrap")
    got = _choose(nobody_python, 0o700, hide_bwrap=False)
    assert (got["mechanism"], got["drop_uid"], got["probe"]) == ("bwrap", True, None), got


def test_under_setpriv_a_0700_parent_keeps_the_callers_uid_and_the_notice_names_it(nobody_python):
    got = _choose(nobody_python, 0o700, hide_bwrap=True)
    assert (got["mechanism"], got["drop_uid"], got["probe"]) == ("unshare", False, None), got
    assert f"setpriv: nobody cannot reach {got['parent']} (mode 0700)" in got["why"], got["why"]
    assert "bwrap: not installed" in got["why"]


def test_under_setpriv_a_worker_as_nobody_imports_the_package_from_a_parent_open_to_others(nobody_python):
    """The check's own install (its mktemp folder opened to 0755); the control of the one above."""
    got = _choose(nobody_python, 0o755, hide_bwrap=True)
    assert (got["mechanism"], got["drop_uid"], got["probe"]) == ("unshare", True, None), got
    assert "setpriv" not in got["why"], got["why"]
