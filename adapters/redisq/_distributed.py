"""Distributed queues: the stored queues plus "enqueued" notifications over Redis pub/sub.

An enqueue on a distributed queue publishes "enqueued" on the queue's channel from inside the
same script that stores the job, so a message is sent only for a job really stored and never
before it is visible; a plain add publishes only when a take found the line empty since the
last announcement ("Wake-ups" in queue.lua), so busy consumers are not woken for every job.
Every distributed queue of one ``Queues`` shares its one :class:`~redisq._pubsub.Listener`.
"""

from __future__ import annotations

from collections.abc import Callable

from ._queue import PriorityQueue, Queue, _StoredQueue

__all__ = ["DistributedPriorityQueue", "DistributedQueue"]


class _Notifying(_StoredQueue):
    """Adds ``subscribe``; ``close`` also drops this queue's subscribers."""

    NOTIFIES = True

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` when any process adds a job to this queue while a
        consumer may be idle: the first add after a take (of any object, any process) found
        the line empty is announced, later ones are not until the next such take; nacks,
        releases, requeues of dead letters, ``enqueue_many`` and topic copies always are.

        Returns once Redis confirmed the subscription. Lossy like Redis pub/sub; after a
        reconnect every callback is called once with ``"enqueued"``. Raises
        :class:`~redisq.errors.RedisUnavailableError` (and keeps nothing subscribed) when Redis
        cannot be reached within a connect and a reply timeout. Ignored once the queue is
        closed.
        """
        self._listen(self._keys.channel, callback, lambda: callback("enqueued"))


class DistributedQueue(_Notifying, Queue):
    """A FIFO queue shared by processes on several hosts; enqueues notify subscribers."""


class DistributedPriorityQueue(_Notifying, PriorityQueue):
    """A priority queue shared by processes on several hosts; enqueues notify subscribers."""
