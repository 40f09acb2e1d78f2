"""The four kinds of sqliteq queue: FIFO or priority, each local or distributed (subscribable).

They differ from :class:`~sqliteq._queue.StoredQueue` only in the shape of ``enqueue`` (with or
without a priority), in what the optional priority of ``enqueue_dedup`` and
``enqueue_delayed`` means, and in ``subscribe``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._queue import StoredQueue

__all__ = ["DistributedPriorityQueue", "DistributedQueue", "PriorityQueue", "Queue"]


class Queue(StoredQueue):
    """A persistent FIFO queue (``IPersistentQueue``, with leases, batches, dedup, capacity,
    delays, nacks, dead letters, stats and job records). The optional priorities are ignored."""

    def enqueue(self, item: Any) -> bool:
        """Store ``item`` (``bytes``, or ``str`` as UTF-8) last in line; ``False`` if refused."""
        return self._add(item, 0, None)

    async def enqueue_async(self, item: Any) -> bool:
        """:meth:`enqueue` for a coroutine: stored on the writer thread of the ``Queues``,
        concurrent calls in one transaction; the event loop never waits on the file."""
        return await self._add_async(item, 0, None)


class PriorityQueue(StoredQueue):
    """A persistent priority queue: lower numbers first, FIFO among equal priorities."""

    def enqueue(self, item: Any, priority: int) -> bool:
        """Store ``item`` with ``priority`` (an int within +-2**53); ``False`` if refused."""
        return self._add(item, self._priority(priority), None)

    async def enqueue_async(self, item: Any, priority: int) -> bool:
        """:meth:`enqueue` for a coroutine (see the FIFO ``enqueue_async``)."""
        return await self._add_async(item, self._priority(priority), None)

    def _rank(self, priority: Any) -> int:
        return 0 if priority is None else self._priority(priority)


class _Subscribable(StoredQueue):
    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` on the watcher thread after any process adds a job.

        Several enqueues close together may give one call. Keep the callback short: it runs on
        the thread that serves every subscription of this ``Queues``.
        """
        self._subscribe(callback)


class DistributedQueue(_Subscribable, Queue):
    """A FIFO queue shared by processes on one host, with notifications of enqueues."""


class DistributedPriorityQueue(_Subscribable, PriorityQueue):
    """A priority queue shared by processes on one host, with notifications of enqueues."""
