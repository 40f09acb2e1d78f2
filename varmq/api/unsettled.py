"""The warning an operator reads when a job will run again: a settle the storage refused.

An :class:`~varmq.AcknowledgeJobError` means a job's acknowledgement (or nack, release, dead
letter) did not reach the storage: the job runs again once its lease runs out. During an outage
every job a worker finishes fails so, so the log would drown; :class:`UnsettledLog` writes one
WARNING per job up to ``burst`` per ``window`` seconds, then one line per window counting the
ones it did not write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..model.errors import AcknowledgeJobError

__all__ = ["UnsettledLog"]


class UnsettledLog:
    """Rate-limited WARNING lines for the settles a worker's storage refused or failed.

    ``_lock`` guards the window: its start, how many lines it wrote and how many it held back.
    The logging call itself is made outside the lock.
    """

    def __init__(
        self,
        logger: logging.Logger,
        worker: str,
        *,
        burst: int = 10,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._worker = worker
        self._burst = burst
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._window_start = -window  # the first warning opens a window
        self._written = 0
        self._held_back = 0

    def warn(self, exc: AcknowledgeJobError) -> None:
        """Log ``exc`` unless this window already wrote ``burst`` lines (then count it)."""
        now = self._clock()
        with self._lock:
            held_back = 0
            if now - self._window_start >= self._window:
                held_back, self._held_back = self._held_back, 0
                self._window_start, self._written = now, 0
            write = self._written < self._burst
            if write:
                self._written += 1
            else:
                self._held_back += 1
        if held_back:
            self._logger.warning(
                "worker %s: %d more settles failed in the last %.0f s (not logged one by one); "
                "those jobs run again once their lease runs out",
                self._worker,
                held_back,
                self._window,
            )
        if write:
            self._logger.warning("worker %s: %s", self._worker, exc)
