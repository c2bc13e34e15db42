"""scripts/gpu-wheels.sh never removes a wheel it did not make (found by the newcomer's trial:
it began with ``rm -f DIR/*.whl``, so ``gpu-wheels.sh dist`` deleted the user's exported kernels).

No registry is reached here: ``PYTHON=false`` makes the script fail at its first pip call, after
the check of DIR that these tests are about.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-wheels.sh"


def _run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(folder)], env={"PATH": "/usr/bin:/bin", "PYTHON": "false"},
                          capture_output=True, text=True, timeout=60)


def test_a_wheel_it_did_not_make_is_left_and_refused(tmp_path):
    folder = tmp_path / "dist"
    folder.mkdir()
    mine = folder / "tik_kernel_rmsnorm-0.1.0-py3-none-any.whl"
    mine.write_bytes(b"the user's wheel")
    done = _run(folder)
    assert done.returncode == 2, done.stderr
    assert mine.read_bytes() == b"the user's wheel"
    assert done.stderr.strip().splitlines() == [
        f"gpu-wheels: {folder} holds wheels it did not make: {mine.name}; left as they are "
        "(give an empty or new folder)"]


def test_only_the_wheels_of_its_own_last_run_are_replaced(tmp_path):
    """Control: what the manifest of an earlier run lists is removed (and the script goes on to
    build, which fails here at PYTHON=false); a folder of its own is not refused."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    old = folder / "GitPython-3.1.0-py3-none-any.whl"
    old.write_bytes(b"from an earlier run")
    (folder / ".gpu-wheels").write_text(old.name + "\n")
    done = _run(folder)
    assert done.returncode != 2 and "did not make" not in done.stderr
    assert not old.exists() and not (folder / ".gpu-wheels").exists()
