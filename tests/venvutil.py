"""A fresh venv that holds exported wheels and not tik-agent, for tests of installed packages.

The environment is a new venv whose only link to the project's venv is a
``.pth`` file naming a directory of symlinks to every installed distribution
except tik-agent (torch and triton come from there, so nothing is
downloaded).  Each check runs in a fresh interpreter that first proves that
``import tik_agent`` fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

# Run first in every fresh process: proves the isolation the test relies on.
PRELUDE = """
import json, os, sys
try:
    import tik_agent
except ImportError:
    pass
else:
    raise SystemExit("tik_agent is importable: the environment is not isolated")
"""


def _site_without_tik_agent(target: Path) -> Path:
    """Symlinks to this venv's installed packages, leaving out tik-agent and its editable finder."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in purelib.iterdir():
        if entry.name.startswith(("tik_agent", "__editable__")) or entry.suffix == ".pth":
            continue
        (target / entry.name).symlink_to(entry)
    return target


def make_env(base: Path, *wheels: Path) -> Path:
    """A venv holding ``wheels``, installed by pip offline; returns its python."""
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_torch_and_triton.pth").write_text(f"{_site_without_tik_agent(base / 'shared-site')}\n")
    # No --no-deps: pip must find the wheels' requirements (torch, triton) already installed.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                    "--disable-pip-version-check", "--quiet", *map(str, wheels)], check=True)
    return python


def child_env() -> dict:
    """This process's environment minus what would decide for the package (the interpreter) or leak paths."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "PYTHONHOME")}


def run_installed(python: Path, body: str, cwd: Path) -> dict:
    """Run ``body`` in a fresh interpreter of ``python``; it prints one JSON line last."""
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([str(python), "-c", code], cwd=cwd, env=child_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
