"""Handles of storage queues: what ``with_persistent_*``/``with_distributed_*`` and
``varmq.new_distributed_queue`` return, and where a storage job's path starts.

``add`` encodes the job as a JSON envelope (:mod:`varmq.contract.envelope`), gives the bytes to
the adapter (``enqueue``, ``enqueue_dedup`` with a job id, ``enqueue_delayed`` with a delay) and
returns ``True``/``False``; then it tells the worker's dispatcher, if it has a worker, that work
is there. ``add_async`` uses the storage's own adds for coroutines (``IAsyncEnqueue``) or, where
it has none, the library's producer threads. A handle lists, requeues and purges its queue's
dead letters, and follows its jobs by id on a queue that keeps records
(:class:`~varmq.api.records.FollowJobs`, :class:`~varmq.api.records.StorageRecords`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, NamedTuple

from typing_extensions import TypeVar

from ..contract import envelope, observe
from ..contract.protocols import (
    IAsyncEnqueue,
    IDeadLetterable,
    IDedupQueue,
    IDelayedEnqueue,
    IScheduleMarks,
)
from ..engine.pools import in_pool
from ..model.errors import EnqueueError
from ..model.retry import DeadLetter
from .handles import Handle, Producer, delay_of, job_id_of, priority_of, timeout_of
from .records import FollowJobs, Records, StorageRecords

if TYPE_CHECKING:
    from ..sources.storage import StorageSource

__all__ = [
    "DistributedPriorityQueue",
    "DistributedQueue",
    "PersistentPriorityQueue",
    "PersistentQueue",
]


T = TypeVar("T")
W = TypeVar("W", default=Any)
"""The worker a handle is bound to (``queue.worker``)."""


class _Write(NamedTuple):
    """One add, checked and encoded: the storage call to make (and its coroutine twin, when the
    storage has one), with its arguments."""

    job_id: str
    wait: float
    call: Callable[..., Any]
    call_async: Callable[..., Awaitable[Any]] | None
    args: tuple[Any, ...]


class _StorageHandle(Handle, FollowJobs, Generic[T]):
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
        # The storage's own adds for coroutines, when it has them (else: the producer threads).
        self._async_adds: IAsyncEnqueue | None = (
            storage if isinstance(storage, IAsyncEnqueue) else None
        )
        self._records: StorageRecords | None = None

    def _job_records(self) -> Records:
        records = self._records
        if records is None:
            records = self._records = StorageRecords(self._storage, self._label)
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
        trace: dict[str, str] | None = None,
    ) -> _Write:
        """Check and encode an add: which storage call to make, and with what."""
        producer = self._producer
        if producer.dispatch is not None:
            producer.dispatch.check_process()
        job_id = job_id or producer.next_id()
        try:
            raw = envelope.encode(job_id, data, producer.to_json, timeout, trace)
        except (TypeError, ValueError) as exc:
            # A programming error, not a storage refusal: say so where the job is added.
            raise type(exc)(f"varmq: queue {self._label!r}: job {job_id!r}: {exc}") from exc
        storage, native = self._storage, self._async_adds
        if wait > 0:
            if not isinstance(storage, IDelayedEnqueue):
                raise TypeError(f"{type(storage).__name__} cannot delay jobs (no enqueue_delayed)")
            return _Write(
                job_id,
                wait,
                storage.enqueue_delayed,
                None if native is None else native.enqueue_delayed_async,
                (raw, wait, job_id or None, priority),
            )
        if job_id and self._dedup:
            return _Write(
                job_id,
                wait,
                storage.enqueue_dedup,
                None if native is None else native.enqueue_dedup_async,
                (raw, job_id, priority),
            )
        args = (raw,) if priority is None else (raw, priority)
        native_add = None if native is None else native.enqueue_async
        return _Write(job_id, wait, storage.enqueue, native_add, args)

    def _add(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        strict: bool,
        timeout: float | None,
    ) -> bool:
        observer = observe.OBSERVER
        if observer is None:
            return self._send(self._write(data, priority, job_id, wait, timeout), strict)
        # Traced: the job carries its producer's trace context.
        send = observer.send(self._label, "send", job_id)
        try:
            write = self._write(data, priority, job_id, wait, timeout, send.carrier)
            ok = self._send(write, strict)
        except BaseException as exc:
            send.end(job_id, exc, False)
            raise
        send.end(write.job_id, None, ok)
        return ok

    def _send(self, write: _Write, strict: bool) -> bool:
        """Make the storage call of ``write``; its answer accounted (:meth:`_stored`)."""
        try:
            ok = bool(write.call(*write.args))
        except (TypeError, ValueError):
            raise  # the storage refused an argument (a delay beyond its limit): a caller's error
        except Exception as exc:
            return self._failed(write, exc)
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
        observer = observe.OBSERVER
        if observer is None:
            return await self._send_async(
                self._write(data, priority, job_id, wait, timeout), strict
            )
        send = observer.send(self._label, "send", job_id)
        try:
            write = self._write(data, priority, job_id, wait, timeout, send.carrier)
            ok = await self._send_async(write, strict)
        except BaseException as exc:
            send.end(job_id, exc, False)
            raise
        send.end(write.job_id, None, ok)
        return ok

    async def _send_async(self, write: _Write, strict: bool) -> bool:
        """:meth:`_send` for an event loop."""
        try:
            if write.call_async is not None:
                ok = bool(await write.call_async(*write.args))
            else:
                ok = bool(await in_pool(write.call, *write.args))
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            return self._failed(write, exc)
        return self._stored(write, ok, strict)

    def _add_occurrence(
        self, data: Any, priority: int | None, job_id: str, schedule: str, occurrence: float
    ) -> bool:
        """Add a schedule's occurrence (strict): through ``enqueue_occurrence`` where the
        storage keeps schedule marks (once, whatever record pruning does), else as a dedup
        add (once while the record of the occurrence is kept)."""
        storage = self._storage
        if not isinstance(storage, IScheduleMarks):
            return self._add(data, priority, job_id, 0.0, True, None)
        observer = observe.OBSERVER
        send = None if observer is None else observer.send(self._label, "occurrence", job_id)
        try:
            trace = None if send is None else send.carrier
            dedup = self._write(data, priority, job_id, 0.0, None, trace)
            args = (dedup.args[0], job_id, schedule, occurrence, priority)
            ok = self._send(_Write(job_id, 0.0, storage.enqueue_occurrence, None, args), True)
        except BaseException as exc:
            if send is not None:
                send.end(job_id, exc, False)
            raise
        if send is not None:
            send.end(job_id, None, ok)
        return ok

    def _failed(self, write: _Write, exc: Exception) -> bool:
        """A storage error: raised, ``strict`` or not. ``False`` would read as "full" or
        "duplicate", and a caller that ignores it (a web handler) would lose the job."""
        raise EnqueueError(self._label, write.job_id, f"{type(exc).__name__}: {exc}") from exc

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
        return await in_pool(len, self._storage)

    async def purge_async(self) -> None:
        """:meth:`purge` without blocking the event loop."""
        await in_pool(self._storage.purge)

    async def dead_letters_async(self, limit: int = 100) -> list[DeadLetter]:
        """:meth:`dead_letters` without blocking the event loop."""
        return await in_pool(self.dead_letters, limit)

    async def requeue_dead_async(self, keys: Sequence[str] | None = None) -> int:
        """:meth:`requeue_dead` without blocking the event loop."""
        return await in_pool(self.requeue_dead, keys)

    async def purge_dead_async(self) -> int:
        """:meth:`purge_dead` without blocking the event loop."""
        return await in_pool(self.purge_dead)

    def _dead_letter_store(self) -> Any:
        if not isinstance(self._storage, IDeadLetterable):
            raise TypeError(f"{type(self._storage).__name__} keeps no dead letters")
        return self._storage

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Jobs that ran out of attempts or never decoded, oldest first."""
        letters = []
        for entry in self._dead_letter_store().dead_letters(limit):
            try:
                job_id, data = envelope.decode(entry["item"])[:2]
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
        """Store a job; ``False`` when not stored for a reason that is not a failure.

        ``False``: the queue's capacity is reached, or the store was closed. (A job id already
        stored answers ``True``: the job is there.) A storage error (unreachable, disk full, a
        locked or damaged file) raises :class:`~varmq.EnqueueError`, its cause chained,
        ``strict`` or not.

        ``data`` must be JSON-encodable (after the worker's ``payload_encoder``, if any):
        anything else raises ``TypeError`` naming the queue and job. ``timeout`` is stored with
        the job, so the consumer fails it with :class:`~varmq.JobTimeoutError` if it runs
        longer. With ``strict``, a refusal raises :class:`~varmq.EnqueueError` too, instead of
        giving ``False``.
        """
        return self._add(
            data, None, job_id_of(job_id), delay_of(delay, run_at), strict, timeout_of(timeout)
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
            data, None, job_id_of(job_id), delay_of(delay, run_at), strict, timeout_of(timeout)
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
        """Store a job with ``priority``; ``False`` when refused (full, closed;
        ``strict``: :class:`~varmq.EnqueueError`), a storage error raises
        :class:`~varmq.EnqueueError`. Other arguments as for the FIFO ``add``."""
        return self._add(
            data,
            priority_of(priority),
            job_id_of(job_id),
            delay_of(delay, run_at),
            strict,
            timeout_of(timeout),
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
            priority_of(priority),
            job_id_of(job_id),
            delay_of(delay, run_at),
            strict,
            timeout_of(timeout),
        )


class _Bound(_StorageHandle[T], Generic[T, W]):
    """A storage handle bound to a worker (``.worker``)."""

    def __init__(
        self,
        storage: Any,
        capacity: int,
        source: StorageSource,
        producer: Producer,
        worker: W,
    ) -> None:
        super().__init__(storage, capacity, source, producer)
        self._worker = worker

    @property
    def worker(self) -> W:
        """The worker this queue is bound to."""
        return self._worker


class DistributedQueue(_FifoAdd[T]):
    """A FIFO queue in storage shared by consumers in many processes (may be producer-only)."""


class DistributedPriorityQueue(_PriorityAdd[T]):
    """A priority queue in storage shared by consumers in many processes."""


class PersistentQueue(_FifoAdd[T], _Bound[T, W]):
    """A FIFO queue in storage, bound to a worker (``.worker``)."""


class PersistentPriorityQueue(_PriorityAdd[T], _Bound[T, W]):
    """A priority queue in storage, bound to a worker (``.worker``)."""
