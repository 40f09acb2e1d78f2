"""Distributed queues: the stored queues plus "enqueued" notifications over Redis pub/sub.

An enqueue on a distributed queue publishes "enqueued" on the queue's channel from inside the
same script that stores the job, so a message is sent only for a job really stored and never
before it is visible. Every distributed queue of one ``Queues`` shares its one
:class:`~redisq.pubsub.Listener`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from redisq.checks import QueueSettings
from redisq.pubsub import Listener
from redisq.queue import PriorityQueue, Queue, _StoredQueue
from redisq.script import ScriptRunner

__all__ = ["DistributedPriorityQueue", "DistributedQueue"]


class _Notifying(_StoredQueue):
    """Adds ``subscribe``; ``close`` also drops this queue's subscribers."""

    NOTIFIES = True

    def __init__(
        self, name: str, runner: ScriptRunner, listener: Listener, settings: QueueSettings
    ) -> None:
        super().__init__(name, runner, listener, settings)
        # Protects _subscribers: the callbacks this queue registered, to drop them on close.
        self._subscribers_lock = threading.Lock()
        self._subscribers: list[Callable[[str], None]] = []

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` whenever any process adds a job to this queue.

        Returns once Redis confirmed the subscription. Lossy like Redis pub/sub; after a
        reconnect every callback is called once. Raises
        :class:`~redisq.errors.RedisUnavailableError` (and keeps nothing subscribed) when Redis
        cannot be reached within a connect and a reply timeout. Ignored once the queue is
        closed.
        """
        with self._subscribers_lock:
            if self._closed:
                return
            self._subscribers.append(callback)
        failure = self._listener.subscribe(self._keys.channel, callback)
        if failure is None:
            return
        with self._subscribers_lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)
        raise self._runner.health.failed(self._name, "subscribe", failure) from failure

    def close(self) -> None:
        """Refuse further enqueues and takes and stop notifying this queue's subscribers."""
        with self._subscribers_lock:
            self._closed = True
            subscribers, self._subscribers = self._subscribers, []
        for callback in subscribers:
            self._listener.unsubscribe(self._keys.channel, callback)


class DistributedQueue(_Notifying, Queue):
    """A FIFO queue shared by processes on several hosts; enqueues notify subscribers."""


class DistributedPriorityQueue(_Notifying, PriorityQueue):
    """A priority queue shared by processes on several hosts; enqueues notify subscribers."""
