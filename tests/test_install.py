"""Installs where users already are: commands that start without importing the provider
SDKs or GitPython, editable and non-editable installs that find the top-level seeds and
prompts from any directory, metadata that takes ranges."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from seedutil import small_rmsnorm
from tik_agent.agents.factory import make_agent
from tik_agent.bundled import bundled_dir
from tik_agent.errors import UsageError

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

REPO = Path(__file__).resolve().parents[1]
# Imported only when used: an agent's SDK, GitPython when a run is opened, ray for --executor ray.
BLOCKED = ("openai", "anthropic", "git", "gitdb", "ray")

# Make importing any of BLOCKED fail, then run the CLI.
BLOCKER = textwrap.dedent(f"""
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError("blocked: " + name)
    sys.meta_path.insert(0, _Block())
""")


def _blocked_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def test_metadata_takes_ranges_that_the_cpu_pins_satisfy():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = {Requirement(d).name.lower(): Requirement(d) for d in project["dependencies"]}
    assert {"openai", "anthropic", "gitpython"} <= set(deps), "the card's packages are dependencies"
    assert deps["gitpython"].specifier.contains("3.2.1") and not deps["gitpython"].specifier.contains("3.1.62")
    assert project["optional-dependencies"]["llm"] == [], "kept, empty, for old install lines"
    for version in ("3.6.0", "3.7.1", "3.8.0", "3.9.0"):
        assert deps["triton"].specifier.contains(version), version
    assert not deps["triton"].specifier.contains("3.5.1")
    assert deps["torch"].specifier.contains("2.13.0") and deps["torch"].specifier.contains("2.11.0")
    assert [Requirement(d).name for d in project["optional-dependencies"]["ray"]] == ["ray"]
    extras = {Requirement(d).name: Requirement(d) for group in project["optional-dependencies"].values() for d in group}
    pins = [Requirement(line) for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    for pin in pins:
        (version,) = [s.version for s in pin.specifier]
        assert {**extras, **deps}[pin.name].specifier.contains(version), f"{pin}: outside pyproject's range"


def test_the_blocker_blocks(tmp_path):
    # Negative control: without this, the test below would pass on a machine that has the SDKs anyway.
    done = _blocked_python("import openai", tmp_path)
    assert done.returncode != 0 and "blocked: openai" in done.stderr


def test_every_command_starts_without_provider_sdks_or_gitpython(tmp_path):
    done = _blocked_python("""
        from tik_agent.cli import app, run
        import tik_agent.agents.factory, tik_agent.run.lineage, tik_agent.export, tik_agent.search.optimize
        names = sorted(c.name or c.callback.__name__ for c in app.registered_commands)
        for name in names:
            assert run([name, "--help"]) == 0, name
        assert run(["seeds"]) == 0
        print("COMMANDS", " ".join(names))
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = done.stdout.split("COMMANDS", 1)[1].split()
    assert {"seeds", "eval", "optimize", "export", "lineage"} <= set(listed)


def test_an_agent_without_its_sdk_is_a_usage_error(monkeypatch):
    for name in ("openai", "anthropic"):
        monkeypatch.setitem(sys.modules, name, None)  # find_spec then answers None: not installed
    with pytest.raises(UsageError, match=r"needs the openai package, a dependency .*: pip install openai"):
        make_agent("openai", model=None, base_url="http://127.0.0.1:9/v1", seed=0, environ={})
    with pytest.raises(UsageError, match="needs the anthropic package"):
        make_agent("anthropic", model=None, base_url=None, seed=0, environ={"ANTHROPIC_API_KEY": "k"})
    agent, _ = make_agent("offline", model=None, base_url=None, seed=0, environ={})
    assert agent is not None


