"""In-memory queue storage: a FIFO queue and a priority queue.

Both implement ``IQueue``/``IPriorityQueue`` and ``ICapacitySetter`` from
:mod:`varmq.protocols`. They hold whatever they are given (the worker gives them its job
objects) and are safe to use from any thread. No I/O here.
"""

from __future__ import annotations

import heapq
import itertools
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
    """A priority queue in process memory: lower numbers first, FIFO among equals."""

    __slots__ = ("_capacity", "_closed", "_heap", "_lock", "_seq")

    def __init__(self, capacity: int = 0) -> None:
        # Entries are (priority, sequence, item); the sequence keeps insertion order among
        # equal priorities and means items themselves are never compared.
        self._heap: list[tuple[int, int, Any]] = []
        # Guards the heap: heapq operations are not atomic.
        self._lock = threading.Lock()
        self._seq = itertools.count()
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
            if self._capacity and len(self._heap) >= self._capacity:
                return False
            heapq.heappush(self._heap, (priority, next(self._seq), item))
        return True

    def dequeue(self) -> Any | None:
        """Pop the item with the lowest priority number, or ``None`` when empty."""
        with self._lock:
            if not self._heap:
                return None
            return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)

    def values(self) -> list[Any]:
        """A snapshot of the waiting items in the order they would be taken."""
        with self._lock:
            entries = sorted(self._heap)
        return [entry[2] for entry in entries]

    def purge(self) -> None:
        """Remove every waiting item."""
        with self._lock:
            self._heap.clear()

    def close(self) -> None:
        """Refuse further enqueues; waiting items stay and can still be taken."""
        self._closed = True
