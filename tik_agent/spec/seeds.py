"""Find seeds: the bundled ones by name, or a user's seed directory by path."""

from __future__ import annotations

from pathlib import Path

from tik_agent.bundled import bundled_dir
from tik_agent.errors import UsageError
from tik_agent.spec.schema import SPEC_FILE, KernelSpec, load_spec

BUNDLED_DIR = bundled_dir("seed_kernels")


def bundled_names() -> list[str]:
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / SPEC_FILE).is_file())


def seed_directory(name_or_path: str | Path) -> Path:
    """A bundled seed's directory, or the given directory if it holds a spec."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / SPEC_FILE).is_file():
            raise UsageError(f"{path}: not a seed directory (no {SPEC_FILE})")
        return path.resolve()
    if "/" not in text and text in bundled_names():
        return BUNDLED_DIR / text
    known = ", ".join(bundled_names()) or "none"
    raise UsageError(f"unknown seed {text!r}: not a directory, and the bundled seeds are: {known}")


def resolve(name_or_path: str | Path) -> KernelSpec:
    return load_spec(seed_directory(name_or_path))


def bundled() -> list[KernelSpec]:
    return [load_spec(BUNDLED_DIR / n) for n in bundled_names()]
