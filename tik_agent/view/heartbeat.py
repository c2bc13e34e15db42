"""What a file or a pipe sees of a running optimisation between its attempts' lines.

On a terminal the live view shows each attempt in flight.  Elsewhere the loop logs one line
per finished attempt, and under the CPU interpreter an attempt takes minutes (the newcomer's
trial saw 4.5 minutes of silence in ``make demo | tee``).  While the loop runs, the heartbeat
logs every attempt in flight, at a fixed interval, in the live view's words.
"""

from __future__ import annotations

import logging
import threading
import time

from tik_agent.search.optimize import Optimizer
from tik_agent.view.live import ticket_line

log = logging.getLogger(__name__)

EVERY_S = 60.0


class Heartbeat:
    """``with Heartbeat(optimizer): optimizer.run()`` logs, every ``every`` seconds, one line per
    attempt in flight (``a0001 from seed: evaluating 62 s on cpu:0@vm``)."""

    def __init__(self, optimizer: Optimizer, every: float = EVERY_S):
        self._optimizer, self._every = optimizer, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="tik-heartbeat", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def beat(self) -> None:
        snap, now = self._optimizer.snapshot(), time.time()
        if snap.stop_reason:
            return
        for ticket in snap.in_flight:
            log.info("%s", ticket_line(ticket, now))

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self.beat()
            except Exception:  # a report, never a reason to stop the run
                log.debug("heartbeat failed", exc_info=True)
