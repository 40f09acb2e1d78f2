"""Queue handles: what ``bind_*``/``with_*`` return, and where ``add`` starts a job's path.

In-memory handles put job objects into their storage and return job handles. Persistent and
distributed handles encode the job as a JSON envelope (:mod:`varmq.envelope`), give the bytes to
the adapter and return ``True``/``False``. Every handle can delay a job (``delay=`` seconds or
``run_at=`` a datetime) and lists, requeues and purges its queue's dead letters. After an add,
the handle tells the worker's dispatcher (if it has a worker) that work is there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import envelope
from .group import EnqueuedGroupJob, Group, Item
from .job import EnqueuedJob, cancel_waiting
from .protocols import IDeadLetterable, IDedupQueue, IDelayedEnqueue
from .retry import DeadLetter

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .sources import MemorySource
    from .storage_source import StorageSource
    from .worker import BaseWorker

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
G = TypeVar("G", bound=EnqueuedGroupJob)

IdGenerator = Callable[[], str]


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Producer:
    """What a handle adds jobs with: the id generator, the payload encoder, and the worker's
    dispatcher to tell (``None`` for a producer-only handle)."""

    next_id: IdGenerator
    to_json: Callable[[Any], Any] | None = None
    dispatch: Dispatcher | None = None
    #: Called after a delayed add: the worker's timer must bring the job back.
    on_delayed: Callable[[], None] = _nothing


@dataclass(frozen=True)
class JobMaker(Generic[H, G]):
    """How an in-memory handle makes job handles: the worker kind's job and group classes."""

    worker: BaseWorker[Any, Any, Any]
    new_job: Callable[[str, Any, Group | None], H]
    new_group: Callable[[int], tuple[Group, Callable[[Group, list[H]], G]]]


def _delay_of(delay: float | None, run_at: datetime | None) -> float:
    """Seconds from now until a job may run (0: now)."""
    if delay is not None and run_at is not None:
        raise ValueError("give delay= or run_at=, not both")
    if run_at is not None:
        return max(run_at.timestamp() - time.time(), 0.0)
    if delay is not None:
        if delay != delay or delay < 0:  # NaN or negative
            raise ValueError(f"delay must be a number of seconds >= 0, got {delay!r}")
        return float(delay)
    return 0.0


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
        cancel_waiting(snapshot)

    def close(self) -> None:
        """Refuse further adds; jobs already queued are still processed."""
        self._storage.close()


class _MemoryHandle(_Handle, Generic[T, H, G]):
    def __init__(
        self,
        storage: Any,
        capacity: int,
        source: MemorySource,
        producer: Producer,
        jobs: JobMaker[H, G],
    ) -> None:
        super().__init__(storage, capacity)
        self._source = source
        self._producer = producer
        self._jobs = jobs
        assert producer.dispatch is not None
        self._dispatch = producer.dispatch

    @property
    def worker(self) -> BaseWorker[T, H, G]:
        """The worker this queue is bound to."""
        return self._jobs.worker

    def _offer(self, job: H, priority: int | None, wait: float) -> bool:
        job._queued(priority)
        if wait > 0:
            self._source.delayed.add(job, time.monotonic() + wait)
            return True
        if not self._source.offer(job):
            job._refused()
            return False
        return True

    def _add(self, data: Any, priority: int | None, job_id: str | None, wait: float) -> H | None:
        job = self._jobs.new_job(job_id or self._producer.next_id(), data, None)
        if not self._offer(job, priority, wait):
            return None
        if wait > 0:
            self._dispatch.add_submitted(1)
            self._producer.on_delayed()
        else:
            self._dispatch.signal(1)
        return job

    def _add_all(self, items: Iterable[Any], prioritised: bool) -> G:
        entries = [i if isinstance(i, Item) else Item(i) for i in items]
        group, wrap = self._jobs.new_group(len(entries))
        jobs: list[H] = []
        for entry in entries:
            job = self._jobs.new_job(entry.id or self._producer.next_id(), entry.data, group)
            if self._offer(job, entry.priority if prioritised else None, 0.0):
                jobs.append(job)
            else:
                group.member_done(job.id, None, None, ran=False)
        if jobs:
            self._dispatch.signal(len(jobs))
        return wrap(group, jobs)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Jobs that ran out of attempts (with a retry policy), oldest first."""
        return self._source.dead.letters(limit)

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Run dead letters again as new jobs (all when ``keys`` is ``None``); how many."""
        requeued = 0
        # Under the dispatcher's lock, a snapshot sees each letter either dead or requeued.
        with self._dispatch.lock:
            for old in self._source.dead.take(None if keys is None else set(keys)):
                job = self._jobs.new_job(old.id, old.data, None)
                if self._offer(job, old._priority, 0.0):
                    requeued += 1
        if requeued:
            self._dispatch.signal(0)
        return requeued

    def purge_dead(self) -> int:
        """Forget every dead letter; how many there were."""
        return len(self._source.dead.take(None))


