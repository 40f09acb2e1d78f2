"""Every exception varmq raises or reports, rooted at :class:`VarMQError`.

State errors are raised by the worker's control methods; storage-path errors are not raised to
the caller but reported through ``Worker.errs()`` and the ``error_handler``; snapshot errors are
raised by ``save_queues`` and ``load_queues``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AcknowledgeJobError",
    "EnqueueError",
    "FailedToCastJobError",
    "FailedToDequeueError",
    "ForkedWorkerError",
    "JobAlreadyClosedError",
    "JobCancelledError",
    "JobFailedError",
    "JobNotFoundError",
    "JobProcessingError",
    "JobTimeoutError",
    "LeaseLostError",
    "NotRunningWorkerError",
    "ParseJobError",
    "PersistenceError",
    "ResultNotJSONError",
    "RunningWorkerError",
    "SameConcurrencyError",
    "SubscriberFullError",
    "UnknownTaskError",
    "VarMQError",
    "WorkerStateError",
    "WorkerPausedError",
    "WorkerPausingError",
    "WorkerStoppedError",
    "WorkerStoppingError",
]


class VarMQError(Exception):
    """Base class of every varmq error."""


class WorkerStateError(VarMQError):
    """A control call is not allowed in the worker's current state (base of the seven below).

    Raised by ``start``, ``pause``, ``resume``, ``stop``, ``restart`` and ``tune_pool``; the REST
    API answers every one of them with 409 Conflict.
    """


class RunningWorkerError(WorkerStateError):
    """The worker is already running."""

    def __init__(self, message: str = "worker is already running") -> None:
        super().__init__(message)


class NotRunningWorkerError(WorkerStateError):
    """The worker has not been started."""

    def __init__(self, message: str = "worker is not running") -> None:
        super().__init__(message)


class WorkerPausedError(WorkerStateError):
    """The worker is paused."""

    def __init__(self, message: str = "worker is paused") -> None:
        super().__init__(message)


class WorkerPausingError(WorkerStateError):
    """The worker is pausing: it waits for running jobs before it is paused."""

    def __init__(self, message: str = "worker is pausing") -> None:
        super().__init__(message)


class WorkerStoppedError(WorkerStateError):
    """The worker is stopped."""

    def __init__(self, message: str = "worker is stopped") -> None:
        super().__init__(message)


class WorkerStoppingError(WorkerStateError):
    """The worker is stopping: it waits for running jobs before it is stopped."""

    def __init__(self, message: str = "worker is stopping") -> None:
        super().__init__(message)


class SameConcurrencyError(WorkerStateError):
    """``tune_pool`` was asked for the concurrency the worker already has."""

    def __init__(self, message: str = "worker already has the same concurrency") -> None:
        super().__init__(message)


# Job handle errors.


class JobProcessingError(VarMQError):
    """A running job cannot be closed."""

    def __init__(self, job_id: str = "") -> None:
        super().__init__(f"job {job_id!r} is processing; a running job cannot be closed")
        self.job_id = job_id


class JobAlreadyClosedError(VarMQError):
    """The job was already closed (finished, cancelled or purged)."""

    def __init__(self, job_id: str = "") -> None:
        super().__init__(f"job {job_id!r} is already closed")
        self.job_id = job_id


class JobCancelledError(VarMQError):
    """The job was cancelled or purged before it ran (it never will), or, with ``running``,
    cancelled while it ran (``handle.cancel(job_id)`` on a queue that keeps job records)."""

    def __init__(self, job_id: str = "", *, running: bool = False) -> None:
        when = "while it ran" if running else "before it ran"
        super().__init__(f"job {job_id!r} was cancelled {when}")
        self.job_id = job_id
        self.running = running


class ForkedWorkerError(VarMQError, RuntimeError):
    """A worker made before ``os.fork()`` was used in the child process.

    Its threads did not survive the fork (only the forking thread does), so it would never run
    a job. Create workers after the fork: in gunicorn, do not make them at import time with
    ``--preload`` (make them in ``post_fork`` or in the app factory); with multiprocessing,
    use the ``spawn`` start method or make them in the child.
    """

    def __init__(self, worker: str, pid: int) -> None:
        super().__init__(
            f"worker {worker} was created in process {pid} and cannot run in this child "
            "process after os.fork(); create workers after the fork (gunicorn: in post_fork, "
            "not at import with --preload; multiprocessing: the 'spawn' start method)"
        )
        self.worker = worker


class EnqueueError(VarMQError):
    """``add(..., strict=True)`` was refused: the queue is closed or full, or the storage refused
    or failed the write. Without ``strict``, ``add`` gives ``False`` (or ``None``) instead."""

    def __init__(self, queue: str, job_id: str, reason: str) -> None:
        super().__init__(f"queue {queue!r} did not store job {job_id!r}: {reason}")
        self.queue = queue
        self.job_id = job_id


class JobTimeoutError(VarMQError, TimeoutError):
    """A job ran longer than its timeout: it failed (and follows the retry policy).

    An ``async def`` job was cancelled; a plain one had ``job.cancelled`` set and its slot is
    given back when its function returns (Python cannot stop a thread).
    """

    def __init__(self, job_id: str, queue: str, timeout: float) -> None:
        super().__init__(f"job {job_id!r} of queue {queue!r} ran longer than its {timeout} s")
        self.job_id = job_id
        self.queue = queue
        self.timeout = timeout


class JobFailedError(VarMQError):
    """A job followed by id (``handle.result_of(job_id)``) ended without a value: it failed,
    went to the dead letters, or was cancelled.

    It carries what the job's record kept of the error, never the exception object itself
    (records are JSON: nothing is unpickled): ``error_type`` (the exception's class name, ``""``
    when the record has none, as for a job cancelled before it ran), ``message`` and
    ``traceback`` (text), and the record's ``state`` (``"failed"``, ``"dead"``,
    ``"cancelled"``).
    """

    def __init__(
        self, job_id: str, state: str, error_type: str, message: str, traceback: str = ""
    ) -> None:
        ended = {"failed": "failed", "dead": "is dead", "cancelled": "was cancelled"}
        detail = f": {error_type}: {message}" if error_type else f" ({message})" if message else ""
        if error_type == "JobCancelledError" and message:
            super().__init__(message)  # "job 'x' was cancelled while it ran" says it all
        else:
            super().__init__(f"job {job_id!r} {ended.get(state, state)}{detail}")
        self.job_id = job_id
        self.state = state
        self.error_type = error_type
        self.message = message
        self.traceback = traceback


class JobNotFoundError(VarMQError, LookupError):
    """A queue has no record of the job id asked for: it was never added with that id while
    the queue kept records, or its record was dropped (``keep_results`` after it ended)."""

    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(
            f"queue {queue!r} has no record of job {job_id!r}: it was not added with that id "
            "while the queue kept records (keep_results), or its record expired"
        )
        self.queue = queue
        self.job_id = job_id


class ResultNotJSONError(VarMQError, TypeError):
    """A result worker's function returned a value with no JSON form, on a queue whose records
    keep results for other processes: the job fails with this error instead of losing the
    value (with a retry policy it goes to the dead letters; running it again would not help)."""

    def __init__(self, job_id: str, queue: str, reason: str) -> None:
        super().__init__(
            f"job {job_id!r} of queue {queue!r} returned a value that cannot be kept as its "
            f"result: {reason}; return JSON values (dict, list, str, int, float, bool, None) "
            "or a dataclass of them"
        )
        self.job_id = job_id
        self.queue = queue


# Storage path errors: reported through errs() and the error handler.


class FailedToDequeueError(VarMQError):
    """Taking jobs from a queue failed; the worker backs off and tries again."""

    def __init__(self, queue: str, cause: BaseException | None = None) -> None:
        detail = f": {cause!r}" if cause is not None else ""
        super().__init__(f"failed to dequeue from {queue}{detail}")
        self.queue = queue
        self.__cause__ = cause


class FailedToCastJobError(VarMQError):
    """A queue handed out something that is neither a job nor job bytes."""

    def __init__(self, queue: str, item: object) -> None:
        super().__init__(f"failed to cast job from {queue}: got {type(item).__name__}")
        self.queue = queue


class ParseJobError(VarMQError):
    """Job bytes taken from storage do not decode; the job is not acknowledged."""

    def __init__(self, queue: str, ack_id: str, reason: str) -> None:
        super().__init__(f"failed to parse job from {queue} (ack id {ack_id!r}): {reason}")
        self.queue = queue
        self.ack_id = ack_id


class AcknowledgeJobError(VarMQError):
    """The storage refused or failed to settle a taken job (its acknowledgement, or its nack,
    release, dead letter or failure): the job runs again once its lease runs out.

    ``queue`` names the queue and ``op`` the settle (``"acknowledge"``, ``"nack"``, ...) where
    the worker knows them; ``cause`` is the storage's error, ``None`` when it refused (the lease
    was lost, taken over, or the store closed).
    """

    def __init__(
        self,
        job_id: str,
        ack_id: str,
        cause: BaseException | None = None,
        *,
        queue: str = "",
        op: str = "acknowledge",
    ) -> None:
        why = f"{type(cause).__name__}: {cause}" if cause is not None else "refused by the storage"
        where = f"queue {queue!r}: " if queue else ""
        super().__init__(
            f"{where}failed to {op} job {job_id!r} (ack id {ack_id!r}): {why}; the job runs "
            "again once its lease runs out"
        )
        self.job_id = job_id
        self.ack_id = ack_id
        self.queue = queue
        self.op = op


class LeaseLostError(VarMQError):
    """A running job's lease could not be renewed: another consumer may run it too."""

    def __init__(self, job_id: str, ack_id: str) -> None:
        super().__init__(f"lease lost for job {job_id!r} (ack id {ack_id!r}); it may run twice")
        self.job_id = job_id
        self.ack_id = ack_id


