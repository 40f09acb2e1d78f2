"""The four kinds of sqliteq queue: FIFO or priority, each local or distributed (subscribable).

They differ from :class:`~sqliteq._queue.StoredQueue` only in the shape of the calls that take
a priority (``enqueue``, ``enqueue_dedup``, ``enqueue_delayed``) and in ``subscribe``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._queue import StoredQueue

__all__ = ["DistributedPriorityQueue", "DistributedQueue", "PriorityQueue", "Queue"]


class Queue(StoredQueue):
    """A persistent FIFO queue (``IPersistentQueue``, with leases, batches, dedup, capacity,
    delays, nacks, dead letters and stats)."""

    def enqueue(self, item: Any) -> bool:
        """Store ``item`` (``bytes``, or ``str`` as UTF-8) last in line; ``False`` if refused."""
        return self._add(item, 0, None)

    def enqueue_dedup(self, item: Any, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is stored; ``priority`` unused."""
        return self._add_dedup(item, job_id, 0)

    def enqueue_delayed(
        self,
        item: Any,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """Store ``item``, handed out no sooner than ``delay`` seconds from now.

        Once due it joins the end of the line (``delay <= 0``: now). With a ``job_id``,
        deduplicates like ``enqueue_dedup``; ``priority`` unused. ``False`` if refused.
        """
        return self._add_delayed(item, delay, job_id, 0)


class PriorityQueue(StoredQueue):
    """A persistent priority queue: lower numbers first, FIFO among equal priorities."""

    def enqueue(self, item: Any, priority: int) -> bool:
        """Store ``item`` with ``priority``; ``False`` if refused."""
        return self._add(item, priority, None)

    def enqueue_dedup(self, item: Any, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is stored (priority 0 if None)."""
        return self._add_dedup(item, job_id, 0 if priority is None else priority)

    def enqueue_delayed(
        self,
        item: Any,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """Store ``item`` with ``priority`` (0 if None), handed out no sooner than ``delay``
        seconds from now; once due it joins the end of its priority's line. With a
        ``job_id``, deduplicates like ``enqueue_dedup``. ``False`` if refused."""
        return self._add_delayed(item, delay, job_id, 0 if priority is None else priority)


class DistributedQueue(Queue):
    """A FIFO queue shared by processes on one host, with notifications of enqueues."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` on the watcher thread after any process adds a job.

        Several enqueues close together may give one call. Keep the callback short: it runs on
        the thread that serves every subscription of this ``Queues``.
        """
        self._subscribe(callback)


class DistributedPriorityQueue(PriorityQueue):
    """A priority queue shared by processes on one host, with notifications of enqueues."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` on the watcher thread after any process adds a job.

        Several enqueues close together may give one call. Keep the callback short: it runs on
        the thread that serves every subscription of this ``Queues``.
        """
        self._subscribe(callback)
