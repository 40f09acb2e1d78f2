"""Queue handles: what ``bind_*``/``with_*`` return, and where ``add`` starts a job's path.

In-memory handles put job objects into their storage and return job handles. Persistent and
distributed handles encode the job as a JSON envelope (:mod:`varmq.contract.envelope`), give the
bytes to the adapter and return ``True``/``False``. Every handle can delay a job (``delay=`` seconds
or ``run_at=`` a datetime) and lists, requeues and purges its queue's dead letters. After an add,
the handle tells the worker's dispatcher (if it has a worker) that work is there. Handles of queues
that keep job records also follow jobs by id (``job``, ``result_of``, ``cancel``: see
:mod:`varmq.records`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from . import options as check
from .contract import envelope
from .contract.protocols import IDeadLetterable, IDedupQueue, IDelayedEnqueue
from .dispatch import Forks
from .errors import EnqueueError
from .group import EnqueuedGroupJob, Group, Item
from .job import EnqueuedJob, cancel_waiting
from .records import FollowJobs, Records, StorageRecords
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
R = TypeVar("R")
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


class _Write(NamedTuple):
    """One add, checked and encoded: the storage method to call and its arguments."""

    job_id: str
    wait: float
    method: str
    args: tuple[Any, ...]


# Runs storage calls for coroutines when the storage has no async variant of its own: a small
# pool of the library's own, so that producers never use up the application's default one.
# Two threads: the calls hold the GIL for most of their time, so more threads add no adds per
# second (sqliteq: 4.5k/s with 1, 2 or 8) but make the event loop wait longer for the GIL (the
# loop-stall probe's worst tick: 2-10 ms with 1 or 2 threads, 13-18 ms with 8); the second
# keeps one slow call (a storage timing out) from holding up every other.
_PRODUCER_THREADS = 2
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()  # guards _pool's creation


def producer_pool() -> ThreadPoolExecutor:
    """The library's producer threads: storage calls made for coroutines, and the adds of
    recurring jobs (started on first use, kept for the process)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_PRODUCER_THREADS, thread_name_prefix="varmq:producer")
        return _pool


async def _in_pool(call: Callable[..., R], *args: Any) -> R:
    return await asyncio.get_running_loop().run_in_executor(producer_pool(), call, *args)


async def _call_async(storage: Any, method: str, *args: Any) -> Any:
    """``storage.<method>(*args)`` for a coroutine: the storage's own ``<method>_async`` when it
    has one (``IAsyncEnqueue``), else the blocking call on the library's producer threads."""
    native = getattr(storage, f"{method.strip('_')}_async", None)
    if native is not None:
        return await native(*args)
    return await _in_pool(getattr(storage, method), *args)


def _delay_of(delay: float | None, run_at: datetime | None) -> float:
    """Seconds from now until a job may run (0: now); refuses what is not a delay."""
    if run_at is not None:
        if delay is not None:
            raise ValueError("varmq: add() takes delay= or run_at=, not both")
        if not isinstance(run_at, datetime):
            raise TypeError(
                f"varmq: run_at must be a datetime, got {run_at!r} ({type(run_at).__name__}); "
                "for seconds from now, use delay="
            )
        return max(run_at.timestamp() - time.time(), 0.0)
    if delay is None:
        return 0.0
    return check.seconds("delay", delay)


def _job_id(job_id: object) -> str | None:
    if job_id is not None and not isinstance(job_id, str):
        raise TypeError(f"varmq: job_id must be a str, got {job_id!r} ({type(job_id).__name__})")
    return job_id


def _priority(priority: object) -> int:
    return check.whole("priority", priority)


def _timeout(timeout: object) -> float | None:
    return None if timeout is None else check.seconds("timeout", timeout, positive=True)


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


