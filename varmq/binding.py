"""Binding queues to a worker: the ``bind_*`` and ``with_*`` methods and what they build.

A bind wraps the storage in a source (:mod:`varmq.sources`, :mod:`varmq.storage_source`) that
the dispatcher takes from, and returns the handle (:mod:`varmq.handles`) that users add jobs
through. :class:`Binder` builds both from what the worker gives it at construction; the two
mixins hold the public methods and are part of the worker classes of :mod:`varmq.worker`.

Every worker kind binds storage queues; err and result workers only queues that keep job
records (``keep_results``), since that is where their outcomes go for other processes to read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import options as check
from .contract.protocols import (
    ICapacitySetter,
    IDistributedPriorityQueue,
    IDistributedQueue,
    IJobRecords,
    IPersistentPriorityQueue,
    IPersistentQueue,
    IPriorityQueue,
    IQueue,
)
from .contract.topic_names import OnFull
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
from .queues import MemoryPriorityQueue, MemoryQueue
from .retry import Retry
from .sources import CancelRunning, Decode, MemorySource, Report, Source
from .storage_source import StorageSource
from .topic_source import TopicQueue, bind_topic

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .topics import Topics

__all__ = ["Binder", "MemoryBinding", "StorageBinding", "require"]

T = TypeVar("T")
Q = TypeVar("Q")
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
        cancel_running: CancelRunning | None = None,
        outcomes: str = "",
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
        self._cancel_running = cancel_running
        # What the worker kind's handles give back ("", "errs", "results"): err and result
        # workers bind only storage that keeps records, and result workers keep their values.
        self._outcomes = outcomes
        #: Every handle made, in bind order (what ``worker.schedule`` uses without ``queue=``).
        self.handles: list[Any] = []

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
            "cancel_running": self._cancel_running,
        }

    def memory(
        self,
        storage: Any,
        *,
        priority: int | None,
        capacity: int,
        name: str | None,
        prio: bool,
        retry: Retry | None,
        keep_results: float = 0.0,
    ) -> MemorySource:
        """Bind in-memory storage: its source, added to the dispatcher."""
        keep = check.seconds("keep_results", keep_results)
        options = self._options(storage, priority, capacity, name, prio)
        if retry is not None:
            if not isinstance(retry, Retry):
                raise TypeError(f"retry must be a varmq.Retry or None, got {type(retry).__name__}")
            options["retry"] = retry  # the queue's own policy, in place of the worker's
        source = MemorySource(
            storage,
            on_delayed=self._wake_timer,
            poison_limit=self._poison_limit,
            keep_results=keep,
            **options,
        )
        self._dispatch.add_source(source)
        if source.needs_timer():
            self._wake_timer()  # delayed jobs a queue loaded from a snapshot brought along
        return source

    def _require_records(self, storage: Any, method: str) -> None:
        """Refuse storage without job records for an err or result worker."""
        kind = "an err" if self._outcomes == "errs" else "a result"
        needs = (
            f"{method}: {kind} worker needs a queue that keeps job records (its jobs' outcomes "
            "go there, for any process to read)"
        )
        if not isinstance(storage, IJobRecords):
            raise TypeError(f"{needs}; {type(storage).__name__} keeps none")
        try:
            keep = float(storage.keep_results)
        except Exception:
            keep = 0.0
        if not keep > 0:
            label = getattr(storage, "name", None) or type(storage).__name__
            raise ValueError(f"{needs}; open queue {label!r} with keep_results=SECONDS")

    def made(self, handle: Q) -> Q:
        """Remember ``handle`` (just made by a bind) and return it."""
        self.handles.append(handle)
        return handle

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
        self,
        storage: Any,
        *,
        priority: int | None,
        capacity: int,
        distributed: bool,
        prio: bool,
        method: str = "bind",
    ) -> StorageSource:
        """Bind adapter storage: its source, added to the dispatcher (and subscribed to it,
        when ``distributed``). An err or result worker needs storage that keeps job records
        (``TypeError``/``ValueError`` naming ``method`` otherwise)."""
        if self._outcomes:
            self._require_records(storage, method)
        dispatch = self._dispatch
        source = StorageSource(
            storage,
            poison_limit=self._poison_limit,
            wake_timer=self._wake_timer,
            on_settled=dispatch.acks_settled,
            thread_name=self._thread_name,
            keep_values=self._outcomes == "results",
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
        self,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
    ) -> Queue[T, H, G]:
        """Bind a new in-memory FIFO queue (``name`` labels it in stats).

        ``retry`` is this queue's retry policy, in place of the worker's ``retry=``. With
        ``keep_results`` (seconds), the queue keeps a record of every job added with an id,
        for ``handle.job(job_id)``, ``result_of`` and ``cancel`` (in this process).
        """
        return self.with_queue(
            MemoryQueue(),
            priority=priority,
            capacity=capacity,
            name=name,
            retry=retry,
            keep_results=keep_results,
        )

    def bind_priority_queue(
        self,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
    ) -> PriorityQueue[T, H, G]:
        """Bind a new in-memory priority queue (lower number first, FIFO among equals)."""
        return self.with_priority_queue(
            MemoryPriorityQueue(),
            priority=priority,
            capacity=capacity,
            name=name,
            retry=retry,
            keep_results=keep_results,
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
    ) -> Queue[T, H, G]:
        """Bind the caller's FIFO storage, e.g. a queue from :func:`varmq.load_queues`.

        ``retry`` is this queue's retry policy, in place of the worker's ``retry=`` (``None``:
        the worker's). A loaded queue's delayed jobs and dead letters come along.
        """
        require(q, IQueue, "with_queue")
        binder = self._binder
        source = binder.memory(
            q,
            priority=priority,
            capacity=capacity,
            name=name,
            prio=False,
            retry=retry,
            keep_results=keep_results,
        )
        return binder.made(Queue(q, capacity, source, binder.producer, binder.jobs))

    def with_priority_queue(
        self,
        q: IPriorityQueue,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
        retry: Retry | None = None,
        keep_results: float = 0.0,
    ) -> PriorityQueue[T, H, G]:
        """Bind the caller's priority storage; ``retry`` as for :meth:`with_queue`."""
        require(q, IPriorityQueue, "with_priority_queue")
        binder = self._binder
        source = binder.memory(
            q,
            priority=priority,
            capacity=capacity,
            name=name,
            prio=True,
            retry=retry,
            keep_results=keep_results,
        )
        return binder.made(PriorityQueue(q, capacity, source, binder.producer, binder.jobs))

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
    """``with_persistent_*`` and ``with_distributed_*``: storage queues. Err and result workers
    bind only queues that keep job records (opened with ``keep_results``)."""

    _binder: Binder[Any, Any]

    def with_persistent_queue(
        self, q: IPersistentQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentQueue[T]:
        """Bind a persistent FIFO queue; jobs are acknowledged after the function returned."""
        source = self._source(q, IPersistentQueue, "with_persistent_queue", priority, capacity)
        binder = self._binder
        return binder.made(
            PersistentQueue(q, capacity, source, binder.producer, binder.jobs.worker)
        )

    def with_persistent_priority_queue(
        self, q: IPersistentPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentPriorityQueue[T]:
        """Bind a persistent priority queue."""
        source = self._source(
            q, IPersistentPriorityQueue, "with_persistent_priority_queue", priority, capacity
        )
        binder = self._binder
        return binder.made(
            PersistentPriorityQueue(q, capacity, source, binder.producer, binder.jobs.worker)
        )

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


def require(q: object, protocol: type, method: str) -> None:
    """Raise ``TypeError`` naming ``method`` unless ``q`` implements ``protocol``."""
    if not isinstance(q, protocol):
        raise TypeError(f"{method} needs an {protocol.__name__}, got {type(q).__name__}")
