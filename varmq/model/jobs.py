"""Jobs: what a job function receives, and the handles ``add`` returns.

A :class:`Job` carries ``id``, ``data`` and ``attempt``. In-memory queues hand the job function
the very object ``add`` returned (an :class:`EnqueuedJob` or one of its subclasses), so one
object tracks a job from ``add`` to its outcome. Its status changes under the job's own lock,
which is what makes cancelling a job while the worker takes it safe: exactly one of the two
wins.

While a job function runs, :func:`current_job` returns its job (the runners set
:data:`CURRENT_JOB` around the call), and ``job.set_progress`` stores how far it got where its
queue keeps records (:mod:`varmq.model.progress`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from enum import Enum
from time import time as _wall_clock
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import JobAlreadyClosedError, JobCancelledError, JobProcessingError
from .loops import LOOP_IDENTS, on_a_loop, resolve
from .progress import NOWHERE, ProgressWriter, check_progress, writer_of

if TYPE_CHECKING:
    from ..contract.observe import Attempt
    from .groups import Group

__all__ = [
    "CURRENT_JOB",
    "EnqueuedErrJob",
    "FailedJob",
    "EnqueuedJob",
    "EnqueuedResultJob",
    "Job",
    "JobStatus",
    "TopicJob",
    "as_handle",
    "cancel_waiting",
    "current_job",
]

T = TypeVar("T")
R = TypeVar("R")


class JobStatus(str, Enum):
    """Where a job is in its life: ``Created``, ``Queued``, ``Processing``, then ``Closed``."""

    CREATED = "Created"
    QUEUED = "Queued"
    PROCESSING = "Processing"
    CLOSED = "Closed"

    def __str__(self) -> str:
        return self.value


# Enum members as module globals, read for every job (see engine/thread_runner.py).
_CREATED, _QUEUED = JobStatus.CREATED, JobStatus.QUEUED
_PROCESSING, _CLOSED = JobStatus.PROCESSING, JobStatus.CLOSED


class _Extra:
    """What few jobs have: a timeout of their own, a ``cancelled`` event, a trace context. Kept
    out of every job's own fields so that a job without them costs less memory (a million queued
    jobs)."""

    __slots__ = ("attempt", "halt", "timeout", "trace")

    def __init__(self) -> None:
        #: Seconds the job may run (``add(timeout=)`` or the envelope); None: the worker's.
        self.timeout: float | None = None
        #: None until someone asks for ``cancelled``; then its Event; True if set before that.
        self.halt: threading.Event | bool | None = None
        #: The trace context its producer stored with it (varmq.model.tracing); None: none.
        self.trace: dict[str, str] | None = None
        #: The observed run under way (varmq.model.tracing.Attempt); None: none.
        self.attempt: Attempt | None = None


class _ProgressExtra(_Extra):
    """:class:`_Extra` of a job that set progress: also where its progress goes. A job's
    ``_extra`` becomes one at its first ``set_progress`` (the others never pay for the field)."""

    __slots__ = ("progress",)

    def __init__(self, extra: _Extra | None) -> None:
        super().__init__()
        if extra is not None:
            self.timeout, self.halt = extra.timeout, extra.halt
            self.trace, self.attempt = extra.trace, extra.attempt
        #: The job's writer (varmq.model.progress), NOWHERE while it runs from a queue that
        #: keeps no progress; None until it was looked for while the job ran.
        self.progress: ProgressWriter | None = None


class Job(Generic[T]):
    """What a job function receives: the job's ``id``, ``data`` and delivery ``attempt``."""

    __slots__ = ("_extra", "attempt", "data", "id")

    def __init__(self, job_id: str, data: T, attempt: int = 1) -> None:
        self.id = job_id
        self.data = data
        #: 1 for the first delivery; storage adapters that count deliveries raise it.
        self.attempt = attempt
        self._extra: _Extra | None = None

    @property
    def timeout(self) -> float | None:
        """The job's own timeout in seconds (``add(timeout=)``); ``None``: the worker's."""
        extra = self._extra
        return None if extra is None else extra.timeout

    def _set_timeout(self, timeout: float | None) -> None:
        if timeout is not None:
            self._more().timeout = timeout

    def _more(self) -> _Extra:
        extra = self._extra
        if extra is None:
            self._extra = extra = _Extra()
        return extra

    @property
    def cancelled(self) -> threading.Event:
        """Set when the job should stop: its timeout passed, or it was cancelled.

        A plain (non-``async``) job function cannot be interrupted; one that runs long can
        check ``job.cancelled.is_set()`` or wait on it, and return early.
        """
        with _CANCEL_LOCK:
            extra = self._more()
            event = extra.halt
            if not isinstance(event, threading.Event):
                made = threading.Event()
                if event is True:
                    made.set()
                extra.halt = event = made
        return event

    def set_progress(self, fraction: float, message: str | None = None) -> None:
        """Say how far the job got: ``fraction`` from 0 to 1 (``0.25``: a quarter done) and an
        optional ``message`` (cut to 1 KiB), read by any process as the ``progress`` of the job's
        record (``handle.job(job_id).progress``, a :class:`~varmq.JobProgress`).

        Call it while the job runs, from its function (``varmq.current_job().set_progress(...)``
        reaches the job from code that was not handed it), as often as you like: at most four
        values a second go to the storage, and the last one set always gets there within a
        second, and before the job's end is stored. Only queues that keep job records keep
        progress (``keep_results``; a job added with an id); elsewhere, and on a job that is not
        running, it does nothing. A storage that fails to store it never fails the job: a
        warning is logged. Raises ``TypeError`` for a ``fraction`` that is not a real number
        (a ``bool`` included) or a ``message`` that is not a ``str`` or ``None``, and
        ``ValueError`` for a fraction out of range or NaN.
        """
        fraction, message = check_progress(fraction, message)
        extra = self._extra
        writer = extra.progress if type(extra) is _ProgressExtra else None
        if writer is None:
            writer = writer_of(self)
            if writer is None:
                if CURRENT_JOB.get(None) is self:
                    # Running from a queue that keeps no progress: never look again.
                    self._progress_extra().progress = NOWHERE
                return  # not running (yet): look again at the next call
            self._progress_extra().progress = writer
        writer.set(fraction, message)

    def _progress_extra(self) -> _ProgressExtra:
        """The job's ``_extra``, made a :class:`_ProgressExtra` (under the lock that guards the
        ``halt`` it carries over)."""
        with _CANCEL_LOCK:
            extra = self._extra
            if type(extra) is not _ProgressExtra:
                extra = _ProgressExtra(extra)
                self._extra = extra
        return extra

    def _request_cancel(self) -> None:
        """Ask the job to stop (sets :attr:`cancelled`)."""
        with _CANCEL_LOCK:
            extra = self._more()
            event = extra.halt
            if isinstance(event, threading.Event):
                event.set()
            else:
                extra.halt = True

    def _cancel_requested(self) -> bool:
        """Whether the job was asked to stop (before it started, only a cancel does that)."""
        extra = self._extra
        if extra is None:
            return False
        event = extra.halt
        return event is True or (isinstance(event, threading.Event) and event.is_set())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, data={self.data!r})"

    # -- what a bound queue does with the jobs it took (overridden by job handles) ---------

    #: Whether a failed run can be put back in its in-memory queue for another attempt.
    _retryable = False

    def _back_to_queue(self) -> None:
        """After a failed run that will be retried: waiting again, one attempt further."""
        self.attempt += 1

    def _complete(self, value: Any, error: BaseException | None) -> None:
        """Record the outcome of the last run; a plain job has nobody waiting for it."""


