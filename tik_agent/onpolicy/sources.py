"""Where the certified kernels come from: bundled seeds, a run's best kernel, an exported wheel.

Each source names the kind it replaces (the seed's name) and gives a kernel
file; the rest of the set stays the bundled seeds.
"""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.onpolicy.kernels import KINDS


def parse_kernel_option(text: str) -> tuple[str, Path]:
    kind, sep, path = text.partition("=")
    if not sep or kind not in KINDS:
        raise UsageError(f"--kernel: expected KIND=FILE with KIND one of {list(KINDS)}, got {text!r}")
    return kind, Path(path)


def from_run(run_dir: Path, workdir: Path) -> tuple[str, Path]:
    """The best kernel of a tik-agent run, for the kind of its seed."""
    from tik_agent.export.source import read_source

    source = read_source(run_dir, None, workdir)
    kind = _kind(source.spec.name, f"--run {run_dir}")
    path = workdir / f"run-{kind}.py"
    path.write_bytes(source.kernel_source)
    return kind, path


def from_wheel(wheel: Path, workdir: Path) -> tuple[str, Path]:
    """The kernel an exported wheel carries (its ``kernel.py``), for the kind of its seed."""
    if not wheel.is_file():
        raise UsageError(f"--wheel {wheel}: no such file")
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            spec_name = next((n for n in names if n.count("/") == 1 and n.endswith("/spec.toml")), None)
            if spec_name is None:
                raise UsageError(f"--wheel {wheel}: not a tik-agent export (no package spec.toml)")
            package = spec_name.split("/")[0]
            seed = tomllib.loads(zf.read(spec_name).decode()).get("kernel", {}).get("name", "")
            kernel = zf.read(f"{package}/kernel.py")
    except (zipfile.BadZipFile, KeyError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--wheel {wheel}: cannot read the package: {exc}") from None
    kind = _kind(seed, f"--wheel {wheel}")
    path = workdir / f"wheel-{kind}.py"
    path.write_bytes(kernel)
    return kind, path


def _kind(seed: str, where: str) -> str:
    if seed not in KINDS:
        raise UsageError(f"{where}: its seed {seed!r} is none of the decoder's kernels {list(KINDS)}")
    return seed
