"""The early stop inside the parity phase: judge each case as the worker finishes it.

A candidate's worker runs its parity cases one after another; most candidates an
agent writes fail one of them, and until now the worker ran every case before the
first was judged (minutes under the CPU interpreter, for a verdict known after the
first failing case).  With a reference given, the fixed cases' answers are known
before the worker starts, so the worker is asked to save each case's outputs on
their own as it finishes them (``stream`` in its request, :mod:`tik_agent.sandbox.worker`),
and this thread judges them in order with the same :func:`judge_parity` that judges
the whole file.  At the first case that fails, the verdict is that case's, as the
full judgement gives it (the cases before it passed, and they are the same cases in
the same order; see the last paragraph for what it does not reach), and the worker
is killed through its watch.

What the worker streams is its own to write, like ``outputs.pt``: a failure found
here is final (a candidate can only stop itself), a pass found here counts for
nothing, and ``outputs.pt`` is judged whole at the end as before.  A streamed file
that cannot be read, or is not a regular file, ends the streaming and leaves the
verdict to that judgement.  The stream ends before the gate opens (nothing of ours
runs while the candidate is timed) and when the worker ends.

The verdict is the full judgement's on the cases up to the failing one; what the
worker would have met later (a crash, host compute, a timeout on a later case) is
never reached, and the verdict's cases are the ones judged.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from tik_agent.judge.phases import PhaseWatch
from tik_agent.judge.records import Verdict
from tik_agent.judge.verdicts import judge_parity
from tik_agent.judge.workerbox import UnreadableWorkerFile, WorkerBox
from tik_agent.sandbox.worker import STREAM_FILE
from tik_agent.spec.cases import Case
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

POLL_S = 0.2


class ParityStream:
    """A thread that judges the first ``len(cases)`` streamed cases while the worker runs.

    ``failure`` is the verdict of the first case that failed (None: none failed while
    streaming).  On a failure the worker's ``watch`` is aborted and ``on_failure`` is called
    (the evaluation uses it to stop the seed's worker, whose outputs no longer matter)."""

    def __init__(self, spec: KernelSpec, box: WorkerBox, kernel_file: Path, cases: list[Case], expected: dict,
                 watch: PhaseWatch, on_failure: Callable[[], None] = lambda: None):
        self._spec, self._box, self._kernel, self._cases, self._expected = spec, box, kernel_file, cases, expected
        self._watch, self._on_failure = watch, on_failure
        self._halted = threading.Event()
        self.failure: Verdict | None = None
        self.judged = 0
        self._thread = threading.Thread(target=self._run, name="tik-parity-stream", daemon=True)

    @property
    def count(self) -> int:
        """How many cases the worker is asked to stream."""
        return len(self._cases)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> bool:
        """No more judging (the gate is about to open, or the worker has ended); returns once the
        thread is done, at most one case's judgement later: whether a case failed."""
        self._halted.set()
        if self._thread.ident is not None:
            self._thread.join()
        return self.failure is not None

    def _run(self) -> None:
        try:
            self._judge()
        except Exception:  # never the verdict's business: the whole file is judged at the end
            log.exception("parity stream stopped")

    def _judge(self) -> None:
        records: list[dict] = []
        while self.judged < len(self._cases) and not self._halted.is_set():
            name = STREAM_FILE.format(self.judged)
            try:
                kind = os.lstat(self._box.dir / name).st_mode
            except FileNotFoundError:
                self._halted.wait(POLL_S)
                continue
            if not stat.S_ISREG(kind):   # not what the worker writes: left to the end
                return
            try:
                outputs = self._box.outputs(name)
            except UnreadableWorkerFile:
                return
            case = self._cases[self.judged]
            streamed = outputs.get("cases") if isinstance(outputs, dict) else None
            if not isinstance(streamed, dict) or case.id not in streamed:  # not what was asked: left to the end
                return
            judged, failure = judge_parity(self._spec, [case], self._expected, outputs, self._kernel)
            records.extend(judged)
            self.judged += 1
            if failure is not None:
                failure.cases = records
                self.failure = failure
                # our words only: the reason holds strings of the worker's
                self._watch.abort = f"parity failed on case {self.judged} of {len(self._cases)}"
                log.info("parity failed on case %d of %d; the worker is stopped there", self.judged,
                         len(self._cases))
                self._on_failure()
                return
