"""Job records as users see them: :class:`JobRecord`, and following a job by id from any process.

A queue that keeps records (a storage queue opened with ``keep_results``, see
:class:`~varmq.contract.protocols.IJobRecords`; or an in-memory queue bound with ``keep_results``,
:mod:`varmq.memory_records`) remembers every job added with an id: its state, attempts, times
and outcome. Queue handles get these calls from :class:`FollowJobs`: ``job(job_id)`` (a
snapshot), ``result_of(job_id, timeout)`` and ``result_of_async`` (wait for the end: the value,
or :class:`~varmq.JobFailedError`), ``cancel(job_id)``, and ``job_async``/``cancel_async`` for
asyncio code.

This module also turns outcomes into the bytes a storage keeps and back (JSON only: a result or an
error is never pickled, so reading a record can never run code), and waits for a storage record's
end the cheapest way the storage allows: woken by its notifications
(:class:`~varmq.contract.protocols.IRecordSubscribable`) with a rare re-read in case one was lost,
or by a poll that backs off to half a second where it cannot notify.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import options as check
from .contract.envelope import JSON_ENCODER
from .contract.protocols import ENDED_STATES, IJobRecords, IRecordSubscribable, StoredJobRecord
from .errors import JobFailedError, JobNotFoundError
from .job import LOOP_THREAD

__all__ = [
    "FollowJobs",
    "JobError",
    "JobRecord",
    "Records",
    "StorageRecords",
    "decode_record",
    "encode_error",
    "encode_result",
    "error_of",
    "require_records",
]

# Longest message and traceback an error record keeps; longer ones keep their start and end.
_TEXT_LIMIT = 16_384
# Waiting where the storage notifies: read again this often anyway, in case a notification was
# lost (Redis pub/sub drops messages while it reconnects).
_RECHECK = 5.0
# Waiting where it cannot: read at this interval, doubling up to the longest.
_FIRST_POLL = 0.01
_LONGEST_POLL = 0.5


@dataclass(frozen=True)
class JobError:
    """What a job record keeps of the exception a job ended with: its class name, its message
    and the traceback as text (never the exception object)."""

    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class JobRecord:
    """One job as its queue remembers it (``handle.job(job_id)``), at the time it was read.

    ``state`` is one of ``"queued"``, ``"delayed"``, ``"running"``, ``"succeeded"``,
    ``"failed"``, ``"dead"`` and ``"cancelled"`` (the last four: it ended). ``attempts``
    counts its runs so far. ``result`` is the value the function returned (``"succeeded"``,
    result workers; ``None`` otherwise), ``error`` what it raised (:class:`JobError`, for
    ``"failed"``, ``"dead"``, and ``"cancelled"`` while it ran). The times are Unix seconds
    (the storage's clock: the server's for Redis); ``None`` until they happened.
    ``cancel_requested`` is ``True`` once ``cancel`` flagged it while it ran.
    """

    id: str
    state: str
    attempts: int
    result: Any = None
    error: JobError | None = None
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False

    @property
    def ended(self) -> bool:
        """Whether the job will not run again (succeeded, failed, dead or cancelled)."""
        return self.state in ENDED_STATES

    def value(self) -> Any:
        """The result of a job that succeeded; :class:`~varmq.JobFailedError` for any other end.

        Only for an ended record (``ValueError`` otherwise).
        """
        if self.state == "succeeded":
            return self.result
        if not self.ended:
            raise ValueError(f"varmq: job {self.id!r} has not ended (it is {self.state})")
        error = self.error
        if error is None:
            message = "before it ran" if self.state == "cancelled" else ""
            raise JobFailedError(self.id, self.state, "", message)
        raise JobFailedError(self.id, self.state, error.type, error.message, error.traceback)


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
    return None if timeout is None else check.seconds("timeout", timeout)


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


# -- outcomes as bytes ----------------------------------------------------------------------


_NULL = b"null"  # None, the value of most jobs, has one answer


def encode_result(value: Any) -> bytes:
    """``value`` as the JSON bytes a record keeps; raises ``TypeError`` or ``ValueError`` (with
    the reason) for a value JSON cannot hold."""
    if value is None:
        return _NULL
    try:
        return JSON_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"it holds text that is not valid Unicode ({exc.reason})") from None
    except RecursionError:
        raise ValueError("it is nested too deeply for JSON") from None
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc)) from None


def _cut(text: str) -> str:
    if len(text) <= _TEXT_LIMIT:
        return text
    keep = _TEXT_LIMIT // 2
    return f"{text[:keep]}\n... [{len(text) - 2 * keep} characters cut] ...\n{text[-keep:]}"


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a __str__ that raises: the record still says what it was
        return f"<{type(error).__name__} whose str() raised>"


def error_of(error: BaseException) -> JobError:
    """What a record keeps of ``error``: class name, message and traceback text (cut to 16 KiB
    each, keeping their start and end)."""
    if error.__traceback__ is None:
        trace = ""
    else:
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return JobError(type(error).__name__, _cut(_message(error)), _cut(trace))


def encode_error(error: BaseException) -> bytes:
    """The JSON bytes a record keeps of ``error``: ``{"type", "message", "traceback"}``."""
    kept = error_of(error)
    fields = {"type": kept.type, "message": kept.message, "traceback": kept.traceback}
    return json.dumps(fields, separators=(",", ":")).encode("ascii")  # ASCII: always encodable


def _decode_error(raw: bytes | None) -> JobError | None:
    if raw is None:
        return None
    try:
        fields = json.loads(bytes(raw).decode("utf-8"))
        return JobError(str(fields["type"]), str(fields["message"]), str(fields["traceback"]))
    except (ValueError, KeyError, TypeError):  # written by something else: kept as text
        return JobError("", bytes(raw).decode("utf-8", "replace"))


def _decode_result(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(bytes(raw).decode("utf-8"))
    except ValueError:  # written by something else than a varmq worker: handed over as is
        return bytes(raw)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def decode_record(stored: StoredJobRecord) -> JobRecord:
    """A storage's record as a :class:`JobRecord`: its result and error decoded from JSON."""
    return JobRecord(
        id=str(stored["id"]),
        state=str(stored["state"]),
        attempts=int(stored["attempts"]),
        result=_decode_result(stored["result"]),
        error=_decode_error(stored["error"]),
        enqueued_at=_seconds(stored["enqueued_at"]),
        started_at=_seconds(stored["started_at"]),
        finished_at=_seconds(stored["finished_at"]),
        cancel_requested=bool(stored["cancel_requested"]),
    )


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


CallAsync = Callable[..., Awaitable[Any]]
"""``call_async(storage, method, *args)``: a storage call for a coroutine (see handles.py)."""


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

    def __init__(self, storage: Any, label: str, call_async: CallAsync) -> None:
        require_records(storage, label)
        self._storage = storage
        self._label = label
        self._call_async = call_async
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
        return bool(await self._call_async(self._storage, "cancel", job_id))

    async def read_async(self, job_id: str) -> JobRecord | None:
        """:meth:`read` for a coroutine (the storage's ``job_record_async`` when it has one)."""
        stored = await self._call_async(self._storage, "job_record", job_id)
        return None if stored is None else decode_record(stored)

    # -- hearing of ends ---------------------------------------------------------------------

    def _heard(self, job_id: str) -> None:
        with self._lock:
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
                    loop.call_soon_threadsafe(_resolve, heard)

            with self._listening(job_id, wake):
                record = await self.read_async(job_id)
                if self._ended(job_id, record, deadline):
                    assert record is not None
                    return record
                pause, poll = self._pause(poll, deadline)
                await asyncio.wait({heard}, timeout=pause)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
