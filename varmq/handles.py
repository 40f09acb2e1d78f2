"""Queue handles: what ``bind_*``/``with_*`` return, and where ``add`` starts a job's path.

In-memory handles put job objects into their storage and return job handles. Persistent and
distributed handles encode the job as a JSON envelope, give the bytes to the adapter and return
``True``/``False``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import envelope
from .group import Group, Item
from .job import EnqueuedJob, JobStatus
from .protocols import IDedupQueue
from .scheduler import Scheduler

if TYPE_CHECKING:
    from .sources import StorageSource

__all__ = [
    "DistributedPriorityQueue",
    "DistributedQueue",
    "PersistentPriorityQueue",
    "PersistentQueue",
    "PriorityQueue",
    "Queue",
]

log = logging.getLogger("varmq")

T = TypeVar("T")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G")

IdGenerator = Callable[[], str]


class _Handle:
    """What every queue handle offers: length, capacity, purge and close."""

    def __init__(self, storage: Any, capacity: int) -> None:
        self._storage = storage
        self._capacity = max(0, capacity)

    def __len__(self) -> int:
        """Jobs waiting in the queue (for storage: in storage, from every process)."""
        return len(self._storage)

    def is_full(self) -> bool:
        """``True`` when a capacity was given and that many jobs wait."""
        return self._capacity > 0 and len(self._storage) >= self._capacity

    def purge(self) -> None:
        """Remove every waiting job; waiting callers of purged jobs are released."""
        snapshot = self._storage.values()
        self._storage.purge()
        for item in snapshot:
            if isinstance(item, EnqueuedJob):
                # A job taken meanwhile runs and closes normally.
                with contextlib.suppress(Exception):
                    item._cancel()

    def close(self) -> None:
        """Refuse further adds; jobs already queued are still processed."""
        self._storage.close()


class _MemoryHandle(_Handle, Generic[T, H, G]):
    def __init__(
        self,
        storage: Any,
        capacity: int,
        sched: Scheduler,
        worker: Any,
        make_job: Callable[[str, Any, Group | None], H],
        make_group: Callable[[int], tuple[Group, Callable[[Group, list[H]], G]]],
        next_id: IdGenerator,
    ) -> None:
        super().__init__(storage, capacity)
        self._sched = sched
        self._worker = worker
        self._make_job = make_job
        self._make_group = make_group
        self._next_id = next_id

    @property
    def worker(self) -> Any:
        """The worker this queue is bound to."""
        return self._worker

    def _offer(self, job: H, priority: int | None) -> bool:
        job._status = JobStatus.QUEUED
        ok = (
            self._storage.enqueue(job) if priority is None else self._storage.enqueue(job, priority)
        )
        if not ok:
            job._status = JobStatus.CLOSED
        return bool(ok)

    def _add(self, data: Any, priority: int | None, job_id: str | None) -> H | None:
        job = self._make_job(job_id or self._next_id(), data, None)
        if not self._offer(job, priority):
            return None
        self._sched.signal(1)
        return job

    def _add_all(self, items: Iterable[Any], prioritised: bool) -> G:
        entries = [i if isinstance(i, Item) else Item(i) for i in items]
        group, wrap = self._make_group(len(entries))
        jobs: list[H] = []
        for entry in entries:
            job = self._make_job(entry.id or self._next_id(), entry.data, group)
            if self._offer(job, entry.priority if prioritised else None):
                jobs.append(job)
            else:
                group.member_done(job, ran=False)
        if jobs:
            self._sched.signal(len(jobs))
        return wrap(group, jobs)


class Queue(_MemoryHandle[T, H, G]):
    """A FIFO queue bound to a worker."""

    def add(self, data: T, *, job_id: str | None = None) -> H | None:
        """Add a job; its handle, or ``None`` when the queue refused it (closed, full)."""
        return self._add(data, None, job_id)

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs (``Item`` or bare data); a handle tracking them together."""
        return self._add_all(items, False)


class PriorityQueue(_MemoryHandle[T, H, G]):
    """A priority queue bound to a worker: lower ``priority`` runs first."""

    def add(self, data: T, priority: int = 0, *, job_id: str | None = None) -> H | None:
        """Add a job with ``priority``; its handle, or ``None`` when refused."""
        return self._add(data, priority, job_id)

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs, each with its ``Item.priority``; a handle tracking them."""
        return self._add_all(items, True)


class _StorageHandle(_Handle, Generic[T]):
    def __init__(
        self,
        storage: Any,
        capacity: int,
        sched: Scheduler | None,
        source: StorageSource | None,
        next_id: IdGenerator,
        to_json: Callable[[Any], Any] | None,
    ) -> None:
        super().__init__(storage, capacity)
        self._sched = sched
        self._source = source
        self._next_id = next_id
        self._to_json = to_json
        self._dedup = isinstance(storage, IDedupQueue)

    def purge(self) -> None:
        """Remove every job waiting in storage."""
        self._storage.purge()

    def _add(self, data: Any, priority: int | None, job_id: str | None) -> bool:
        job_id = job_id or self._next_id()
        raw = envelope.encode(job_id, data, self._to_json)
        if raw is None:
            return False
        try:
            if job_id and self._dedup:
                ok = self._storage.enqueue_dedup(raw, job_id, priority)
            elif priority is None:
                ok = self._storage.enqueue(raw)
            else:
                ok = self._storage.enqueue(raw, priority)
        except Exception as exc:
            log.warning("enqueue failed: %r", exc)
            return False
        if ok and self._sched is not None:
            self._sched.signal(1, self._source)
        return bool(ok)


class PersistentQueue(_StorageHandle[T]):
    """A FIFO queue in storage, bound to a worker."""

    def __init__(self, *args: Any, worker: Any) -> None:
        super().__init__(*args)
        self._worker = worker

    @property
    def worker(self) -> Any:
        """The worker this queue is bound to."""
        return self._worker

    def add(self, data: T, *, job_id: str | None = None) -> bool:
        """Store a job; ``False`` when refused (closed, storage error, not JSON-encodable)."""
        return self._add(data, None, job_id)


class PersistentPriorityQueue(_StorageHandle[T]):
    """A priority queue in storage, bound to a worker."""

    def __init__(self, *args: Any, worker: Any) -> None:
        super().__init__(*args)
        self._worker = worker

    @property
    def worker(self) -> Any:
        """The worker this queue is bound to."""
        return self._worker

    def add(self, data: T, priority: int = 0, *, job_id: str | None = None) -> bool:
        """Store a job with ``priority``; ``False`` when refused."""
        return self._add(data, priority, job_id)


class DistributedQueue(_StorageHandle[T]):
    """A FIFO queue in storage shared by consumers in many processes."""

    def add(self, data: T, *, job_id: str | None = None) -> bool:
        """Store a job; ``False`` when refused (closed, storage error, not JSON-encodable)."""
        return self._add(data, None, job_id)


class DistributedPriorityQueue(_StorageHandle[T]):
    """A priority queue in storage shared by consumers in many processes."""

    def add(self, data: T, priority: int = 0, *, job_id: str | None = None) -> bool:
        """Store a job with ``priority``; ``False`` when refused."""
        return self._add(data, priority, job_id)