#: The job whose function runs in this context: set by the runners (varmq.engine.thread_runner,
#: varmq.engine.async_runner, in the job's own task) for the time of the call.
CURRENT_JOB: contextvars.ContextVar[Job[Any]] = contextvars.ContextVar("varmq.current_job")


def current_job() -> Job[Any]:
    """The :class:`Job` whose function is running: call it from a job function (or code it
    calls, in its thread or task) to reach the job it was not handed, e.g. to
    ``set_progress``. Threads the function starts do not see it unless run in a copy of its
    context (``contextvars.copy_context().run``). Raises ``RuntimeError`` anywhere else."""
    try:
        return CURRENT_JOB.get()
    except LookupError:
        raise RuntimeError(
            "varmq: current_job() was called outside a running job; call it from a job "
            "function (or code it calls, in its own thread or task) while it runs"
        ) from None


def as_handle(item: object) -> EnqueuedJob[Any] | None:
    """``item`` (taken from in-memory storage) if it is a job handle, else ``None``."""
    return item if isinstance(item, EnqueuedJob) else None


def cancel_waiting(items: Iterable[object]) -> None:
    """Close the job handles among ``items`` (just purged from their queue) as cancelled."""
    for item in items:
        if isinstance(item, EnqueuedJob):
            # A job taken meanwhile runs and closes normally.
            with contextlib.suppress(JobProcessingError, JobAlreadyClosedError):
                item._cancel()


@dataclass(frozen=True)
class FailedJob:
    """The job whose function raised, as an ``error_handler`` with three parameters gets it
    (``handler(worker, exc, job)``): its id, its queue's name, the attempt and its data."""

    id: str
    queue: str
    attempt: int
    data: Any


