"""Binding queues to a worker: the ``bind_*`` and ``with_*`` methods and what they build.

A bind wraps the storage in a source (:mod:`varmq.sources`, :mod:`varmq.storage_source`) that
the dispatcher takes from, and returns the handle (:mod:`varmq.handles`) that users add jobs
through. :class:`Binder` builds both from what the worker gives it at construction; the two
mixins hold the public methods and are part of the worker classes of :mod:`varmq.worker`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .group import EnqueuedGroupJob
from .handles import (
    DistributedPriorityQueue,
    DistributedQueue,
    JobMaker,
    PersistentPriorityQueue,
    PersistentQueue,
    PriorityQueue,
    Producer,
    Queue,
)
from .job import EnqueuedJob
from .protocols import (
    ICapacitySetter,
    IDistributedPriorityQueue,
    IDistributedQueue,
    IPersistentPriorityQueue,
    IPersistentQueue,
    IPriorityQueue,
    IQueue,
)
from .queues import MemoryPriorityQueue, MemoryQueue
from .retry import Retry
from .sources import Decode, MemorySource, Report, Source
from .storage_source import StorageSource
from .topic_names import OnFull
from .topic_source import TopicQueue, bind_topic

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .topics import Topics

__all__ = ["Binder", "MemoryBinding", "StorageBinding", "require"]

T = TypeVar("T")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)
S = TypeVar("S", bound=Source)

# The rank of a queue bound without ``priority=``: after every ranked one, in bind order.
_LAST_RANK = sys.maxsize


class Binder(Generic[H, G]):
    """Builds the sources and handles of one worker's binds."""

    def __init__(
        self,
        *,
        dispatch: Dispatcher,
        producer: Producer,
        jobs: JobMaker[H, G],
        report: Report,
        retry: Retry | None,
        decode: Decode | None,
        poison_limit: int,
        wake_timer: Callable[[], None],
        thread_name: str,
    ) -> None:
        self._dispatch = dispatch
        self.producer = producer
        self.jobs = jobs
        self._report = report
        self._retry = retry
        self._decode = decode
        self._poison_limit = poison_limit
        self._wake_timer = wake_timer
        self._thread_name = thread_name

    def _options(
        self, storage: Any, priority: int | None, capacity: int, name: str | None, prio: bool
    ) -> dict[str, Any]:
        if capacity and isinstance(storage, ICapacitySetter):
            storage.set_capacity(capacity)
        given = name or getattr(storage, "name", None)
        label = given if isinstance(given, str) and given else None
        count = len(self._dispatch.sources)
        return {
            "label": label or f"{type(storage).__name__}#{count + 1}",
            "rank": _LAST_RANK if priority is None else priority,
            "index": count,
            "prioritised": prio,
            "report": self._report,
            "retry": self._retry,
            "decode": self._decode,
            "poll": self._dispatch.poll_interval,
        }

    def memory(
        self, storage: Any, *, priority: int | None, capacity: int, name: str | None, prio: bool
    ) -> MemorySource:
        """Bind in-memory storage: its source, added to the dispatcher."""
        source = MemorySource(
            storage,
            on_delayed=self._wake_timer,
            **self._options(storage, priority, capacity, name, prio),
        )
        self._dispatch.add_source(source)
        return source

    def add_source(
        self,
        kind: Callable[..., S],
        storage: Any,
        *,
        priority: int | None,
        name: str | None,
        **extra: Any,
    ) -> S:
        """Bind ``storage`` through a source of another kind (a topic subscription): built
        with the worker's options and ``extra``, added to the dispatcher."""
        source = kind(
            storage,
            on_delayed=self._wake_timer,
            **extra,
            **self._options(storage, priority, 0, name, False),
        )
        self._dispatch.add_source(source)
        return source

    def storage(
        self, storage: Any, *, priority: int | None, capacity: int, distributed: bool, prio: bool
    ) -> StorageSource:
        """Bind adapter storage: its source, added to the dispatcher (and subscribed to it,
        when ``distributed``)."""
        dispatch = self._dispatch
        source = StorageSource(
            storage,
            poison_limit=self._poison_limit,
            wake_timer=self._wake_timer,
            on_settled=dispatch.acks_settled,
            thread_name=self._thread_name,
            **self._options(storage, priority, capacity, None, prio),
        )
        if distributed:

            def on_event(action: str) -> None:
                if action == "enqueued":
                    dispatch.signal(0, source)

            storage.subscribe(on_event)
        dispatch.add_source(source)
        self._wake_timer()  # storage is polled and leases renewed while the worker runs
        return source


