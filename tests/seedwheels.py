"""Wheels of seeds themselves (``tik-agent export SEED``), each built once per test session
(:mod:`shared`), for the seed-export and serving-plugin tests.

The bundled seeds' full grids take minutes each to audit under the interpreter,
so the tests export *small copies* kept in a folder that stands in for the
bundled one (:func:`small_bundled`, patched in as ``seeds.BUNDLED_DIR``): the
name ``rmsnorm`` still goes through the name lookup, and the audit, the cache
and the wheel are the real ones.  The copies keep their seed's kernel, entry,
backward and tunables; only the grid and the workload shrink.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pytest

from shared import built_once, content_key
from tik_agent.spec import seeds

# seed -> its dims and the one CPU workload cell of the small copy
SMALL = {
    "rmsnorm": ({"N": "[256]"}, 'name = "small"\nM = 8\nN = 512\ndtype = "float32"\nweight = 1.0\n'),
    "logprobs": ({"V": "[1024]"}, 'name = "small"\nM = 4\nV = 1024\ndtype = "float32"\nweight = 1.0\n'),
}
SECOND_NAME = "tik-kernel-rmsnorm-b"  # the same seed under another name: a second package routing aten::rms_norm


def _small_spec(text: str, dims: dict, cell: str) -> str:
    sections = re.split(r"(?m)^(?=\[)", text)
    kept = [s for s in sections if not s.startswith("[[workload]]")]
    # One cell per device (a spec must time something on each); only the CPU one runs here.
    text = "".join(kept).rstrip("\n") + "".join(f'\n\n[[workload]]\n{cell.replace("small", device)}devices = ["{device}"]'
                                                 for device in ("cpu", "cuda")) + "\n"
    for pattern, value in ((r"batch_sizes = \[[^\]]*\]", "batch_sizes = [1, 3]"),
                           (r"dtypes = \[[^\]]*\]", 'dtypes = ["float32"]'), (r"seeds = \[[^\]]*\]", "seeds = [0]"),
                           (r"regimes = \[[^\]]*\]", 'regimes = ["normal", "special"]')):
        text = re.sub(pattern, value, text, count=1)
    for dim, values in dims.items():
        text = re.sub(rf"(?m)^{dim} = \[[^\]]*\]", f"{dim} = {values}", text, count=1)
    return text


def small_bundled() -> Path:
    """A folder of small copies of the rmsnorm and logprobs seeds, laid out like ``seed_kernels/``."""
    def build(target: Path) -> None:
        for name, (dims, cell) in SMALL.items():
            shutil.copytree(seeds.BUNDLED_DIR / name, target / name)
            spec = target / name / "spec.toml"
            spec.write_text(_small_spec(spec.read_text(), dims, cell))

    return built_once(f"small-bundled-{content_key(seeds.BUNDLED_DIR, SMALL)}", build)


@contextlib.contextmanager
def bundled_as(folder: Path):
    """``folder`` stands in for the bundled seeds while the block runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seeds, "BUNDLED_DIR", folder)
        yield


def seed_wheels() -> Path:
    """A folder with three wheels exported from seeds: ``export rmsnorm`` (by name), the small
    logprobs seed by its directory (in ``wheels/``), and ``export rmsnorm --name
    tik-kernel-rmsnorm-b`` (in ``second/``).  Read-only: copy to change it."""
    from tik_agent.cli import run as cli

    bundled = small_bundled()

    def build(target: Path) -> None:
        out = target / "wheels"
        with bundled_as(bundled):
            assert cli(["export", "rmsnorm", "--out", str(out)]) == 0
            assert cli(["export", str(bundled / "logprobs"), "--out", str(out)]) == 0
            assert cli(["export", "rmsnorm", "--name", SECOND_NAME, "--out", str(target / "second")]) == 0

    return built_once(f"seed-wheels-{content_key(bundled)}", build)


def wheel_of(folder: Path, import_name: str) -> Path:
    (wheel,) = folder.glob(f"{import_name}-*.whl")
    return wheel