class _MemoryHandle(_Handle, FollowJobs, Generic[T, H, G]):
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
        # What every add uses, looked up once.
        self._new_job = jobs.new_job
        self._next_id = producer.next_id
        # Whether an add without an id, delay or timeout may take the short path (_add_plain):
        # a queue with job records has its book told of each add.
        self._plain = source.book is None

    @property
    def worker(self) -> BaseWorker[T, H, G]:
        """The worker this queue is bound to."""
        return self._jobs.worker

    def _job_records(self) -> Records:
        book = self._source.book
        if book is None:
            raise ValueError(
                f"varmq: queue {self._source.label!r} keeps no job records: bind it with "
                "keep_results=SECONDS to follow jobs by id"
            )
        return book

    def _offer(self, job: H, priority: int | None, wait: float) -> bool:
        job._queued(priority)
        book = self._source.book
        if book is not None and job.id:
            book.added(job, wait)
        if wait > 0:
            self._source.delayed.add(job, time.monotonic() + wait)
            return True
        if not self._source.offer(job):
            if book is not None:
                book.refused(job)
            job._refused()
            return False
        return True

    def _add_plain(self, data: Any, priority: int | None, strict: bool) -> H | None:
        """The common add, with no id, delay or timeout of its own, to a queue without job
        records: what :meth:`_add` does for it, in fewer steps (it runs once per job)."""
        dispatch = self._dispatch
        if dispatch.forks != Forks.count:
            dispatch.check_process()
        job = self._new_job(self._next_id(), data, None)
        job._queued(priority)
        source = self._source
        # Read without the lock, as a hint (hand_over checks again under it): a parked
        # thread, none on its way, nothing waiting. Busy workers skip the lock it takes.
        if (
            dispatch.idle
            and not dispatch.waking
            and dispatch.handing is source
            and not len(self._storage)
            and dispatch.hand_over(source, job)
        ):
            return job
        if priority is None:
            stored = self._storage.enqueue(job)
        else:
            stored = self._storage.enqueue(job, priority)
        if not stored:
            job._refused()
            self._refuse(job, strict)
            return None
        dispatch.signal(1)
        return job

    def _refuse(self, job: H, strict: bool) -> None:
        """The queue refused ``job`` (closed, full): ``None`` for the caller, or with
        ``strict`` an :class:`EnqueueError`."""
        if strict:
            raise EnqueueError(self._source.label, job.id, "the queue is closed or full")

    def _add(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        strict: bool,
        timeout: float | None,
    ) -> H | None:
        dispatch = self._dispatch
        if dispatch.forks != Forks.count:
            dispatch.check_process()
        job = self._new_job(job_id or self._next_id(), data, None)
        if timeout is not None:
            job._set_timeout(timeout)
        if not self._offer(job, priority, wait):
            self._refuse(job, strict)
            return None
        if wait > 0:
            dispatch.add_submitted(1)
            self._producer.on_delayed()
        else:
            dispatch.signal(1)
        return job

    def _add_all(self, items: Iterable[Any], prioritised: bool) -> G:
        entries = [i if isinstance(i, Item) else Item(i) for i in items]
        group, wrap = self._jobs.new_group(len(entries))
        jobs: list[H] = []
        for entry in entries:
            job = self._new_job(entry.id or self._next_id(), entry.data, group)
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
                job = self._new_job(old.id, old.data, None)
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
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """Add a job; its handle, or ``None`` when the queue refused it (closed, full).

        With ``delay`` (seconds) or ``run_at`` (a datetime) the job waits until then; with
        ``timeout`` (seconds) it fails with :class:`~varmq.JobTimeoutError` if it runs longer
        (instead of the worker's ``timeout``). With ``strict``, a refusal raises
        :class:`~varmq.EnqueueError` instead of giving ``None``.
        """
        if job_id is None and delay is None and run_at is None and timeout is None:
            if self._plain:
                return self._add_plain(data, None, strict)  # the common add, unchecked
            return self._add(data, None, None, 0.0, strict, None)
        return self._add(
            data, None, _job_id(job_id), _delay_of(delay, run_at), strict, _timeout(timeout)
        )

    async def add_async(
        self,
        data: T,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """:meth:`add` for asyncio code (an in-memory add never blocks)."""
        return self.add(
            data, job_id=job_id, delay=delay, run_at=run_at, timeout=timeout, strict=strict
        )

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
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """Add a job with ``priority``; its handle, or ``None`` when refused (``strict``:
        :class:`~varmq.EnqueueError`). Other arguments as for :meth:`Queue.add`."""
        if (
            type(priority) is int
            and job_id is None
            and delay is None
            and run_at is None
            and timeout is None
            and self._plain
        ):
            return self._add_plain(data, priority, strict)  # the common add: nothing to check
        return self._add(
            data,
            _priority(priority),
            _job_id(job_id),
            _delay_of(delay, run_at),
            strict,
            _timeout(timeout),
        )

    async def add_async(
        self,
        data: T,
        priority: int = 0,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """:meth:`add` for asyncio code (an in-memory add never blocks)."""
        return self.add(
            data,
            priority,
            job_id=job_id,
            delay=delay,
            run_at=run_at,
            timeout=timeout,
            strict=strict,
        )

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs, each with its ``Item.priority``; a handle tracking them."""
        return self._add_all(items, True)


class _StorageHandle(_Handle, FollowJobs, Generic[T]):
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
        self._records: StorageRecords | None = None

    def _job_records(self) -> Records:
        records = self._records
        if records is None:
            records = self._records = StorageRecords(self._storage, self._label, _call_async)
        return records

    def cancel(self, job_id: str) -> bool:
        """Cancel the job added with ``job_id``; whether there was a job to cancel.

        A queued or delayed job is removed at once (its record says ``"cancelled"``). A running
        one is flagged in storage: the worker that runs it (in any process) hears of it at its
        next lease renewal, within 5 s (``visibility_timeout / 3`` when that is shorter), and
        cancels it the way a timeout does: an ``async def`` job is cancelled, a plain one has
        ``job.cancelled`` set and is settled as cancelled while its function finishes. ``False``
        for an unknown id or a job that already ended.
        """
        found = super().cancel(job_id)
        if found and self._source is not None:
            self._source.cancelled_here(job_id)  # if it runs here: stopped now, not at renewal
        return found

    async def cancel_async(self, job_id: str) -> bool:
        """:meth:`cancel` for asyncio code: never blocks the event loop."""
        found = await super().cancel_async(job_id)
        if found and self._source is not None:
            self._source.cancelled_here(job_id)
        return found

    def purge(self) -> None:
        """Remove every job waiting in storage."""
        self._storage.purge()

    @property
    def _label(self) -> str:
        if self._source is not None:
            return self._source.label
        name = getattr(self._storage, "name", None)
        return name if isinstance(name, str) and name else type(self._storage).__name__

    def _write(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        timeout: float | None,
    ) -> _Write:
        """Check and encode an add: which storage call to make, and with what."""
        producer = self._producer
        if producer.dispatch is not None:
            producer.dispatch.check_process()
        job_id = job_id or producer.next_id()
        try:
            raw = envelope.encode(job_id, data, producer.to_json, timeout)
        except (TypeError, ValueError) as exc:
            # A programming error, not a storage refusal: say so where the job is added.
            raise type(exc)(f"varmq: queue {self._label!r}: job {job_id!r}: {exc}") from exc
        if wait > 0:
            if not isinstance(self._storage, IDelayedEnqueue):
                raise TypeError(
                    f"{type(self._storage).__name__} cannot delay jobs (no enqueue_delayed)"
                )
            return _Write(job_id, wait, "enqueue_delayed", (raw, wait, job_id or None, priority))
        if job_id and self._dedup:
            return _Write(job_id, wait, "enqueue_dedup", (raw, job_id, priority))
        if priority is None:
            return _Write(job_id, wait, "enqueue", (raw,))
        return _Write(job_id, wait, "enqueue", (raw, priority))

    def _add(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        strict: bool,
        timeout: float | None,
    ) -> bool:
        write = self._write(data, priority, job_id, wait, timeout)
        try:
            ok = bool(getattr(self._storage, write.method)(*write.args))
        except (TypeError, ValueError):
            raise  # the storage refused an argument (a delay beyond its limit): a caller's error
        except Exception as exc:
            return self._failed(write, exc, strict)
        return self._stored(write, ok, strict)

    async def _add_async(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        strict: bool,
        timeout: float | None,
    ) -> bool:
        write = self._write(data, priority, job_id, wait, timeout)
        try:
            ok = bool(await _call_async(self._storage, write.method, *write.args))
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            return self._failed(write, exc, strict)
        return self._stored(write, ok, strict)

    def _failed(self, write: _Write, exc: Exception, strict: bool) -> bool:
        if strict:
            raise EnqueueError(self._label, write.job_id, f"{type(exc).__name__}: {exc}") from exc
        log.warning("varmq: enqueue to queue %r failed: %r", self._label, exc)
        return False

    def _stored(self, write: _Write, ok: bool, strict: bool) -> bool:
        """Account an add the storage answered: tell the worker, or refuse."""
        if not ok:
            if strict:
                raise EnqueueError(
                    self._label,
                    write.job_id,
                    "the storage refused it (closed, full or unreachable)",
                )
            return False
        dispatch = self._producer.dispatch
        if dispatch is not None:
            if write.wait > 0:
                dispatch.add_submitted(1)
                if self._source is not None:
                    self._source.expect_due(write.wait)
                self._producer.on_delayed()
            else:
                dispatch.signal(1, self._source)
        return True

    async def len_async(self) -> int:
        """``len(handle)`` without blocking the event loop."""
        return int(await _call_async(self._storage, "__len__"))

    async def purge_async(self) -> None:
        """:meth:`purge` without blocking the event loop."""
        await _call_async(self._storage, "purge")

    async def dead_letters_async(self, limit: int = 100) -> list[DeadLetter]:
        """:meth:`dead_letters` without blocking the event loop."""
        return await _in_pool(self.dead_letters, limit)

    async def requeue_dead_async(self, keys: Sequence[str] | None = None) -> int:
        """:meth:`requeue_dead` without blocking the event loop."""
        return await _in_pool(self.requeue_dead, keys)

    async def purge_dead_async(self) -> int:
        """:meth:`purge_dead` without blocking the event loop."""
        return await _in_pool(self.purge_dead)

    def _dead_letter_store(self) -> Any:
        if not isinstance(self._storage, IDeadLetterable):
            raise TypeError(f"{type(self._storage).__name__} keeps no dead letters")
        return self._storage

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Jobs that ran out of attempts or never decoded, oldest first."""
        letters = []
        for entry in self._dead_letter_store().dead_letters(limit):
            try:
                job_id, data, _ = envelope.decode(entry["item"])
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
        timeout: float | None = None,
        strict: bool = False,
    ) -> bool:
        """Store a job; ``False`` when refused (closed, full, storage error).

        ``data`` must be JSON-encodable (after the worker's ``payload_encoder``, if any):
        anything else raises ``TypeError`` naming the queue and job. ``timeout`` is stored with
        the job, so the consumer fails it with :class:`~varmq.JobTimeoutError` if it runs
        longer. With ``strict``, a refusal raises :class:`~varmq.EnqueueError` instead of
        giving ``False``.
        """
        return self._add(
            data, None, _job_id(job_id), _delay_of(delay, run_at), strict, _timeout(timeout)
        )

    async def add_async(
        self,
        data: T,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> bool:
        """:meth:`add` without blocking the event loop: the storage's own async call when it
        has one, else the blocking one on a small pool of the library's threads."""
        return await self._add_async(
            data, None, _job_id(job_id), _delay_of(delay, run_at), strict, _timeout(timeout)
        )


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
        timeout: float | None = None,
        strict: bool = False,
    ) -> bool:
        """Store a job with ``priority``; ``False`` when refused (``strict``:
        :class:`~varmq.EnqueueError`). Other arguments as for the FIFO ``add``."""
        return self._add(
            data,
            _priority(priority),
            _job_id(job_id),
            _delay_of(delay, run_at),
            strict,
            _timeout(timeout),
        )

    async def add_async(
        self,
        data: T,
        priority: int = 0,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> bool:
        """:meth:`add` without blocking the event loop (see the FIFO ``add_async``)."""
        return await self._add_async(
            data,
            _priority(priority),
            _job_id(job_id),
            _delay_of(delay, run_at),
            strict,
            _timeout(timeout),
        )


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
