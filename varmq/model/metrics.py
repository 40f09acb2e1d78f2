"""Job counters of one worker, counted in this process, and an optional duration histogram."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_DURATION_BUCKETS", "DurationHistogram", "Metrics"]

DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Upper bounds, in seconds, of the job duration buckets unless others are asked for."""


@dataclass(frozen=True)
class DurationHistogram:
    """How long job functions ran, in buckets: a snapshot of :meth:`Metrics.duration_histogram`.

    ``counts[i]`` counts runs of at most ``bounds[i]`` seconds (and more than the bound before);
    the last count, one more than the bounds, those longer than every bound. ``sum`` is the
    total of the durations, ``count`` how many there were.
    """

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float
    count: int


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
    - ``unacknowledged``: settles of storage jobs (acknowledgements, nacks, releases, dead
      letters) that the storage refused or failed: those jobs run again once their lease runs
      out, in this process or another. Each is also logged (at ``WARNING``) and reported as an
      :class:`~varmq.AcknowledgeJobError`.
    - ``dropped``: topic messages that the worker's ``bind_topic`` subscriptions dropped
      because their buffer was full (``on_full="drop_oldest"`` or ``"drop_newest"``). Each
      message a subscription buffered counts in ``submitted``.

    ``successful + failed == completed + retried`` once the worker is idle.
    """

    __slots__ = (
        "_buckets",
        "_lock",
        "completed",
        "dead_lettered",
        "dropped",
        "failed",
        "lost",
        "observing",
        "released",
        "retried",
        "submitted",
        "successful",
        "timed_out",
        "unacknowledged",
    )

    def __init__(self, lock: threading.Lock | None = None) -> None:
        # Guards the eleven counters. The worker passes its own lock, under which it already
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
        self.dropped = 0
        self.unacknowledged = 0
        # None until observe_durations: then bounds, per-bucket counts, sum (guarded by _lock).
        self._buckets: tuple[tuple[float, ...], list[int], list[float]] | None = None
        #: Whether job durations are measured (see :meth:`observe_durations`).
        self.observing = False

    def observe_durations(self, buckets: Sequence[float] | None = None) -> None:
        """Measure how long each job function runs from now on (off by default: it costs a
        clock read and a lock per job). ``buckets``: upper bounds in seconds, increasing.

        Also lets ``queue_stats()`` report the age of the oldest running job per queue.
        Calling it again keeps the buckets already chosen.
        """
        bounds = tuple(float(b) for b in (DEFAULT_DURATION_BUCKETS if buckets is None else buckets))
        if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"varmq: duration buckets must increase, got {bounds!r}")
        with self._lock:
            if self._buckets is None:
                self._buckets = (bounds, [0] * (len(bounds) + 1), [0.0])
                self.observing = True

    def duration_histogram(self) -> DurationHistogram | None:
        """A snapshot of the durations measured so far; ``None`` unless observed."""
        with self._lock:
            if self._buckets is None:
                return None
            bounds, counts, total = self._buckets
            return DurationHistogram(bounds, tuple(counts), total[0], sum(counts))

    def observe_locked(self, seconds: float) -> None:
        """Count one run of ``seconds`` (the caller holds the lock given at construction)."""
        if self._buckets is not None:
            bounds, counts, total = self._buckets
            counts[bisect.bisect_left(bounds, seconds)] += 1
            total[0] += seconds

    def reset(self) -> None:
        """Set every counter to zero (and empty the duration histogram, if observed)."""
        with self._lock:
            if self._buckets is not None:
                bounds = self._buckets[0]
                self._buckets = (bounds, [0] * (len(bounds) + 1), [0.0])
            self.submitted = self.completed = self.successful = self.failed = 0
            self.retried = self.dead_lettered = self.lost = self.timed_out = 0
            self.released = self.dropped = self.unacknowledged = 0

    def __repr__(self) -> str:
        return (
            f"Metrics(submitted={self.submitted}, completed={self.completed}, "
            f"successful={self.successful}, failed={self.failed}, retried={self.retried}, "
            f"dead_lettered={self.dead_lettered}, lost={self.lost}, "
            f"timed_out={self.timed_out}, released={self.released}, dropped={self.dropped}, "
            f"unacknowledged={self.unacknowledged})"
        )
