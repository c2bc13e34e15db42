"""The environment a sandboxed child gets: built from nothing but an allowlist.

Its own module so that both the sandbox's runner (:mod:`tik_agent.sandbox.process`) and
the isolation probe (:mod:`tik_agent.sandbox.isolation`) start children with it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from tik_agent.redaction import SECRET_NAME

# Copied from the parent's environment when present; nothing else is.
_INHERITED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")
_FIXED = {"OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Names that look like credentials never reach the child, whoever asks.
_SECRET_NAME = SECRET_NAME


def scrubbed_environment(extra: Mapping[str, str] | None = None, *, workdir: Path | None = None) -> dict[str, str]:
    """Build a child environment from nothing but an allowlist.

    Copies PATH, locale and CUDA location variables from ``os.environ``, pins
    ``OMP_NUM_THREADS=1``, ``PYTHONDONTWRITEBYTECODE=1`` and ``PYTHONHASHSEED=0``, and
    when ``workdir`` is given points HOME, TMPDIR and TRITON_CACHE_DIR into it.
    ``extra`` (e.g. ``{"TRITON_INTERPRET": "1"}``) is added last; a name there that
    looks like a credential raises ValueError, as does a malformed name or value.
    """
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ and not _SECRET_NAME.search(name)}
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update(_FIXED)
    if workdir is not None:
        root = str(Path(workdir).resolve())
        env.update(HOME=root, TMPDIR=root, TRITON_CACHE_DIR=os.path.join(root, "triton-cache"))
    for name, value in (extra or {}).items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"scrubbed_environment: invalid variable name {name!r}")
        if _SECRET_NAME.search(name):
            raise ValueError(f"scrubbed_environment: refusing to pass credential-like variable {name}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"scrubbed_environment: value of {name} must be a string without NUL")
        env[name] = value
    return env