class MemoryBinding(Generic[T, H, G]):
    """``bind_queue``, ``bind_priority_queue``, ``with_queue``, ``with_priority_queue``,
    ``bind_topic``."""

    _binder: Binder[H, G]

    def bind_queue(
        self, *, priority: int | None = None, capacity: int = 0, name: str | None = None
    ) -> Queue[T, H, G]:
        """Bind a new in-memory FIFO queue (``name`` labels it in stats)."""
        return self.with_queue(MemoryQueue(), priority=priority, capacity=capacity, name=name)

    def bind_priority_queue(
        self, *, priority: int | None = None, capacity: int = 0, name: str | None = None
    ) -> PriorityQueue[T, H, G]:
        """Bind a new in-memory priority queue (lower number first, FIFO among equals)."""
        return self.with_priority_queue(
            MemoryPriorityQueue(), priority=priority, capacity=capacity, name=name
        )

    def with_queue(
        self,
        q: IQueue,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
    ) -> Queue[T, H, G]:
        """Bind the caller's FIFO storage."""
        require(q, IQueue, "with_queue")
        binder = self._binder
        source = binder.memory(q, priority=priority, capacity=capacity, name=name, prio=False)
        return Queue(q, capacity, source, binder.producer, binder.jobs)

    def with_priority_queue(
        self,
        q: IPriorityQueue,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
    ) -> PriorityQueue[T, H, G]:
        """Bind the caller's priority storage."""
        require(q, IPriorityQueue, "with_priority_queue")
        binder = self._binder
        source = binder.memory(q, priority=priority, capacity=capacity, name=name, prio=True)
        return PriorityQueue(q, capacity, source, binder.producer, binder.jobs)

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
    ) -> TopicQueue[T]:
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
        return bind_topic(
            self._binder,
            topics,
            pattern,
            max_pending=max_pending,
            on_full=on_full,
            block_timeout=block_timeout,
            name=name,
            priority=priority,
        )


class StorageBinding(Generic[T]):
    """``with_persistent_*`` and ``with_distributed_*``: storage queues (plain workers only)."""

    _binder: Binder[Any, Any]

    def with_persistent_queue(
        self, q: IPersistentQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentQueue[T]:
        """Bind a persistent FIFO queue; jobs are acknowledged after the function returned."""
        require(q, IPersistentQueue, "with_persistent_queue")
        binder = self._binder
        source = binder.storage(
            q, priority=priority, capacity=capacity, distributed=False, prio=False
        )
        return PersistentQueue(q, capacity, source, binder.producer, binder.jobs.worker)

    def with_persistent_priority_queue(
        self, q: IPersistentPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentPriorityQueue[T]:
        """Bind a persistent priority queue."""
        require(q, IPersistentPriorityQueue, "with_persistent_priority_queue")
        binder = self._binder
        source = binder.storage(
            q, priority=priority, capacity=capacity, distributed=False, prio=True
        )
        return PersistentPriorityQueue(q, capacity, source, binder.producer, binder.jobs.worker)

    def with_distributed_queue(
        self, q: IDistributedQueue, *, priority: int | None = None, capacity: int = 0
    ) -> DistributedQueue[T]:
        """Bind a distributed FIFO queue; the worker subscribes to its notifications."""
        require(q, IDistributedQueue, "with_distributed_queue")
        binder = self._binder
        source = binder.storage(
            q, priority=priority, capacity=capacity, distributed=True, prio=False
        )
        return DistributedQueue(q, capacity, source, binder.producer)

    def with_distributed_priority_queue(
        self, q: IDistributedPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> DistributedPriorityQueue[T]:
        """Bind a distributed priority queue; the worker subscribes to its notifications."""
        require(q, IDistributedPriorityQueue, "with_distributed_priority_queue")
        binder = self._binder
        source = binder.storage(
            q, priority=priority, capacity=capacity, distributed=True, prio=True
        )
        return DistributedPriorityQueue(q, capacity, source, binder.producer)


def require(q: object, protocol: type, method: str) -> None:
    """Raise ``TypeError`` naming ``method`` unless ``q`` implements ``protocol``."""
    if not isinstance(q, protocol):
        raise TypeError(f"{method} needs an {protocol.__name__}, got {type(q).__name__}")
