"""Following a job by id from any process: ``job``, ``result_of`` and ``cancel`` of queue
handles (:class:`FollowJobs`), and the records of a storage queue as they are read and waited
for (:class:`StorageRecords`).

Queue handles get these calls from :class:`FollowJobs`: ``job(job_id)`` (a snapshot),
``result_of(job_id, timeout)`` and ``result_of_async`` (wait for the end: the value, or
:class:`~varmq.JobFailedError`), ``cancel(job_id)``, and ``job_async``/``cancel_async`` for
asyncio code. A handle says where its records are: an in-memory queue's
(:class:`~varmq.sources.memory_records.JobBook`) or its storage's (:class:`StorageRecords`),
which waits for a record's end the cheapest way the storage allows: woken by its
notifications (:class:`~varmq.contract.protocols.IRecordSubscribable`) with a rare re-read in
case one was lost, or by a poll that backs off to half a second where it cannot notify. The
values themselves (:class:`~varmq.JobRecord`, how outcomes are encoded) are
:mod:`varmq.model.records`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..contract.protocols import IJobRecords, IRecordSubscribable
from ..engine.pools import in_pool
from ..model import validate
from ..model.errors import JobNotFoundError
from ..model.loops import LOOP_THREAD, resolve
from ..model.records import JobRecord, decode_record

__all__ = ["FollowJobs", "Records", "StorageRecords", "require_records"]

# Waiting where the storage notifies: read again this often anyway, in case a notification was
# lost (Redis pub/sub drops messages while it reconnects).
_RECHECK = 5.0
# Waiting where it cannot: read at this interval, doubling up to the longest.
_FIRST_POLL = 0.01
_LONGEST_POLL = 0.5


class Records(Protocol):
    """What :class:`FollowJobs` needs of a queue's records (storage or in-memory)."""

    def read(self, job_id: str) -> JobRecord | None:
        """The record of ``job_id`` now, or ``None``."""
        ...

    async def read_async(self, job_id: str) -> JobRecord | None:
        """:meth:`read` for a coroutine, without blocking its event loop."""
        ...

    def wait(self, job_id: str, timeout: float | None) -> JobRecord:
        """Wait until the record of ``job_id`` ended; raises ``TimeoutError`` and
        :class:`~varmq.JobNotFoundError`."""
        ...

    async def wait_async(self, job_id: str, timeout: float | None) -> JobRecord:
        """:meth:`wait` for a coroutine, without blocking its event loop."""
        ...

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id``; whether there was a job to cancel."""
        ...

    async def cancel_async(self, job_id: str) -> bool:
        """:meth:`cancel` for a coroutine, without blocking its event loop."""
        ...


def _job_id(job_id: object) -> str:
    if not isinstance(job_id, str):
        raise TypeError(f"varmq: job_id must be a str, got {job_id!r} ({type(job_id).__name__})")
    if not job_id:
        raise ValueError("varmq: job_id must not be empty")
    return job_id


def _wait_timeout(timeout: object) -> float | None:
    return None if timeout is None else validate.seconds("timeout", timeout)


class FollowJobs:
    """``job``, ``result_of``, ``result_of_async`` and ``cancel``: a queue handle's calls on the
    records of its queue. The handle says where they are (:meth:`_job_records`)."""

    def _job_records(self) -> Records:
        """The records of this handle's queue; raises when it keeps none."""
        raise NotImplementedError

    def job(self, job_id: str) -> JobRecord | None:
        """A snapshot of the job added with ``job_id``, or ``None`` when the queue has no
        record of it (never added with that id, or its record expired after ``keep_results``).

        Raises ``TypeError``/``ValueError`` when the queue keeps no records: open it with
        ``keep_results=SECONDS``.
        """
        job_id = _job_id(job_id)
        return self._job_records().read(job_id)

    async def job_async(self, job_id: str) -> JobRecord | None:
        """:meth:`job` for asyncio code: never blocks the event loop."""
        job_id = _job_id(job_id)
        return await self._job_records().read_async(job_id)

    def result_of(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait for the job added with ``job_id`` to end: the value its function returned, or
        :class:`~varmq.JobFailedError` (with the error type and message it kept) when it failed,
        went to the dead letters or was cancelled.

        Works from any process that opens the queue. Raises ``TimeoutError`` after ``timeout``
        seconds, and :class:`~varmq.JobNotFoundError` when the queue has no record of the id.
        Where the storage notifies, the wait is woken by the notification (no polling loop).
        """
        job_id, wait = _job_id(job_id), _wait_timeout(timeout)
        return self._job_records().wait(job_id, wait).value()

    async def result_of_async(self, job_id: str, timeout: float | None = None) -> Any:
        """:meth:`result_of` for asyncio code: never blocks the event loop."""
        job_id, wait = _job_id(job_id), _wait_timeout(timeout)
        record = await self._job_records().wait_async(job_id, wait)
        return record.value()

    def cancel(self, job_id: str) -> bool:
        """Cancel the job added with ``job_id``; whether there was a job to cancel.

        A queued or delayed job is removed at once (``"cancelled"``). A running one is flagged:
        its worker hears of it at its next lease renewal (in-memory: at once) and cancels it
        the way a timeout does: an ``async def`` job is cancelled, a plain one has
        ``job.cancelled`` set and is settled as cancelled while its function finishes. ``False``
        for an unknown id or a job that already ended.
        """
        job_id = _job_id(job_id)
        return self._job_records().cancel(job_id)

    async def cancel_async(self, job_id: str) -> bool:
        """:meth:`cancel` for asyncio code: never blocks the event loop."""
        job_id = _job_id(job_id)
        return await self._job_records().cancel_async(job_id)


# -- the records of a storage queue ------------------------------------------------------------


def _refuse_blocking_on_a_loop(job_id: str) -> None:
    if LOOP_THREAD.dispatch is None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"varmq: job {job_id!r}: a blocking result_of on an event loop that runs a worker's "
        "jobs would stop that loop; use 'await handle.result_of_async(...)' there"
    )


def require_records(storage: Any, label: str) -> None:
    """Raise unless ``storage`` keeps job records: ``TypeError`` when it cannot, ``ValueError``
    when it was opened without ``keep_results``; ``label`` names the queue."""
    if not isinstance(storage, IJobRecords):
        raise TypeError(
            f"varmq: queue {label!r}: {type(storage).__name__} keeps no job records "
            "(it does not implement varmq.contract.protocols.IJobRecords)"
        )
    if not float(storage.keep_results) > 0:
        raise ValueError(
            f"varmq: queue {label!r} keeps no job records: open it with keep_results=SECONDS "
            "(how long the record of an ended job is kept) to follow jobs by id"
        )


class StorageRecords:
    """The records of one storage queue object, as :class:`FollowJobs` reads and waits for them.

    ``_listeners`` (guarded by ``_lock``) maps a job id to the callbacks of the waits for its
    end; the storage's record notifications (subscribed to once, at the first wait) call them.
    """

    def __init__(self, storage: Any, label: str) -> None:
        require_records(storage, label)
        self._storage = storage
        self._label = label
        self._notifies = isinstance(storage, IRecordSubscribable)
        self._lock = threading.Lock()
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self._subscribed = False

    def read(self, job_id: str) -> JobRecord | None:
        stored = self._storage.job_record(job_id)
        return None if stored is None else decode_record(stored)

    def cancel(self, job_id: str) -> bool:
        return bool(self._storage.cancel(job_id))

    async def cancel_async(self, job_id: str) -> bool:
        return bool(await in_pool(self._storage.cancel, job_id))

    async def read_async(self, job_id: str) -> JobRecord | None:
        """:meth:`read` for a coroutine, on the producer threads."""
        stored = await in_pool(self._storage.job_record, job_id)
        return None if stored is None else decode_record(stored)

    # -- hearing of ends ---------------------------------------------------------------------

    def _heard(self, job_id: str | None) -> None:
        """The storage says ``job_id`` ended; ``None``: ends may have been missed (a lost
        connection), so every waiter reads its record again now."""
        with self._lock:
            if job_id is None:
                waiting, self._listeners = self._listeners, {}
                callbacks = [callback for each in waiting.values() for callback in each]
            else:
                callbacks = self._listeners.pop(job_id, [])
        for callback in callbacks:
            callback()

    @contextlib.contextmanager
    def _listening(self, job_id: str, callback: Callable[[], None]) -> Any:
        """Call ``callback`` when the storage says ``job_id`` ended, while inside the block."""
        if not self._notifies:
            yield
            return
        with self._lock:
            subscribe = not self._subscribed
            self._subscribed = True
            self._listeners.setdefault(job_id, []).append(callback)
        if subscribe:
            try:
                self._storage.subscribe_records(self._heard)
            except Exception:
                with self._lock:
                    self._subscribed = False
                raise
        try:
            yield
        finally:
            with self._lock:
                waiting = self._listeners.get(job_id)
                if waiting is not None:
                    with contextlib.suppress(ValueError):
                        waiting.remove(callback)
                    if not waiting:
                        del self._listeners[job_id]

    def _pause(self, poll: float, deadline: float | None) -> tuple[float, float]:
        """How long to wait before reading again, and the next poll interval."""
        pause = _RECHECK if self._notifies else poll
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return 0.0, poll
            pause = min(pause, remaining)
        return pause, min(poll * 2, _LONGEST_POLL)

    def _ended(self, job_id: str, record: JobRecord | None, deadline: float | None) -> bool:
        if record is None:
            raise JobNotFoundError(self._label, job_id)
        if record.ended:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"job {job_id!r} of queue {self._label!r} did not end in time")
        return False

    def wait(self, job_id: str, timeout: float | None) -> JobRecord:
        _refuse_blocking_on_a_loop(job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = _FIRST_POLL
        while True:
            heard = threading.Event()
            # Listening before reading: an end between the read and the wait is not missed.
            with self._listening(job_id, heard.set):
                record = self.read(job_id)
                if self._ended(job_id, record, deadline):
                    assert record is not None
                    return record
                pause, poll = self._pause(poll, deadline)
                heard.wait(pause)

    async def wait_async(self, job_id: str, timeout: float | None) -> JobRecord:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = _FIRST_POLL
        while True:
            heard: asyncio.Future[None] = loop.create_future()

            def wake(heard: asyncio.Future[None] = heard) -> None:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody to wake
                    loop.call_soon_threadsafe(resolve, heard)

            with self._listening(job_id, wake):
                record = await self.read_async(job_id)
                if self._ended(job_id, record, deadline):
                    assert record is not None
                    return record
                pause, poll = self._pause(poll, deadline)
                await asyncio.wait({heard}, timeout=pause)