def _source_copy(dest: Path) -> Path:
    """The tracked sources only: what a clean clone holds, and no build output in the checkout."""
    card = ["pyproject.toml", "README.md", "tik_agent", "seed_kernels", "prompts"]
    files = subprocess.run(["git", "ls-files", *card], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


def _venv(tmp_path: Path) -> tuple[Path, str, dict]:
    """A fresh venv that sees this interpreter's packages: its python, its site-packages, an
    environment without this checkout on the path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    return python, site, env


# Where an installed tik_agent finds its seeds and prompts (and that the renderer loads them).
WHERE = ("import tik_agent; from tik_agent.spec.seeds import BUNDLED_DIR, bundled_names; "
         "from tik_agent.agents.prompts import PromptRenderer, bundled_prompts_dir; PromptRenderer(); "
         "print(tik_agent.__file__, BUNDLED_DIR, bundled_prompts_dir(), ','.join(bundled_names()))")


def test_the_top_level_holds_the_seeds_and_prompts():
    """The card's layout: seed_kernels/ and prompts/ beside tik_agent/, found there from a checkout."""
    assert (REPO / "seed_kernels" / "rmsnorm" / "spec.toml").is_file() and (REPO / "prompts" / "system.md.j2").is_file()
    tracked = subprocess.run(["git", "ls-files", "tik_agent/seed_kernels", "tik_agent/prompts"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    assert tracked == ""
    assert bundled_dir("seed_kernels") == REPO / "seed_kernels" and bundled_dir("prompts") == REPO / "prompts"


def test_bundled_dir_prefers_the_checkout_then_the_package(tmp_path):
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    # an older checkout's leftover inside the package; another distribution's top-level folder
    for folder in (checkout / "tik_agent" / "seed_kernels" / "__pycache__", checkout / "seed_kernels",
                   site / "tik_agent" / "seed_kernels", site / "seed_kernels"):
        folder.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    assert bundled_dir("seed_kernels", checkout / "tik_agent") == checkout / "seed_kernels"
    assert bundled_dir("seed_kernels", site / "tik_agent") == site / "tik_agent" / "seed_kernels"
    # Negative control: without the checkout's folder, the package's own copy is the answer.
    (checkout / "seed_kernels").rmdir()
    assert bundled_dir("seed_kernels", checkout / "tik_agent") == checkout / "tik_agent" / "seed_kernels"


def test_the_wheel_lists_every_folder_of_the_package():
    """pyproject lists packages by hand (seed_kernels/ and prompts/ are mapped in), so a new
    folder of tik_agent/ that it did not name would be left out of the wheel."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    tracked = subprocess.run(["git", "ls-files", "tik_agent"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    folders = {".".join(Path(name).parent.parts) for name in tracked}
    assert {"tik_agent", "tik_agent.sandbox.static", "tik_agent.export.template"} <= folders  # nested ones found
    assert set(tool["packages"]) == folders | {"tik_agent.seed_kernels", "tik_agent.prompts"}
    assert tool["package-dir"] == {"tik_agent.seed_kernels": "seed_kernels", "tik_agent.prompts": "prompts"}


@pytest.mark.slow
def test_editable_install_finds_the_top_level_seeds_and_prompts(tmp_path):
    """``pip install -e`` (what make install does) of a copy of the sources, used elsewhere."""
    python, _, env = _venv(tmp_path)
    src, work = _source_copy(tmp_path / "src"), tmp_path / "elsewhere"
    work.mkdir()
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "--no-deps",
                          "-e", str(src)], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    where = subprocess.run([python, "-c", WHERE], cwd=work, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-2000:]
    init, seeds, prompts, names = where.stdout.split()
    assert (init, seeds, prompts) == (str(src / "tik_agent" / "__init__.py"), str(src / "seed_kernels"),
                                      str(src / "prompts"))
    assert {"rmsnorm", "matmul", "logprobs"} <= set(names.split(","))


@pytest.mark.slow
def test_non_editable_install_works_from_another_directory(tmp_path):
    """``pip install .`` into a fresh venv with no index (so it must install nothing beside
    the torch and triton it finds), used elsewhere: seeds and prompts come from the wheel."""
    python, site, env = _venv(tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    src = _source_copy(tmp_path / "src")
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", str(src)],
                         cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    shutil.rmtree(src)  # nothing may be read from the sources after the install

    def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(python.parent / "tik-agent"), *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)

    where = subprocess.run([python, "-c", WHERE], cwd=work, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-2000:]
    init, seeds, prompts, names = where.stdout.split()
    package = Path(init).parent
    assert init.startswith(site) and (seeds, prompts) == (str(package / "seed_kernels"), str(package / "prompts"))
    assert {"rmsnorm", "matmul", "logprobs", "attention", "add_rmsnorm"} <= set(names.split(","))
    for data in ("seed_kernels/rmsnorm/kernel.py", "seed_kernels/matmul/reference.py", "seed_kernels/logprobs/spec.toml",
                 "prompts/propose.md.j2", "prompts/README.md", "export/template/_verify.py.tmpl", "agents/prices.toml"):
        assert (package / data).is_file(), data
    seeds = cli("seeds")
    assert seeds.returncode == 0 and {"rmsnorm", "logprobs", "matmul"} <= set(seeds.stdout.split()), seeds.stderr
    module = subprocess.run([python, "-m", "tik_agent", "--version"], cwd=work, env=env, capture_output=True, text=True)
    assert module.returncode == 0 and "tik-agent" in module.stdout

    seed = small_rmsnorm(work)
    evaluated = cli("eval", str(seed / "kernel.py"), "--seed", str(seed), "--device", "cpu", "--rounds", "1")
    # The seed against itself: accepted, or rejected as slower only when the machine is busy.
    assert evaluated.returncode == 0 or (evaluated.returncode == 1 and "rejected (slower)" in evaluated.stdout), \
        evaluated.stdout[-1500:] + evaluated.stderr[-1500:]
    # Exported from the installed package: the wheel's template and the seed come from site-packages.
    # (An optimize run from an installed package, and its export, run in CI's oldest-triton lane.)
    exported = cli("export", str(seed), "--out", "dist", "--device", "cpu")
    assert exported.returncode == 0, exported.stderr[-1500:]
    assert list((work / "dist").glob("tik_kernel_*.whl"))


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("have_bwrap", [False, True])
def test_the_sandbox_tools_script_says_it_installs_before_it_does(tmp_path, have_bwrap):
    """As root with apt-get (stubbed here) the script says what it installs first; with bwrap
    already there (the negative control) it says nothing and runs no apt-get."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "apt-calls"
    _stub(stubs, "id", "echo 0")
    _stub(stubs, "apt-get", f'echo "$@" >> {calls}; exit 1')
    if have_bwrap:
        _stub(stubs, "bwrap", "exit 0")
    script = Path(__file__).resolve().parent.parent / "scripts" / "install-sandbox-tools.sh"
    done = subprocess.run(["/bin/sh", str(script)], env={"PATH": str(stubs)}, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0
    if have_bwrap:
        assert done.stdout == "" and not calls.exists()
        return
    lines = done.stdout.splitlines()
    assert lines[0].startswith("installing bubblewrap for the evaluation sandbox (apt-get install bubblewrap")
    assert calls.read_text().startswith("update")   # it then ran apt-get (which failed here)
    assert lines[-1].startswith("notice: bubblewrap (bwrap) is not installed")
