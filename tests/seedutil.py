"""Helpers for tests that derive seed directories from the bundled ones."""

from __future__ import annotations

import shutil
from pathlib import Path

from tik_agent.spec.seeds import BUNDLED_DIR


def copy_seed(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(BUNDLED_DIR / name, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    """Replace text that must be present: a test edit that silently misses would test nothing."""
    text = path.read_text()
    assert old in text, f"{path.name}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))


def shrink_grid(seed_dir: Path, batch_sizes: str = "[1, 2, 5, 9]", dims: dict | None = None) -> None:
    """Fewer parity cases, for tests that only need the checks to run."""
    spec = seed_dir / "spec.toml"
    text = spec.read_text()
    import re

    text = re.sub(r"batch_sizes = \[[^\]]*\]", f"batch_sizes = {batch_sizes}", text)
    text = re.sub(r"seeds = \[[^\]]*\]", "seeds = [0]", text)
    for dim, values in (dims or {}).items():
        text = re.sub(rf"^{dim} = \[[^\]]*\]", f"{dim} = {values}", text, flags=re.M)
    spec.write_text(text)


def shrink_matmul_workload(seed_dir: Path) -> None:
    """The matmul copy's CPU cells cut down: train-small from M=64 to M=16, and both
    forward cells from K=N=256 to K=N=128.  Their hidden invariance cases (every row
    alone, forward and backward) and timed calls then take seconds instead of about a
    minute here; the cells keep their kinds (a decode and a batch, both tiled in K)."""
    edit(seed_dir / "spec.toml", 'name = "train-small"\nflops = "2 * M * N * K"\nM = 64\nK = 256\nN = 256\n',
         'name = "train-small"\nflops = "2 * M * N * K"\nM = 16\nK = 128\nN = 128\n')
    edit(seed_dir / "spec.toml", 'name = "decode-small"\nflops = "2 * M * N * K"\nM = 4\nK = 256\nN = 256\n',
         'name = "decode-small"\nflops = "2 * M * N * K"\nM = 4\nK = 128\nN = 128\n')


SMALL_RMSNORM_EDITS = {
    "N = [1024, 2101]": "N = [256, 1000]",
    "batch_sizes = [1, 2, 3, 7, 16, 33]": "batch_sizes = [1, 3, 6]",
    'dtypes = ["float32", "bfloat16", "float16"]': 'dtypes = ["float32", "bfloat16"]',
    "seeds = [0, 1]": "seeds = [0]",
    'regimes = ["normal", "zero", "large", "special"]': 'regimes = ["normal", "special"]',
}
SMALL_WORKLOAD = """[[workload]]
name = "small"
M = 8
N = 512
dtype = "float32"
weight = 1.0

"""


def small_rmsnorm(dest: Path) -> Path:
    """The rmsnorm seed with a grid and a workload small enough for seconds-long evaluations."""
    seed = copy_seed("rmsnorm", dest)
    spec_file = seed / "spec.toml"
    for old, new in SMALL_RMSNORM_EDITS.items():
        edit(spec_file, old, new)
    text = spec_file.read_text()
    start, end = text.index("# Timing cells"), text.index("[tunables]")
    spec_file.write_text(text[:start] + SMALL_WORKLOAD + text[end:])
    return seed


# A second CPU timing cell that no parity case uses (the run-time corpus's shape-detection case).
CORPUS_CELL = """[[workload]]
name = "tiny"
M = 5
N = 384
dtype = "float32"
weight = 1.0

"""


def corpus_rmsnorm(dest: Path) -> Path:
    """The small rmsnorm seed with a second timing cell: the spec the adversarial corpora are
    evaluated on (one spec, so that their modules share one cached reference)."""
    seed = small_rmsnorm(dest)
    edit(seed / "spec.toml", "[tunables]", CORPUS_CELL + "[tunables]")
    return seed


SMALL_LOGPROBS_WORKLOAD = """[[workload]]
name = "small"
M = 6
V = 1100
dtype = "float32"
weight = 1.0
devices = ["cpu"]

[[workload]]
name = "gpu"
M = 6
V = 1100
dtype = "bfloat16"
weight = 1.0
devices = ["cuda"]

"""


def small_logprobs(dest: Path) -> Path:
    """The logprobs seed with a small grid and one small timing cell per device."""
    import re

    seed = copy_seed("logprobs", dest)
    shrink_grid(seed, batch_sizes="[1, 3, 6]", dims={"V": "[1003]"})
    text = re.sub(r"\[\[workload\]\]\n(?:[^\[\n].*\n|\n)*", "", (seed / "spec.toml").read_text())
    edit_text = text.replace("[tunables]", SMALL_LOGPROBS_WORKLOAD + "[tunables]", 1)
    (seed / "spec.toml").write_text(edit_text)
    return seed
