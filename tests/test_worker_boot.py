"""The worker's boot line: the cyclic collector is off while torch and Triton are
imported, and on again before anything from the sandbox directory is loaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tik_agent.sandbox.worker import REQUEST_FILE, RESULT_FILE, worker_argv
from tik_agent.spec.seeds import BUNDLED_DIR

pytestmark = pytest.mark.slow  # a worker process importing torch

# Appended to the seed's kernel: the collector's state when the file is loaded, and
# whether torch was imported by then (the boot line's work was done).
PROBE = """
import gc as _gc, sys as _sys
open("probe.json", "w").write(__import__("json").dumps(
    {"enabled": _gc.isenabled(), "torch": "torch" in _sys.modules}))
"""


def _boot(tmp_path, argv):
    shutil.copytree(BUNDLED_DIR / "rmsnorm", tmp_path / "spec")
    kernel = tmp_path / "kernel.py"
    kernel.write_text((BUNDLED_DIR / "rmsnorm" / "kernel.py").read_text() + PROBE)
    (tmp_path / REQUEST_FILE).write_text(json.dumps(
        {"mode": "reference", "spec_dir": "spec", "kernel": "kernel.py", "device": "cpu", "cases": [],
         "guard": False}))
    env = {"PATH": os.environ.get("PATH", ""), "TRITON_INTERPRET": "1"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / RESULT_FILE).read_text())["status"] == "ok"
    return json.loads((tmp_path / "probe.json").read_text())


def test_the_collector_is_on_when_the_kernel_file_loads(tmp_path):
    argv = worker_argv(REQUEST_FILE)
    assert "gc.disable()" in argv[-2], "the boot line no longer turns the collector off during the imports"
    assert _boot(tmp_path, argv) == {"enabled": True, "torch": True}


def test_a_boot_that_left_the_collector_off_is_seen(tmp_path):
    # Negative control: the probe reads the state it claims to.  The boot line with the
    # worker's own enable undone after it: the kernel file then loads with the collector off.
    argv = worker_argv(REQUEST_FILE)
    argv[-2] = argv[-2].replace("from tik_agent.sandbox.worker import main;",
                                "import gc; "
                                "from tik_agent.sandbox.worker import main; gc.enable = gc.disable;")
    assert _boot(tmp_path, argv) == {"enabled": False, "torch": True}
