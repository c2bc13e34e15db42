"""Helpers for tests that derive seed directories from the bundled ones."""

from __future__ import annotations

import shutil
from pathlib import Path

from tik_agent.seeds import BUNDLED_DIR


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