# Snapshot errors: raised by save_queues and load_queues.


class PersistenceError(VarMQError):
    """A snapshot file was refused: it cannot be loaded, or the queues cannot be saved to it.

    Nothing was written: the file on disk, if any, is as it was. ``path`` names the file,
    ``queue`` and ``job_id`` the queue and job concerned where there is one (``None`` if not).
    """

    def __init__(
        self, message: str, *, path: str, queue: str | None = None, job_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.queue = queue
        self.job_id = job_id


class SubscriberFullError(VarMQError):
    """A topic subscriber with ``on_full="block"`` stayed full past its ``block_timeout``.

    ``publish`` made every other copy first, then raised this. ``subscribers`` names the
    subscribers that did not get the message, ``topic`` is the name published to, and
    ``copies`` counts the copies that were made. Retrying the publish with the same
    ``message_id`` makes only the missing copies.
    """

    def __init__(self, subscribers: Sequence[str], topic: str, copies: int) -> None:
        names = ", ".join(repr(name) for name in subscribers)
        which = "subscriber" if len(subscribers) == 1 else "subscribers"
        super().__init__(
            f"topic {topic!r}: {which} {names} stayed full, so the message was not given to "
            f"them ({copies} other copies were made); read faster, raise max_pending, or "
            "subscribe with on_full='drop_oldest'"
        )
        self.subscribers = tuple(subscribers)
        self.topic = topic
        self.copies = copies


class UnknownTaskError(VarMQError, LookupError):
    """A job names a task the worker that took it does not know (``varmq.App``).

    The job is never dropped and never run as something else: it fails with this error, which
    the dead letter and the job's record keep, so deploying producers before consumers loses
    nothing (``requeue_dead`` once a worker knows the task).
    """

    def __init__(self, task: str, known: Sequence[str]) -> None:
        self.task = task
        self.known = tuple(known)
        names = ", ".join(repr(name) for name in self.known[:20]) or "none"
        more = f" and {len(self.known) - 20} more" if len(self.known) > 20 else ""
        super().__init__(f"unknown task {task!r}: this worker knows {names}{more}")
