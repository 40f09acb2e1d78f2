"""In-memory queue storage: a FIFO queue and a priority queue.

Both implement ``IQueue``/``IPriorityQueue`` and ``ICapacitySetter`` from
:mod:`varmq.protocols`. They hold whatever they are given (the worker gives them its job
objects) and are safe to use from any thread. No I/O here.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
from collections import deque
from typing import Any

__all__ = ["MemoryPriorityQueue", "MemoryQueue"]

# Sequence numbers stay below this, so a key orders by priority first.
_SPAN = 1 << 40

# Whether the GIL serialises C-level list operations (False on free-threaded builds).
_GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


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

    A binary heap of integer keys ``priority * 2**40 + sequence`` with the items in a dict by
    key: ints compare fast in C and keys are unique, so items are never compared and equal
    priorities keep insertion order. With the GIL, ``heappush``/``heappop`` of ints and a dict
    store or pop each run in C without calling back into Python, so they cannot interleave;
    an item is stored before its key is pushed, so whoever pops a key finds its item. Adding
    and taking therefore need no lock, which keeps producers and the worker's threads from
    convoying on one. Without the GIL (free-threaded builds), and for the capacity check, a
    lock guards both.
    """

    __slots__ = ("_capacity", "_closed", "_items", "_keys", "_lock", "_seq")

    def __init__(self, capacity: int = 0) -> None:
        self._keys: list[int] = []
        self._items: dict[int, Any] = {}
        # Guards _keys and _items where their operations are not atomic by themselves.
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
        key = priority * _SPAN + next(self._seq)
        if self._capacity or not _GIL:
            with self._lock:
                if self._capacity and len(self._keys) >= self._capacity:
                    return False
                self._items[key] = item
                heapq.heappush(self._keys, key)
            return True
        self._items[key] = item
        heapq.heappush(self._keys, key)
        return True

    def dequeue(self) -> Any | None:
        """Pop the item with the lowest priority number, or ``None`` when empty."""
        try:
            if _GIL:
                return self._items.pop(heapq.heappop(self._keys))
            with self._lock:
                return self._items.pop(heapq.heappop(self._keys))
        except IndexError:
            return None

    def __len__(self) -> int:
        return len(self._keys)

    def values(self) -> list[Any]:
        """A snapshot of the waiting items in the order they would be taken."""
        with self._lock:
            entries = sorted(self._items.items())
        return [item for _, item in entries]

    def purge(self) -> None:
        """Remove every waiting item."""
        with self._lock:
            self._keys.clear()
            self._items.clear()

    def close(self) -> None:
        """Refuse further enqueues; waiting items stay and can still be taken."""
        self._closed = True
