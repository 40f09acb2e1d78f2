"""In-memory queue storage: a FIFO queue and a priority queue.

Both implement ``IQueue``/``IPriorityQueue`` and ``ICapacitySetter`` from
:mod:`varmq.protocols`. They hold whatever they are given (the worker gives them its job
objects) and are safe to use from any thread. No I/O here.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from typing import Any

__all__ = ["MemoryPriorityQueue", "MemoryQueue"]


class MemoryQueue:
    """A FIFO queue in process memory, optionally bounded."""

    __slots__ = ("_capacity", "_closed", "_items", "_lock")

    def __init__(self, capacity: int = 0) -> None:
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


class MemoryPriorityQueue:
    """A priority queue in process memory: lower numbers first, FIFO among equals.

    Jobs of one priority wait in a FIFO bucket; a heap orders the priorities that have jobs.
    Adding and taking cost O(1) plus O(log p) for p distinct priorities waiting, so the usual
    handful of priority levels costs about what a FIFO queue does.
    """

    __slots__ = ("_buckets", "_capacity", "_closed", "_lock", "_priorities", "_size")

    def __init__(self, capacity: int = 0) -> None:
        # Guards _buckets, _priorities and _size. Invariant: _priorities holds exactly the
        # keys of _buckets, whose deques are never empty; _size is the sum of their lengths.
        self._lock = threading.Lock()
        self._buckets: dict[int, deque[Any]] = {}
        self._priorities: list[int] = []
        self._size = 0
        self._capacity = max(0, capacity)
        self._closed = False

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues once ``capacity`` items wait (0: unlimited)."""
        self._capacity = max(0, capacity)

    def enqueue(self, item: Any, priority: int) -> bool:
        """Add ``item`` with ``priority``; ``False`` when closed or full."""
        if self._closed:
            return False
        with self._lock:
            if self._capacity and self._size >= self._capacity:
                return False
            bucket = self._buckets.get(priority)
            if bucket is None:
                self._buckets[priority] = deque((item,))
                heapq.heappush(self._priorities, priority)
            else:
                bucket.append(item)
            self._size += 1
        return True

    def dequeue(self) -> Any | None:
        """Pop the oldest item of the lowest priority number, or ``None`` when empty."""
        with self._lock:
            if not self._size:
                return None
            priority = self._priorities[0]
            bucket = self._buckets[priority]
            item = bucket.popleft()
            if not bucket:
                heapq.heappop(self._priorities)
                del self._buckets[priority]
            self._size -= 1
            return item

    def __len__(self) -> int:
        return self._size

    def values(self) -> list[Any]:
        """A snapshot of the waiting items in the order they would be taken."""
        with self._lock:
            return [item for p in sorted(self._buckets) for item in self._buckets[p]]

    def purge(self) -> None:
        """Remove every waiting item."""
        with self._lock:
            self._buckets.clear()
            self._priorities.clear()
            self._size = 0

    def close(self) -> None:
        """Refuse further enqueues; waiting items stay and can still be taken."""
        self._closed = True
