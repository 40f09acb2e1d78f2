"""Job counters of one worker, counted in this process."""

from __future__ import annotations

import threading

__all__ = ["Metrics"]


class Metrics:
    """Counters of what happened to jobs in this process.

    - ``submitted``: jobs this process added through the worker's handles and the storage
      accepted (one per ``add``, one per ``add_all`` item). Jobs added by other processes are
      not counted, though this worker may run them; so ``completed`` can exceed ``submitted``.
    - ``successful``: job functions that returned.
    - ``failed``: job functions that raised.
    - ``completed``: jobs that ran to a final outcome and were closed (acknowledged or
      dead-lettered, for storage jobs). Jobs cancelled before they ran are not counted, nor
      are runs that were retried.
    - ``retried``: failed runs handed back for another attempt (with a retry policy).
    - ``dead_lettered``: jobs moved to their queue's dead letters.
    - ``released``: jobs taken from storage but not started when the worker stopped, handed
      back to the storage at once (their lease released) for another consumer.
    - ``timed_out``: runs that passed their timeout (each also counts as ``failed``).
    - ``lost``: jobs taken from storage whose lease ran out (or was taken over) before a slot
      was free to start them: not run here, since the storage hands them out again.

    ``successful + failed == completed + retried`` once the worker is idle.
    """

    __slots__ = (
        "_lock",
        "completed",
        "dead_lettered",
        "failed",
        "lost",
        "released",
        "retried",
        "submitted",
        "successful",
        "timed_out",
    )

    def __init__(self, lock: threading.Lock | None = None) -> None:
        # Guards the nine counters. The worker passes its own lock, under which it already
        # is when a job finishes, so counting costs no extra lock round trip.
        self._lock = lock if lock is not None else threading.Lock()
        self.submitted = 0
        self.completed = 0
        self.successful = 0
        self.failed = 0
        self.retried = 0
        self.dead_lettered = 0
        self.lost = 0
        self.timed_out = 0
        self.released = 0

    def reset(self) -> None:
        """Set every counter to zero."""
        with self._lock:
            self.submitted = self.completed = self.successful = self.failed = 0
            self.retried = self.dead_lettered = self.lost = self.timed_out = 0
            self.released = 0

    def __repr__(self) -> str:
        return (
            f"Metrics(submitted={self.submitted}, completed={self.completed}, "
            f"successful={self.successful}, failed={self.failed}, retried={self.retried}, "
            f"dead_lettered={self.dead_lettered}, lost={self.lost}, "
            f"timed_out={self.timed_out}, released={self.released})"
        )
