"""The gate between the candidate's parity phase and its timing, and the early stop it allows.

With timing requested, the candidate's worker saves its parity outputs, reports
``waiting`` and waits for the gate file before it loads the seed or times
anything.  The parent opens the gate once the seed's worker is done: nothing
else of ours runs while the candidate is timed, and the phase limits and the
graph phase's calls per graph are known by then.

The early stop: before opening the gate, the parent waits until the worker
claims to be waiting (or has ended) and judges parity on the outputs it saved,
with the code of the final judgement
(:func:`tik_agent.judge.verdicts.judge_parity`).  A candidate that fails gets
``"proceed": false``, skips timing, the graph phase and the ceilings, and that
failure is its verdict, whatever its worker does or writes afterwards.  Most
candidates an LLM writes fail parity; they no longer pay for timing that would
be thrown away.  A candidate that passes proceeds as before and is judged
again, in full, after its worker exits.

The worker runs the candidate's code, which may write the progress file, its
outputs and the gate itself at any time.  None of that buys a better verdict:
the early judgement can only add a failure, never a pass; outputs that are
missing, unreadable or incomplete when the worker claims to wait are a failure
(an honest worker saves them whole before it says so); and the final
judgement of a candidate that passed early reads everything afresh.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path

from tik_agent.judge.phases import PHASES, read_phase

log = logging.getLogger(__name__)

POLL_S = 0.05
# An honest worker reports this phase only at the gate; any later one is a claim to be past it.
CLAIMS = frozenset(PHASES[PHASES.index("waiting"):])


class Gate:
    """The gate file of one candidate worker, and whether that worker is still running."""

    def __init__(self, path: Path, progress: Path):
        self.path, self.progress = path, progress
        self.worker_ended = threading.Event()  # set by the caller when the worker's run returns

    def worker_waits(self) -> bool:
        """Block until the worker claims to wait at the gate (True) or has ended (False).

        Never waits on a worker that died or hangs: its run returns when the watchdog
        or the wall-clock limit kills it, and the caller then sets ``worker_ended``."""
        while not self.worker_ended.is_set():
            if read_phase(self.progress) in CLAIMS:
                return True
            self.worker_ended.wait(POLL_S)
        return False

    def open(self, proceed: bool, graph_calls: dict) -> None:
        """Written whole under a fresh name, then renamed: the worker never reads half a
        gate, and a name the candidate planted (a link out of its directory) is never
        written through."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=".gate-", dir=self.path.parent)
        except OSError as exc:  # the worker then waits until its wall-clock limit
            log.warning("cannot open the gate %s: %s", self.path, exc)
            return
        try:
            with os.fdopen(fd, "w") as handle:
                os.fchmod(fd, 0o644)  # mkstemp's 0600 would shut out a worker that runs as another uid
                json.dump({"proceed": proceed, "graph_calls": graph_calls}, handle)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot open the gate %s: %s", self.path, exc)
            Path(tmp).unlink(missing_ok=True)
