"""Stopping a run from outside: Ctrl-C and SIGTERM, and the sandboxes in flight.

Evaluations run in worker threads, where KeyboardInterrupt never arrives, and
the sandbox puts each worker process in its own session, where the terminal's
SIGINT never arrives either.  So the first Ctrl-C asks the loop to stop and
kills the sandboxes itself; a second Ctrl-C raises KeyboardInterrupt.
"""

from __future__ import annotations

import logging
import os
import signal
from contextlib import contextmanager
from typing import Protocol

log = logging.getLogger(__name__)


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


def sandbox_groups() -> list[int]:
    """The process group of every sandboxed child of this process, and of every
    seed's worker forked for it (:mod:`tik_agent.sandbox.forkserver`).

    A sandbox is recognised as a child that leads its own session (git
    subprocesses and the fork server share ours and are left alone).
    """
    from tik_agent.sandbox import forkserver

    parents, groups = {os.getpid(), forkserver.server_pid()}, []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid, pgrp, session = int(fields[1]), int(fields[2]), int(fields[3])
        if ppid in parents and pgrp == session == int(entry):
            groups.append(pgrp)
    return groups


def kill_sandboxes() -> int:
    """SIGKILL the process group of every sandboxed child of this process."""
    killed = 0
    for pgrp in sandbox_groups():
        try:
            os.killpg(pgrp, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


@contextmanager
def stop_on_signals(optimizer: Interruptible):
    """Ctrl-C or SIGTERM: a graceful stop; a second Ctrl-C: KeyboardInterrupt."""
    calls = 0

    def handler(signum, frame):
        nonlocal calls
        calls += 1
        if calls > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning("stopping: %s received", signal.Signals(signum).name)
        optimizer.interrupt()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def kill_sandboxes_on_interrupt():
    """Ctrl-C kills every sandboxed child, then raises KeyboardInterrupt: a worker that a
    thread waits for (the seed's, beside an evaluation) dies now instead of finishing."""

    def handler(signum, frame):
        kill_sandboxes()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
