"""Installs where users already are: no provider SDKs or GitPython at start, a
non-editable install that works from any directory, metadata that takes ranges."""

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
from tik_agent.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("openai", "anthropic", "git", "gitdb", "ray")  # ray: only --executor ray imports it

# A node image has none of BLOCKED: make importing any of them fail, then run the CLI.
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
    deps = {Requirement(d).name: Requirement(d) for d in project["dependencies"]}
    assert not set(deps) & {"openai", "anthropic", "gitpython"}, "node images have none of these"
    assert set(project["optional-dependencies"]["llm"]) >= {"openai>=1.40", "anthropic>=0.40"}
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
    with pytest.raises(UsageError, match=r"needs the openai package.*tik-agent\[llm\]"):
        make_agent("openai", model=None, base_url="http://127.0.0.1:9/v1", seed=0, environ={})
    with pytest.raises(UsageError, match="needs the anthropic package"):
        make_agent("anthropic", model=None, base_url=None, seed=0, environ={"ANTHROPIC_API_KEY": "k"})
    agent, _ = make_agent("offline", model=None, base_url=None, seed=0, environ={})
    assert agent is not None


def _source_copy(dest: Path) -> Path:
    """The tracked sources only: what a clean clone holds, and no build output in the checkout."""
    files = subprocess.run(["git", "ls-files", "pyproject.toml", "README.md", "tik_agent"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.mark.slow
def test_non_editable_install_works_from_another_directory(tmp_path):
    """A fresh venv that sees this interpreter's packages, ``pip install .`` into it with no
    index (so it must install nothing beside the torch and triton it finds), used elsewhere."""
    venv, work = tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    src = _source_copy(tmp_path / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", str(src)],
                         cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    shutil.rmtree(src)  # nothing may be read from the sources after the install

    def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "tik-agent"), *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)

    where = subprocess.run([python, "-c", "import tik_agent; print(tik_agent.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(site), where
    package = Path(where).parent
    for data in ("seed_kernels/rmsnorm/kernel.py", "seed_kernels/matmul/reference.py", "seed_kernels/logprobs/spec.toml",
                 "prompts/propose.md.j2", "export/template/_verify.py.tmpl", "agents/prices.toml"):
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
    run = cli("optimize", str(seed), "--agent", "offline", "--iterations", "1", "--device", "cpu", "--rounds", "1",
              "--run-dir", "run")
    assert run.returncode == 0, run.stdout[-1500:] + run.stderr[-1500:]
    exported = cli("export", "run", "--out", "dist")
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
