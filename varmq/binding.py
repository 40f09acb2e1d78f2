"""Binding queues to a worker: the ``bind_*`` and ``with_*`` methods and what they build.

Each bind wraps the storage in a source (:mod:`varmq.sources`) that the scheduler takes from,
and returns the handle (:mod:`varmq.handles`) that users add jobs through. Mixed into the
worker classes of :mod:`varmq.worker`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .group import EnqueuedGroupJob, Group
from .handles import (
    DistributedPriorityQueue,
    DistributedQueue,
    PersistentPriorityQueue,
    PersistentQueue,
    PriorityQueue,
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
from .scheduler import Scheduler, State
from .sources import MemorySource, StorageSource

if TYPE_CHECKING:
    from .maintenance import Maintenance

__all__ = ["MemoryBinding", "StorageBinding"]

T = TypeVar("T")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)

_LAST_RANK = sys.maxsize


class _Bound:
    """What binding needs from the worker it is mixed into."""

    _sched: Scheduler
    _maintenance: Maintenance
    _next_id: Callable[[], str]
    _to_json: Callable[[Any], Any] | None
    _poison_limit: int
    _job_class: type[EnqueuedJob[Any]]
    _group_class: type[EnqueuedGroupJob]
    _group_wants: str

    def _report(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _delayed(self) -> None:
        raise NotImplementedError

    def _source_label(self, storage: Any, name: str | None) -> str:
        given = name or getattr(storage, "name", None)
        if isinstance(given, str) and given:
            return given
        return f"{type(storage).__name__}#{len(self._sched.sources) + 1}"


class MemoryBinding(_Bound, Generic[T, H, G]):
    """``bind_queue``, ``bind_priority_queue``, ``with_queue``, ``with_priority_queue``."""

    def _new_group(self, size: int) -> tuple[Group, Callable[[Group, list[Any]], G]]:
        group = Group(size, self._group_wants)
        cls = self._group_class

        def wrap(g: Group, jobs: list[Any]) -> G:
            handle: G = cls(g, jobs)  # type: ignore[assignment]
            return handle

        return group, wrap

    def _new_job(self, job_id: str, data: Any, group: Group | None) -> H:
        job: H = self._job_class(job_id, data, group)  # type: ignore[assignment]
        return job

    def _bind_memory(
        self, storage: Any, priority: int | None, capacity: int, name: str | None, prio: bool
    ) -> MemorySource:
        if capacity and isinstance(storage, ICapacitySetter):
            storage.set_capacity(capacity)
        sched = self._sched
        source = MemorySource(
            storage,
            self._source_label(storage, name),
            _LAST_RANK if priority is None else priority,
            len(sched.sources),
            self._report,
            prio,
        )
        sched.add_source(source)
        return source

    def _memory_handle(self, cls: Any, q: Any, source: MemorySource, capacity: int) -> Any:
        return cls(
            q,
            capacity,
            self._sched,
            self,
            self._new_job,
            self._new_group,
            self._next_id,
            source,
            self._delayed,
        )

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
        if not isinstance(q, IQueue):
            raise TypeError(f"with_queue needs an IQueue, got {type(q).__name__}")
        source = self._bind_memory(q, priority, capacity, name, prio=False)
        handle: Queue[T, H, G] = self._memory_handle(Queue, q, source, capacity)
        return handle

    def with_priority_queue(
        self,
        q: IPriorityQueue,
        *,
        priority: int | None = None,
        capacity: int = 0,
        name: str | None = None,
    ) -> PriorityQueue[T, H, G]:
        """Bind the caller's priority storage."""
        if not isinstance(q, IPriorityQueue):
            raise TypeError(f"with_priority_queue needs an IPriorityQueue, got {type(q).__name__}")
        source = self._bind_memory(q, priority, capacity, name, prio=True)
        handle: PriorityQueue[T, H, G] = self._memory_handle(PriorityQueue, q, source, capacity)
        return handle


class StorageBinding(_Bound, Generic[T]):
    """``with_persistent_*`` and ``with_distributed_*``: storage queues (plain workers only)."""

    def _bind_storage(
        self,
        storage: Any,
        priority: int | None,
        capacity: int,
        distributed: bool,
        prio: bool,
    ) -> StorageSource:
        if capacity and isinstance(storage, ICapacitySetter):
            storage.set_capacity(capacity)
        sched = self._sched
        source = StorageSource(
            storage,
            self._source_label(storage, None),
            _LAST_RANK if priority is None else priority,
            len(sched.sources),
            self._report,
            sched.poll_interval,
            self._poison_limit,
        )
        source.prioritised = prio
        if distributed:

            def on_event(action: str) -> None:
                if action == "enqueued":
                    sched.signal(0, source)

            storage.subscribe(on_event)
        sched.add_source(source)
        if sched.state is State.ACTIVE:
            self._maintenance.start()
        return source

    def _storage_handle(self, cls: Any, q: Any, source: StorageSource, capacity: int) -> Any:
        return cls(q, capacity, self._sched, source, self._next_id, self._to_json, self._delayed)

    def with_persistent_queue(
        self, q: IPersistentQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentQueue[T]:
        """Bind a persistent FIFO queue; jobs are acknowledged after the function returned."""
        _require(q, IPersistentQueue, "with_persistent_queue")
        source = self._bind_storage(q, priority, capacity, distributed=False, prio=False)
        handle: PersistentQueue[T] = self._storage_handle(PersistentQueue, q, source, capacity)
        handle._worker = self
        return handle

    def with_persistent_priority_queue(
        self, q: IPersistentPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> PersistentPriorityQueue[T]:
        """Bind a persistent priority queue."""
        _require(q, IPersistentPriorityQueue, "with_persistent_priority_queue")
        source = self._bind_storage(q, priority, capacity, distributed=False, prio=True)
        handle: PersistentPriorityQueue[T] = self._storage_handle(
            PersistentPriorityQueue, q, source, capacity
        )
        handle._worker = self
        return handle

    def with_distributed_queue(
        self, q: IDistributedQueue, *, priority: int | None = None, capacity: int = 0
    ) -> DistributedQueue[T]:
        """Bind a distributed FIFO queue; the worker subscribes to its notifications."""
        _require(q, IDistributedQueue, "with_distributed_queue")
        source = self._bind_storage(q, priority, capacity, distributed=True, prio=False)
        handle: DistributedQueue[T] = self._storage_handle(DistributedQueue, q, source, capacity)
        return handle

    def with_distributed_priority_queue(
        self, q: IDistributedPriorityQueue, *, priority: int | None = None, capacity: int = 0
    ) -> DistributedPriorityQueue[T]:
        """Bind a distributed priority queue; the worker subscribes to its notifications."""
        _require(q, IDistributedPriorityQueue, "with_distributed_priority_queue")
        source = self._bind_storage(q, priority, capacity, distributed=True, prio=True)
        handle: DistributedPriorityQueue[T] = self._storage_handle(
            DistributedPriorityQueue, q, source, capacity
        )
        return handle


def _require(q: object, protocol: type, method: str) -> None:
    if not isinstance(q, protocol):
        raise TypeError(f"{method} needs an {protocol.__name__}, got {type(q).__name__}")
