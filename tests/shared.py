"""What the suite computes once per session, for every module and both xdist workers.

A test session has one shared directory (made by the controlling process in
``conftest.pytest_configure`` and named in ``TIK_TESTS_SHARED``, so that the
xdist workers it starts see the same one).  :func:`built_once` fills a
sub-directory of it at most once: the first worker to ask builds it under an
exclusive ``flock``, a worker asking meanwhile waits, and everyone after reads
what was built.  Names come from content (:func:`content_key`), so two modules
that build the same thing share it and a changed input builds anew.

A build that fails leaves nothing marked ready: the next request builds again
(and fails again, with its own traceback in its own test).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

ENV = "TIK_TESTS_SHARED"
READY = ".ready"


def shared_root() -> Path:
    root = os.environ.get(ENV)
    if not root:  # run outside this suite's conftest (a single module imported elsewhere)
        root = tempfile.mkdtemp(prefix="tik-tests-")
        os.environ[ENV] = root
    return Path(root)


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def content_key(*parts: object) -> str:
    """A short digest of ``parts``: a path's bytes (a directory's files, sorted by name), or repr()."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path) and part.is_dir():
            for f in sorted(p for p in part.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                h.update(str(f.relative_to(part)).encode() + b"\0" + f.read_bytes() + b"\0")
        elif isinstance(part, Path):
            h.update(part.read_bytes())
        else:
            h.update(repr(part).encode())
        h.update(b"\1")
    return h.hexdigest()[:16]


def built_once(name: str, build: Callable[[Path], None]) -> Path:
    """``shared_root()/name``, filled by ``build(directory)`` the first time it is asked for."""
    target = shared_root() / name
    with _locked(shared_root() / f"{name}.lock"):
        if (target / READY).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        build(target)
        (target / READY).touch()
    return target


def cached_reference(spec, options):
    """The seed's reference outputs for ``spec`` under ``options``, computed once per session."""
    from tik_agent.judge.evaluate import compute_reference
    from tik_agent.judge.options import Reference

    # The seed's outputs depend on its files and the device only (the options' timing
    # settings and limits shape how long it may take, not what it computes).
    key = content_key(spec.spec_path.parent, options.device)
    folder = built_once(f"reference-{key}", lambda d: compute_reference(spec, options).save(d / "reference.pt"))
    return Reference.load(folder / "reference.pt")
