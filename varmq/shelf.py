"""Delayed jobs and dead letters of one in-memory queue.

Storage adapters keep both in storage; for in-memory queues the worker keeps them here.
Delayed jobs wait in a heap ordered by due time until the worker's timer moves them into
their queue; dead letters are kept, bounded by count and age, for inspection and requeueing.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from typing import Any

from .retry import DeadLetter

__all__ = ["DEAD_LETTER_LIMIT", "DEAD_LETTER_MAX_AGE", "MemoryShelf"]

DEAD_LETTER_LIMIT = 10_000
DEAD_LETTER_MAX_AGE = 7 * 24 * 3600.0


class MemoryShelf:
    """The delayed jobs (a heap by due time) and dead letters (oldest first) of one queue."""

    def __init__(
        self, limit: int = DEAD_LETTER_LIMIT, max_age: float = DEAD_LETTER_MAX_AGE
    ) -> None:
        # Guards _delayed and _dead; taken briefly by the worker threads and the timer.
        self._lock = threading.Lock()
        self._delayed: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        self._dead: deque[tuple[DeadLetter, Any]] = deque()
        self._keys = itertools.count(1)
        self._limit = limit
        self._max_age = max_age

    # -- delayed jobs -------------------------------------------------------------------------

    def delay(self, job: Any, due: float) -> None:
        """Hold ``job`` until the monotonic time ``due``."""
        with self._lock:
            heapq.heappush(self._delayed, (due, next(self._seq), job))

    def pop_due(self, now: float) -> list[Any]:
        """Remove and return the jobs due by ``now``, in due order."""
        due: list[Any] = []
        with self._lock:
            while self._delayed and self._delayed[0][0] <= now:
                due.append(heapq.heappop(self._delayed)[2])
        return due

    def next_due(self) -> float | None:
        with self._lock:
            return self._delayed[0][0] if self._delayed else None

    def delayed(self) -> int:
        return len(self._delayed)

    # -- dead letters -------------------------------------------------------------------------

    def bury(self, job: Any, error: BaseException) -> None:
        """Keep ``job`` as a dead letter; ``job.data``, ``job.id`` and ``job.attempt`` are read."""
        now = time.time()
        letter = DeadLetter(
            key=str(next(self._keys)),
            id=job.id,
            data=job.data,
            attempts=job.attempt,
            error=f"{type(error).__name__}: {error}",
            dead_at=now,
        )
        with self._lock:
            self._dead.append((letter, job))
            while len(self._dead) > self._limit or (
                self._dead and self._dead[0][0].dead_at < now - self._max_age
            ):
                self._dead.popleft()

    def dead_letters(self, limit: int) -> list[DeadLetter]:
        with self._lock:
            return [letter for letter, _ in itertools.islice(self._dead, max(limit, 0))]

    def take_dead(self, keys: set[str] | None) -> list[Any]:
        """Remove the dead letters with ``keys`` (all if ``None``); their jobs, oldest first."""
        with self._lock:
            kept: deque[tuple[DeadLetter, Any]] = deque()
            taken: list[Any] = []
            for letter, job in self._dead:
                if keys is None or letter.key in keys:
                    taken.append(job)
                else:
                    kept.append((letter, job))
            self._dead = kept
        return taken

    def dead(self) -> int:
        return len(self._dead)
