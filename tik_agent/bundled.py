"""Where the data folders of the project's top level are: ``seed_kernels/`` and ``prompts/``.

In a checkout (and an editable install of one) they sit beside the ``tik_agent``
package, next to ``pyproject.toml``; a wheel carries them inside the package
(``tik_agent/seed_kernels``, ``tik_agent/prompts``: pyproject.toml maps them
there).  Imports nothing of the project.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def bundled_dir(name: str, package: Path = PACKAGE) -> Path:
    """The folder ``name`` of the checkout ``package`` sits in, else the one inside it.

    The checkout's copy wins: a folder of that name left inside the package by an older
    checkout (``__pycache__`` only) must not hide it, and a top-level folder of another
    distribution in site-packages is not ours (site-packages holds no pyproject.toml).
    """
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / name).is_dir():
        return checkout / name
    return package / name
