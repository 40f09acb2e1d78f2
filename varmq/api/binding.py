"""Binding queues to a worker: the ``bind_*`` and ``with_*`` methods of the worker classes.

Each bind has :class:`~varmq.api.binder.Binder` wrap the storage in a source for the engine,
and returns the handle users add jobs through (:mod:`varmq.api.queues`,
:mod:`varmq.api.storage_queues`, :mod:`varmq.api.topic_queue`); a handle's ``worker`` is the
worker that bound it, with its own type. The two mixins are bases of the worker classes of
:mod:`varmq.api.worker`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from typing_extensions import Self

from ..contract.protocols import (
    IDistributedPriorityQueue,
    IDistributedQueue,
    IPersistentPriorityQueue,
    IPersistentQueue,
    IPriorityQueue,
    IQueue,
)
from ..contract.topic_names import OnFull
from ..model.groups import EnqueuedGroupJob
from ..model.jobs import EnqueuedJob
from ..model.retry import Retry
from ..sources.memory_queues import MemoryPriorityQueue, MemoryQueue
from .handles import require
from .queues import PriorityQueue, Queue
from .storage_queues import (
    DistributedPriorityQueue,
    DistributedQueue,
    PersistentPriorityQueue,
    PersistentQueue,
)
from .topic_queue import TopicQueue

if TYPE_CHECKING:
    from ..sources.storage import StorageSource
    from ..topics.topics import Topics
    from .binder import Binder

__all__ = ["MemoryBinding", "StorageBinding"]

T = TypeVar("T")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)


class MemoryBinding(Generic[T, H, G]):
    """``bind_queue``, ``bind_priority_queue``, ``with_queue``, ``with_priority_queue``,
    ``bind_topic``."""

    _binder: Binder[H, G]

    def bind_queue(
        self,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
        rate_limit: str | tuple[int, float] | None = None,
    ) -> Queue[T, H, G, Self]:
        """Bind a new in-memory FIFO queue (``name`` labels it in stats).

        ``retry`` is this queue's retry policy, in place of the worker's ``retry=``. With
        ``keep_results`` (seconds), the queue keeps a record of every job added with an id,
        for ``handle.job(job_id)``, ``result_of`` and ``cancel`` (in this process). With
        ``rate_limit`` (``"100/s"``, ``"6000/m"``, ``(count, seconds)``), at most that many of
        its jobs start in any window of that length (docs/rate-limits.md).
        """
        return self.with_queue(
            MemoryQueue(),
            priority=priority,
            capacity=capacity,
            name=name,
            retry=retry,
            keep_results=keep_results,
            rate_limit=rate_limit,
        )

    def bind_priority_queue(
        self,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
        rate_limit: str | tuple[int, float] | None = None,
    ) -> PriorityQueue[T, H, G, Self]:
        """Bind a new in-memory priority queue (lower number first, FIFO among equals)."""
        return self.with_priority_queue(
            MemoryPriorityQueue(),
            priority=priority,
            capacity=capacity,
            name=name,
            retry=retry,
            keep_results=keep_results,
            rate_limit=rate_limit,
        )

    def with_queue(
        self,
        q: IQueue,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
        rate_limit: str | tuple[int, float] | None = None,
    ) -> Queue[T, H, G, Self]:
        """Bind the caller's FIFO storage, e.g. a queue from :func:`varmq.load_queues`.

        ``retry`` is this queue's retry policy, in place of the worker's ``retry=`` (``None``:
        the worker's). A loaded queue's delayed jobs and dead letters come along.
        """
        require(q, IQueue, "with_queue")
        source = self._binder.memory(
            q, priority, capacity, name, False, retry, keep_results, rate_limit
        )
        binder = self._binder
        return binder.made(Queue(q, capacity, source, binder.producer, binder.jobs, self))

    def with_priority_queue(
        self,
        q: IPriorityQueue,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
        rate_limit: str | tuple[int, float] | None = None,
    ) -> PriorityQueue[T, H, G, Self]:
        """Bind the caller's priority storage; ``retry`` as for :meth:`with_queue`."""
        require(q, IPriorityQueue, "with_priority_queue")
        source = self._binder.memory(
            q, priority, capacity, name, True, retry, keep_results, rate_limit
        )
        binder = self._binder
        return binder.made(PriorityQueue(q, capacity, source, binder.producer, binder.jobs, self))

    def bind_topic(
        self,
        topics: Topics,
        pattern: str,
        *,
        max_pending: int = 1000,
        on_full: OnFull = "block",
        block_timeout: float | None = None,
        name: str | None = None,
        priority: int | None = None,
    ) -> TopicQueue[T, Self]:
        """Subscribe this worker to ``topics``: each message published to a name matching
        ``pattern`` becomes a job (``job.data``, ``job.topic``, ``job.message_id``).

        Messages wait in a buffer of ``max_pending``; when it is full, ``on_full`` decides, as
        for ``topics.subscribe``: ``"block"`` makes ``publish`` wait up to ``block_timeout``
        seconds and then raise :class:`~varmq.SubscriberFullError`, ``"drop_oldest"`` and
        ``"drop_newest"`` drop one message and count it (``dropped``, ``metrics.dropped``).
        Concurrency, retries, dead letters, metrics, pause and stop apply as for any queue.
        Returns the subscription's handle; ``name`` (default ``"topic:<pattern>"``) labels it
        in errors and stats, ``priority`` ranks it among the worker's queues.
        """
        source = self._binder.topic(
            topics,
            pattern,
            max_pending=max_pending,
            on_full=on_full,
            block_timeout=block_timeout,
            name=name,
            priority=priority,
        )
        return TopicQueue(topics, source, self)


class StorageBinding(Generic[T]):
    """``with_persistent_*`` and ``with_distributed_*``: storage queues. Err and result workers
    bind only queues that keep job records (opened with ``keep_results``)."""

    _binder: Binder[Any, Any]

    def with_persistent_queue(
        self, q: IPersistentQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentQueue[T, Self]:
        """Bind a persistent FIFO queue; jobs are acknowledged after the function returned."""
        source = self._source(q, IPersistentQueue, "with_persistent_queue", priority, capacity)
        binder = self._binder
        return binder.made(PersistentQueue(q, capacity, source, binder.producer, self))

    def with_persistent_priority_queue(
        self, q: IPersistentPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentPriorityQueue[T, Self]:
        """Bind a persistent priority queue."""
        source = self._source(
            q, IPersistentPriorityQueue, "with_persistent_priority_queue", priority, capacity
        )
        binder = self._binder
        return binder.made(PersistentPriorityQueue(q, capacity, source, binder.producer, self))

    def with_distributed_queue(
        self, q: IDistributedQueue, *, priority: int | None = None, capacity: int = 0
    ) -> DistributedQueue[T]:
        """Bind a distributed FIFO queue; the worker subscribes to its notifications."""
        source = self._source(q, IDistributedQueue, "with_distributed_queue", priority, capacity)
        return self._binder.made(DistributedQueue(q, capacity, source, self._binder.producer))

    def with_distributed_priority_queue(
        self, q: IDistributedPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> DistributedPriorityQueue[T]:
        """Bind a distributed priority queue; the worker subscribes to its notifications."""
        source = self._source(
            q, IDistributedPriorityQueue, "with_distributed_priority_queue", priority, capacity
        )
        binder = self._binder
        return binder.made(DistributedPriorityQueue(q, capacity, source, binder.producer))

    def _source(
        self, q: Any, protocol: type, method: str, priority: int | None, capacity: int
    ) -> StorageSource:
        """The source of ``q`` bound through ``method`` (which names ``protocol``): a
        distributed one subscribes to notifications, a priority one takes priorities."""
        require(q, protocol, method)
        return self._binder.storage(
            q,
            priority=priority,
            capacity=capacity,
            distributed=protocol in (IDistributedQueue, IDistributedPriorityQueue),
            prio=protocol in (IPersistentPriorityQueue, IDistributedPriorityQueue),
            method=method,
        )
