"""Worker directories a killed evaluation left behind, swept once per process.

A worker's directory is removed when its evaluation ends.  A parent killed with
SIGKILL (a test that kills a run, the OOM killer, a lost session) cannot, and its
directories stay in the temporary folder with what the evaluation held: the request
(the cases, hidden shapes among them, and the plan drawn from its secret), the
seed's source, the worker's outputs.  Under bubblewrap or Landlock no worker sees
them; under the bare process sandbox a later candidate of the same user could.

So each directory is named for the process that made it: ``tik-eval-<pid>.<start>-``
(the process's start time in clock ticks since boot, from ``/proc``, so that a pid
used again is not taken for its owner).  The first worker directory a process makes
sweeps the temporary folder: a directory so named whose owner is gone, and that
nothing has touched for :data:`STALE_S` (a shared temporary folder seen from another
PID namespace makes a live owner look gone), is removed.  Directories kept on
purpose (``EvalOptions.keep_workdir``) are named ``tik-eval-kept-`` and never
swept; nor is anything else.  Without ``/proc`` nothing is named for its owner and
nothing is swept.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "tik-eval-"
KEPT = PREFIX + "kept-"
STALE_S = 6 * 3600.0
_OWNED = re.compile(r"tik-eval-(\d+)\.(\d+)-")
_SWEEP = threading.Lock()
_swept = False


def start_ticks(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot; None if there is none (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None  # field 22 of proc(5), counted from the state


def prefix(keep: bool) -> str:
    """The name a new worker directory of this process starts with."""
    if keep:
        return KEPT
    start = start_ticks(os.getpid())
    return f"{PREFIX}{os.getpid()}.{start}-" if start is not None else PREFIX


def sweep(root: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the worker directories under ``root`` whose owner is gone and that nothing
    has touched for :data:`STALE_S`; the ones removed."""
    root = Path(root or tempfile.gettempdir())
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _OWNED.match(entry.name)
        if match is None or start_ticks(int(match.group(1))) == match.group(2):
            continue
        try:
            if not entry.is_dir() or entry.is_symlink() or now - entry.stat().st_mtime < STALE_S:
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    if removed:
        log.info("removed %d worker directories that killed evaluations left in %s", len(removed), root)
    return removed


def sweep_once() -> None:
    """:func:`sweep` the temporary folder, the first time a process asks."""
    global _swept
    with _SWEEP:
        if _swept:
            return
        _swept = True
    sweep()