class Queue(_MemoryHandle[T, H, G]):
    """A FIFO queue bound to a worker."""

    def add(
        self,
        data: T,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
    ) -> H | None:
        """Add a job; its handle, or ``None`` when the queue refused it (closed, full).

        With ``delay`` (seconds) or ``run_at`` (a datetime) the job waits until then.
        """
        return self._add(data, None, job_id, _delay_of(delay, run_at))

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs (``Item`` or bare data); a handle tracking them together."""
        return self._add_all(items, False)


class PriorityQueue(_MemoryHandle[T, H, G]):
    """A priority queue bound to a worker: lower ``priority`` runs first."""

    def add(
        self,
        data: T,
        priority: int = 0,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
    ) -> H | None:
        """Add a job with ``priority``; its handle, or ``None`` when refused."""
        return self._add(data, priority, job_id, _delay_of(delay, run_at))

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs, each with its ``Item.priority``; a handle tracking them."""
        return self._add_all(items, True)


class _StorageHandle(_Handle, Generic[T]):
    def __init__(
        self,
        storage: Any,
        capacity: int,
        source: StorageSource | None,
        producer: Producer,
    ) -> None:
        super().__init__(storage, capacity)
        self._source = source
        self._producer = producer
        self._dedup = isinstance(storage, IDedupQueue)

    def purge(self) -> None:
        """Remove every job waiting in storage."""
        self._storage.purge()

    def _add(self, data: Any, priority: int | None, job_id: str | None, wait: float) -> bool:
        producer = self._producer
        job_id = job_id or producer.next_id()
        raw = envelope.encode(job_id, data, producer.to_json)
        if raw is None:
            return False
        storage = self._storage
        if wait > 0 and not isinstance(storage, IDelayedEnqueue):
            raise TypeError(f"{type(storage).__name__} cannot delay jobs (no enqueue_delayed)")
        try:
            if wait > 0:
                ok = storage.enqueue_delayed(raw, wait, job_id or None, priority)
            elif job_id and self._dedup:
                ok = storage.enqueue_dedup(raw, job_id, priority)
            elif priority is None:
                ok = storage.enqueue(raw)
            else:
                ok = storage.enqueue(raw, priority)
        except Exception as exc:
            log.warning("enqueue to %s failed: %r", type(storage).__name__, exc)
            return False
        dispatch = producer.dispatch
        if ok and dispatch is not None:
            if wait > 0:
                dispatch.add_submitted(1)
                if self._source is not None:
                    self._source.expect_due(wait)
                producer.on_delayed()
            else:
                dispatch.signal(1, self._source)
        return bool(ok)

    def _dead_letter_store(self) -> Any:
        if not isinstance(self._storage, IDeadLetterable):
            raise TypeError(f"{type(self._storage).__name__} keeps no dead letters")
        return self._storage

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Jobs that ran out of attempts or never decoded, oldest first."""
        letters = []
        for entry in self._dead_letter_store().dead_letters(limit):
            try:
                job_id, data = envelope.decode(entry["item"])
            except envelope.EnvelopeError:
                job_id, data = "", entry["item"]
            letters.append(
                DeadLetter(
                    key=str(entry["key"]),
                    id=job_id,
                    data=data,
                    attempts=int(entry["attempts"]),
                    error=str(entry["error"]),
                    dead_at=float(entry["dead_at"]),
                )
            )
        return letters

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Put dead letters back in line (all when ``keys`` is ``None``); how many."""
        count = int(self._dead_letter_store().requeue_dead(None if keys is None else list(keys)))
        if count and self._producer.dispatch is not None:
            self._producer.dispatch.signal(0, self._source)
        return count

    def purge_dead(self) -> int:
        """Delete every dead letter; how many there were."""
        return int(self._dead_letter_store().purge_dead())


class _FifoAdd(_StorageHandle[T]):
    """``add`` of a FIFO queue in storage."""

    def add(
        self,
        data: T,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
    ) -> bool:
        """Store a job; ``False`` when refused (closed, storage error, not JSON-encodable)."""
        return self._add(data, None, job_id, _delay_of(delay, run_at))


class _PriorityAdd(_StorageHandle[T]):
    """``add`` of a priority queue in storage."""

    def add(
        self,
        data: T,
        priority: int = 0,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
    ) -> bool:
        """Store a job with ``priority``; ``False`` when refused."""
        return self._add(data, priority, job_id, _delay_of(delay, run_at))


class _Bound(_StorageHandle[T]):
    """A storage handle bound to a worker (``.worker``)."""

    def __init__(
        self,
        storage: Any,
        capacity: int,
        source: StorageSource,
        producer: Producer,
        worker: BaseWorker[Any, Any, Any],
    ) -> None:
        super().__init__(storage, capacity, source, producer)
        self._worker = worker

    @property
    def worker(self) -> BaseWorker[Any, Any, Any]:
        """The worker this queue is bound to."""
        return self._worker


class DistributedQueue(_FifoAdd[T]):
    """A FIFO queue in storage shared by consumers in many processes (may be producer-only)."""


class DistributedPriorityQueue(_PriorityAdd[T]):
    """A priority queue in storage shared by consumers in many processes."""


class PersistentQueue(_FifoAdd[T], _Bound[T]):
    """A FIFO queue in storage, bound to a worker (``.worker``)."""


class PersistentPriorityQueue(_PriorityAdd[T], _Bound[T]):
    """A priority queue in storage, bound to a worker (``.worker``)."""
