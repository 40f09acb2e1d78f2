"""In-memory storage: the FIFO and priority queues, and the delayed and dead jobs kept beside an
in-memory queue.

:class:`MemoryQueue` and :class:`MemoryPriorityQueue` implement ``IQueue``/``IPriorityQueue``
and ``ICapacitySetter`` from :mod:`varmq.contract.protocols`. They hold whatever they are given
(the worker gives them its job objects). Storage adapters keep delays and dead letters in their
own storage; for in-memory queues the worker keeps them in a :class:`DelayedJobs` heap and a
:class:`DeadLetters` list. A queue loaded from a snapshot (:mod:`varmq.api.snapshots`) carries
its name, retry settings and a :class:`Restored` shelf of delayed jobs and dead letters until it
is bound. Everything here is safe to use from any thread. No I/O here.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..contract.protocols import DEFAULT_DEAD_LETTER_LIMIT, DEFAULT_DEAD_LETTER_MAX_AGE
from ..model.retry import DeadLetter, Retry, failure_text

__all__ = [
    "DeadLetters",
    "DelayedJobs",
    "MemoryPriorityQueue",
    "MemoryQueue",
    "Restored",
]


@dataclass
class Restored:
    """What a queue loaded from a snapshot holds beside its waiting jobs until it is bound: the
    delayed jobs with their wall-clock (Unix) due times, in due order, and the dead letters as
    ``(job, error text, dead_at)``, oldest first."""

    delayed: list[tuple[float, Any]] = field(default_factory=list)
    dead: list[tuple[Any, str, float]] = field(default_factory=list)


class _Named:
    """What both in-memory queues carry besides their items (see :class:`MemoryQueue`)."""

    __slots__ = ("_restored", "name", "poison_limit", "retry")

    def __init__(self, name: str | None) -> None:
        #: Labels the queue when it is bound without ``name=`` (stats, snapshots).
        self.name = name
        #: The retry policy a snapshot saved for this queue (``None``: none); binding does not
        #: apply it by itself: pass it as ``with_queue(q, retry=q.retry)``.
        self.retry: Retry | None = None
        #: The worker's ``poison_limit`` a snapshot saved with this queue (``None``: unknown).
        self.poison_limit: int | None = None
        self._restored: Restored | None = None

    def shelve(self, restored: Restored) -> None:
        """Keep delayed jobs and dead letters read from a snapshot for the worker this queue
        will be bound to."""
        self._restored = restored

    def take_restored(self) -> Restored | None:
        """Hand over (once) the delayed jobs and dead letters loaded with this queue."""
        restored, self._restored = self._restored, None
        return restored


class MemoryQueue(_Named):
    """A FIFO queue in process memory, optionally bounded.

    ``name`` labels it when bound without ``name=``. A queue returned by
    :func:`varmq.load_queues` also has ``retry`` and ``poison_limit`` as saved, and brings its
    delayed jobs and dead letters along to the worker it is bound to.
    """

    __slots__ = ("_capacity", "_closed", "_items", "_lock")

    def __init__(self, capacity: int = 0, *, name: str | None = None) -> None:
        super().__init__(name)
        self._items: deque[Any] = deque()
        # Serialises the capacity check with the append; plain appends and pops rely on
        # deque's own atomicity.
        self._lock = threading.Lock()
        self._capacity = max(0, capacity)
        self._closed = False

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues once ``capacity`` items wait (0: unlimited)."""
        self._capacity = max(0, capacity)

    def enqueue(self, item: Any) -> bool:
        """Append ``item``; ``False`` when closed or full."""
        if self._closed:
            return False
        if self._capacity:
            with self._lock:
                if len(self._items) >= self._capacity:
                    return False
                self._items.append(item)
            return True
        self._items.append(item)
        return True

    def is_empty_and_open(self) -> bool:
        """Whether no item waits and an enqueue now would be accepted."""
        return not self._items and not self._closed

    def dequeue(self) -> Any | None:
        """Pop the oldest item, or ``None`` when empty."""
        try:
            return self._items.popleft()
        except IndexError:
            return None

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> list[Any]:
        """A snapshot of the waiting items, oldest first."""
        return list(self._items)

    def purge(self) -> None:
        """Remove every waiting item."""
        self._items.clear()

    def close(self) -> None:
        """Refuse further enqueues; waiting items stay and can still be taken."""
        self._closed = True