_Callback = Callable[[], None]


_new_lock = threading.Lock

# Guards the lazy creation of every job's ``cancelled`` event (rare: only on timeouts and when a
# job function asks for it), so that a job that never needs one pays nothing for it.
_CANCEL_LOCK = threading.Lock()


class _Failure:
    """The outcome of a job that raised (or was cancelled): the exception."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


# Every job handle's status changes and waiter registrations happen under one of these,
# chosen by the handle's address: a lock per handle would cost its memory a million times
# over, one lock for all would make threads queue up. Nothing holds two of them at once.
_STRIPES = tuple(threading.Lock() for _ in range(128))


def _stripe(job: object) -> threading.Lock:
    return _STRIPES[(id(job) >> 4) & 127]


# The enqueue time of the last job, reused within the same millisecond, so that jobs added in
# a burst share one float object instead of holding one each.
_last_stamp = [0.0]


class TopicJob(Job[T]):
    """What the job function of a ``bind_topic`` worker receives: a :class:`~varmq.Job` whose
    ``data`` is the message's, with the ``topic`` name it was published to and its
    ``message_id``. Its ``id`` is the message id (or, without one, the worker's next job id).
    """

    __slots__ = ("message_id", "topic")

    #: A failed run goes back to its source for another attempt (with a retry policy).
    _retryable = True

    def __init__(self, job_id: str, data: T, topic: str, message_id: str | None) -> None:
        super().__init__(job_id, data)
        self.topic = topic
        self.message_id = message_id


class EnqueuedJob(Job[T]):
    """Handle of a job added to an in-memory queue: wait for it, cancel it, await it."""

    # Ten fields in all, with Job's: what a queued job needs and no more (see _Extra).
    __slots__ = ("_callbacks", "_enqueued_at", "_group", "_outcome", "_priority", "_status")

    _retryable = True

    def __init__(self, job_id: str, data: T, group: Group | None = None) -> None:
        # Fields of Job set here directly: this runs once per add, on the hot path.
        self.id = job_id
        self.data = data
        self.attempt = 1
        self._extra = None
        #: The priority it was added with (priority queues), kept for retries.
        self._priority = 0
        #: When it was added (Unix time, to the millisecond); kept across retries. Jobs added
        #: within one millisecond share one float (what _stamp does, inlined: once per add).
        now = _wall_clock()
        last = _last_stamp[0]
        if now - last < 0.001:
            now = last
        else:
            _last_stamp[0] = now
        self._enqueued_at = now
        # Changed under the job's stripe lock (_stripe): every status change and the
        # registration of waiters, so each transition happens once.
        self._status = _CREATED
        #: The function's value, or a _Failure holding its exception, once closed.
        self._outcome: Any = None
        self._callbacks: list[_Callback] | None = None
        self._group = group

    @property
    def _value(self) -> Any:
        outcome = self._outcome
        return None if isinstance(outcome, _Failure) else outcome

    @property
    def _error(self) -> BaseException | None:
        outcome = self._outcome
        return outcome.error if isinstance(outcome, _Failure) else None

    @property
    def status(self) -> JobStatus:
        """The job's current :class:`JobStatus`."""
        return self._status

    def is_closed(self) -> bool:
        """``True`` once the job ran to its end, or was cancelled or purged."""
        return self._status is _CLOSED

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job is closed; ``False`` if ``timeout`` seconds passed first.

        On an event loop that runs a worker's jobs, raises ``RuntimeError`` instead of
        blocking it: ``await job`` there.
        """
        if self._status is _CLOSED:
            return True
        if LOOP_IDENTS and threading.get_ident() in LOOP_IDENTS and on_a_loop():
            raise RuntimeError(
                f"varmq: job {self.id!r}: a blocking wait on an event loop that runs a "
                "worker's jobs would stop that loop (and could wait for itself); use "
                "'await job' there"
            )
        # A held lock that the closing thread releases: the cheapest one-shot signal.
        waiter = _new_lock()
        waiter.acquire()
        with _STRIPES[(id(self) >> 4) & 127]:  # _add_callback, inlined: once per wait
            if self._status is _CLOSED:
                return True
            callbacks = self._callbacks
            if callbacks is None:
                self._callbacks = [waiter.release]
            else:
                callbacks.append(waiter.release)
        if timeout is None:
            return waiter.acquire()
        return waiter.acquire(timeout=max(timeout, 0.0))

    def close(self) -> None:
        """Cancel the job before it runs.

        Raises :class:`JobProcessingError` if it is running and
        :class:`JobAlreadyClosedError` if it already ended. A cancelled job stays in its queue
        until the worker reaches it and skips it.
        """
        self._cancel()

    def __await__(self) -> Generator[Any, None, Any]:
        if self._status is not _CLOSED:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()

            def wake() -> None:
                # The awaiting loop may be gone (cancelled await, closed loop): nothing to wake.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(resolve, future)

            if self._add_callback(wake):
                yield from future.__await__()
        return self._awaited()

    def _awaited(self) -> Any:
        return None

    # -- used by the worker and queue handles -------------------------------------------

    def _add_callback(self, callback: _Callback) -> bool:
        """Register ``callback`` for when the job closes; ``False`` if it already has."""
        with _STRIPES[(id(self) >> 4) & 127]:  # _stripe, inlined: once per wait
            if self._status is _CLOSED:
                return False
            if self._callbacks is None:
                self._callbacks = [callback]
            else:
                self._callbacks.append(callback)
            return True

    def _queued(self, priority: int | None) -> None:
        """Offered to a queue (or held until its delay passed) with ``priority``."""
        self._priority = priority or 0
        self._status = _QUEUED

    def _refused(self) -> None:
        """The queue refused it (closed, full): closed without ever running."""
        self._status = _CLOSED

    def _claim(self) -> bool:
        """Move to PROCESSING unless the job was cancelled; ``False`` means skip it."""
        with _STRIPES[(id(self) >> 4) & 127]:  # _stripe, inlined: once per job run
            if self._status is _CLOSED:
                return False
            self._status = _PROCESSING
            return True

    def _back_to_queue(self) -> None:
        """After a failed run that will be retried: waiting again, one attempt further (and not
        cancelled: a timeout ended the last run, not the next one)."""
        with _stripe(self):
            if self._status is _PROCESSING:
                self._status = _QUEUED
                self.attempt += 1
                extra = self._extra
                if extra is not None:
                    extra.halt = None

    def _complete(self, value: Any, error: BaseException | None) -> None:
        """Record the outcome of a run, close the job and release everyone waiting."""
        with _STRIPES[(id(self) >> 4) & 127]:  # _stripe, inlined: once per job run
            self._outcome = value if error is None else _Failure(error)
            self._status = _CLOSED
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:  # what _closed does, inlined: once per job run
            for callback in callbacks:
                callback()
        if self._group is not None:
            self._group.member_done(self.id, value, error, True)

    def _cancel(self) -> None:
        error = JobCancelledError(self.id)
        with _stripe(self):
            if self._status is _PROCESSING:
                raise JobProcessingError(self.id)
            if self._status is _CLOSED:
                raise JobAlreadyClosedError(self.id)
            self._outcome = _Failure(error)
            self._status = _CLOSED
            callbacks, self._callbacks = self._callbacks, None
        self._closed(callbacks, None, error, ran=False)

    def _closed(
        self,
        callbacks: list[_Callback] | None,
        value: Any,
        error: BaseException | None,
        ran: bool,
    ) -> None:
        """Release the waiters of a job that just closed and tell its group."""
        if callbacks:
            for callback in callbacks:
                callback()
        if self._group is not None:
            self._group.member_done(self.id, value, error, ran)

    def _wait_or_raise(self, timeout: float | None) -> None:
        if not self.wait(timeout):
            raise TimeoutError(f"job {self.id!r} did not finish within {timeout} s")


class EnqueuedErrJob(EnqueuedJob[T]):
    """Handle of a job of an err worker: also gives the job's exception."""

    __slots__ = ()

    def err(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the job and return the exception it raised, or ``None``.

        A job cancelled or purged before it ran gives a :class:`JobCancelledError`. Raises
        ``TimeoutError`` when ``timeout`` seconds pass first.
        """
        self._wait_or_raise(timeout)
        return self._error

    def _awaited(self) -> Any:
        return self._error


class EnqueuedResultJob(EnqueuedJob[T], Generic[T, R]):
    """Handle of a job of a result worker: also gives the value the job returned."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> R:
        """Wait for the job and return its value, or raise the exception it raised.

        Like ``concurrent.futures.Future.result``: a cancelled or purged job raises
        :class:`JobCancelledError`; ``TimeoutError`` when ``timeout`` seconds pass first.
        """
        if self._status is not _CLOSED:
            self._wait_or_raise(timeout)
        outcome = self._outcome
        if type(outcome) is _Failure:
            raise outcome.error
        value: R = outcome
        return value

    def err(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the job and return the exception it raised, or ``None``."""
        self._wait_or_raise(timeout)
        return self._error

    def _awaited(self) -> Any:
        return self.result()