class MemoryPriorityQueue(_Named):
    """A priority queue in process memory: lower numbers first, FIFO among equals.

    One deque of items per priority (a *line*), and the lines in priority order. A job costs
    one deque slot (8 bytes) on top of itself, against a heap key and a dict entry (about 90
    bytes) for a heap of all the jobs; queues use a handful of priorities, so there are few
    lines and the order of equals is the deques' own.

    Like :class:`MemoryQueue`, adding to an existing line and taking rely on deque's own
    atomicity and take no lock: a producer and a consumer that met on a lock at every add
    and take would convoy on it (each meeting a hand-off of the lock between threads). The
    lock guards the rare changes of the set of lines: a new priority's line, and dropping empty
    lines once there are many. The lines in order (``_lines``) are a tuple replaced, never
    changed, so a taker scans a consistent list without the lock. An add that appended to a
    line dropped at that moment sees it (the line it appended to is no longer its priority's)
    and puts what that line still holds back in line; so does the drop, after it, for what was
    appended before: either way nothing stays in a dropped line.

    ``name``, ``retry`` and ``poison_limit`` are as for :class:`MemoryQueue`.
    """

    __slots__ = ("_by_priority", "_capacity", "_closed", "_lines", "_lock")

    def __init__(self, capacity: int = 0, *, name: str | None = None) -> None:
        super().__init__(name)
        # Guards changes of _by_priority and _lines (reads take no lock).
        self._lock = threading.Lock()
        self._by_priority: dict[int, deque[Any]] = {}
        self._lines: tuple[deque[Any], ...] = ()  # _by_priority's lines by priority
        self._capacity = max(0, capacity)
        self._closed = False

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues once ``capacity`` items wait (0: unlimited)."""
        self._capacity = max(0, capacity)

    def enqueue(self, item: Any, priority: int) -> bool:
        """Add ``item`` with ``priority``; ``False`` when closed or full."""
        if self._closed:
            return False
        line = self._by_priority.get(priority)
        if line is None or self._capacity:
            with self._lock:
                if self._capacity and sum(map(len, self._lines)) >= self._capacity:
                    return False
                self._append_locked(item, priority)
            return True
        line.append(item)
        if self._by_priority.get(priority) is not line:  # dropped meanwhile: see the class
            with self._lock:
                self._refile_locked(line, priority)
        return True

    def _append_locked(self, item: Any, priority: int) -> None:
        line = self._by_priority.get(priority)
        if line is None:
            if len(self._lines) >= _LINES_KEPT:
                self._drop_empty_locked()
            line = self._by_priority[priority] = deque()
            self._publish_lines_locked()
        line.append(item)

    def _publish_lines_locked(self) -> None:
        """Replace ``_lines`` by the lines of ``_by_priority`` in priority order."""
        by_priority = self._by_priority
        self._lines = tuple(by_priority[p] for p in sorted(by_priority))

    def _drop_empty_locked(self) -> None:
        """Drop the lines that are empty (after publishing the rest, refile what reached one)."""
        dropped = [(p, line) for p, line in self._by_priority.items() if not line]
        if not dropped:
            return
        for priority, _ in dropped:
            del self._by_priority[priority]
        self._publish_lines_locked()
        for priority, line in dropped:
            self._refile_locked(line, priority)

    def _refile_locked(self, line: deque[Any], priority: int) -> None:
        """Put back in line what an add appended to ``line`` after it was dropped."""
        while True:
            try:
                item = line.popleft()
            except IndexError:
                return
            self._append_locked(item, priority)

    def is_empty_and_open(self) -> bool:
        """Whether no item waits and an enqueue now would be accepted."""
        return not any(self._lines) and not self._closed

    def dequeue(self) -> Any | None:
        """Pop the item with the lowest priority number, or ``None`` when empty."""
        item = None
        skipped = 0
        for line in self._lines:
            if line:
                try:
                    item = line.popleft()
                    break
                except IndexError:  # another taker emptied it since
                    pass
            skipped += 1
        if skipped >= _LINES_KEPT:
            # Many empty lines before the first job (or no job): drop them, so that takes
            # through many priorities in turn scan a bounded number of empty lines.
            with self._lock:
                self._drop_empty_locked()
        return item

    def __len__(self) -> int:
        return sum(map(len, self._lines))

    def values(self) -> list[Any]:
        """A snapshot of the waiting items in the order they would be taken."""
        return [item for line in self._lines for item in list(line)]

    def purge(self) -> None:
        """Remove every waiting item."""
        with self._lock:
            for line in self._lines:
                line.clear()
            self._drop_empty_locked()

    def close(self) -> None:
        """Refuse further enqueues; waiting items stay and can still be taken."""
        self._closed = True


# Lines a priority queue keeps before it drops its empty ones (when a new one is needed, or a
# take skipped that many empty ones): a queue of a few priorities never drops a line, and one
# whose priorities keep changing (deadlines, say) scans at most this many empty lines.
_LINES_KEPT = 32


class DelayedJobs:
    """Jobs held until a monotonic due time: a heap by due time, FIFO among equal times."""

    __slots__ = ("_heap", "_lock", "_seq")

    def __init__(self) -> None:
        # Guards _heap; taken briefly by the worker threads, handles and the timer.
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    def add(self, job: Any, due: float) -> None:
        """Hold ``job`` until the monotonic time ``due``."""
        with self._lock:
            heapq.heappush(self._heap, (due, next(self._seq), job))

    def pop_due(self, now: float) -> list[Any]:
        """Remove and return the jobs due by ``now``, in due order."""
        due: list[Any] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                due.append(heapq.heappop(self._heap)[2])
        return due

    def next_due(self) -> float | None:
        """The earliest due time held, or ``None``."""
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def add_all(self, entries: Iterable[tuple[Any, float]]) -> None:
        """Hold each ``(job, due)``; jobs with equal due times keep the order given."""
        with self._lock:
            for job, due in entries:
                heapq.heappush(self._heap, (due, next(self._seq), job))

    def entries(self) -> list[tuple[float, Any]]:
        """The held jobs as ``(due, job)``, in the order they will fall due."""
        with self._lock:
            heap = list(self._heap)
        heap.sort()  # (due, unique sequence, job): the jobs themselves are never compared
        return [(due, job) for due, _, job in heap]

    def __len__(self) -> int:
        return len(self._heap)

    def open_count(self) -> int:
        """How many held jobs are still open: a job cancelled by id while it waited is closed at
        once, but leaves the heap only when it falls due."""
        with self._lock:
            return sum(1 for _, _, job in self._heap if not job.is_closed())


class DeadLetters:
    """Jobs of one in-memory queue that will not be retried, oldest first, bounded by count and
    age; each kept with the job object so it can be requeued."""

    __slots__ = ("_keys", "_letters", "_limit", "_lock", "_max_age")

    def __init__(
        self,
        limit: int = DEFAULT_DEAD_LETTER_LIMIT,
        max_age: float = DEFAULT_DEAD_LETTER_MAX_AGE,
    ) -> None:
        # Guards _letters.
        self._lock = threading.Lock()
        self._letters: deque[tuple[DeadLetter, Any]] = deque()
        self._keys = itertools.count(1)
        self._limit = limit
        self._max_age = max_age

    def bury(self, job: Any, error: BaseException) -> None:
        """Keep ``job`` as a dead letter; ``job.data``, ``job.id`` and ``job.attempt`` are read."""
        self.keep([(job, failure_text(error), time.time())])

    def keep(self, entries: Iterable[tuple[Any, str, float]]) -> None:
        """Keep each ``(job, error text, dead_at)`` as a dead letter, after those held; then
        drop the oldest beyond the count and age limits."""
        letters = [
            (
                DeadLetter(
                    key=str(next(self._keys)),
                    id=job.id,
                    data=job.data,
                    attempts=job.attempt,
                    error=error,
                    dead_at=dead_at,
                ),
                job,
            )
            for job, error, dead_at in entries
        ]
        oldest = time.time() - self._max_age
        with self._lock:
            self._letters.extend(letters)
            while len(self._letters) > self._limit or (
                self._letters and self._letters[0][0].dead_at < oldest
            ):
                self._letters.popleft()

    def entries(self) -> list[tuple[DeadLetter, Any]]:
        """Every dead letter with its job, oldest first."""
        with self._lock:
            return list(self._letters)

    def letters(self, limit: int) -> list[DeadLetter]:
        """Up to ``limit`` dead letters, oldest first."""
        with self._lock:
            return [letter for letter, _ in itertools.islice(self._letters, max(limit, 0))]

    def take(self, keys: set[str] | None) -> list[Any]:
        """Remove the dead letters with ``keys`` (all if ``None``); their jobs, oldest first."""
        return [job for _, job in self.take_entries(keys)]

    def take_entries(self, keys: set[str] | None) -> list[tuple[DeadLetter, Any]]:
        """Remove the dead letters with ``keys`` (all if ``None``); each with its job, oldest
        first."""
        with self._lock:
            kept: deque[tuple[DeadLetter, Any]] = deque()
            taken: list[tuple[DeadLetter, Any]] = []
            for letter, job in self._letters:
                if keys is None or letter.key in keys:
                    taken.append((letter, job))
                else:
                    kept.append((letter, job))
            self._letters = kept
        return taken

    def put_back(self, entries: list[tuple[DeadLetter, Any]]) -> None:
        """Keep again dead letters :meth:`take_entries` gave, as they were, in their place by
        ``dead_at`` (letters whose time is past the age limit go at the next :meth:`keep`)."""
        with self._lock:
            letters = sorted([*self._letters, *entries], key=lambda entry: entry[0].dead_at)
            self._letters = deque(letters)

    def __len__(self) -> int:
        return len(self._letters)
