"""varmq: a job-queue worker framework with pluggable storage.

A worker runs a function on jobs taken from bound queues: in memory (FIFO, priority), or in
storage behind an adapter (``sqliteq``, ``redisq``) with at-least-once delivery. Topics
(``new_topics``) deliver one published message to every subscriber and bound queue.

    import varmq

    def send_email(job: varmq.Job[dict]) -> None:
        deliver(job.data["to"])

    worker = varmq.new_worker(send_email, 10)
    queue = worker.bind_queue()
    queue.add({"to": "a@example.com"})
    worker.wait_until_idle()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from typing_extensions import Unpack

from .api.callables import err_func, func, result_func
from .api.handles import Producer, no_id, require
from .api.queues import PriorityQueue, Queue
from .api.schedules import Schedule
from .api.snapshots import load_queues, save_queues
from .api.storage_queues import (
    DistributedPriorityQueue,
    DistributedQueue,
    PersistentPriorityQueue,
    PersistentQueue,
)
from .api.topic_queue import TopicQueue
from .api.worker import (
    BaseWorker,
    ErrorHandler,
    ErrWorker,
    ResultWorker,
    Worker,
    WorkerOptions,
    get_worker,
    workers,
)
from .contract.protocols import IDistributedPriorityQueue, IDistributedQueue
from .contract.topic_names import OnFull
from .model.errors import (
    AcknowledgeJobError,
    EnqueueError,
    FailedToCastJobError,
    FailedToDequeueError,
    ForkedWorkerError,
    JobAlreadyClosedError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JobProcessingError,
    JobTimeoutError,
    LeaseLostError,
    NotRunningWorkerError,
    ParseJobError,
    PersistenceError,
    ResultNotJSONError,
    RunningWorkerError,
    SameConcurrencyError,
    SubscriberFullError,
    VarMQError,
    WorkerPausedError,
    WorkerPausingError,
    WorkerStateError,
    WorkerStoppedError,
    WorkerStoppingError,
)
from .model.groups import (
    EnqueuedErrGroupJob,
    EnqueuedGroupJob,
    EnqueuedResultGroupJob,
    Item,
    Result,
)
from .model.jobs import (
    EnqueuedErrJob,
    EnqueuedJob,
    EnqueuedResultJob,
    FailedJob,
    Job,
    JobStatus,
    TopicJob,
)
from .model.metrics import DurationHistogram, Metrics
from .model.records import JobError, JobRecord
from .model.retry import DeadLetter, NoRetry, Retry
from .model.states import Status
from .model.strategy import Strategy
from .ops.service import run, run_async
from .sources.memory_queues import MemoryPriorityQueue, MemoryQueue
from .topics.subscription import Message, SubscriberStats, Subscription
from .topics.topics import DEFAULT_DEDUP_WINDOW, Binding, Topics

__all__ = [
    "DEFAULT_DEDUP_WINDOW",
    "AcknowledgeJobError",
    "BaseWorker",
    "Binding",
    "DeadLetter",
    "DistributedPriorityQueue",
    "DistributedQueue",
    "DurationHistogram",
    "EnqueueError",
    "EnqueuedErrGroupJob",
    "EnqueuedErrJob",
    "EnqueuedGroupJob",
    "EnqueuedJob",
    "EnqueuedResultGroupJob",
    "EnqueuedResultJob",
    "ErrWorker",
    "ErrorHandler",
    "FailedJob",
    "FailedToCastJobError",
    "FailedToDequeueError",
    "ForkedWorkerError",
    "Item",
    "Job",
    "JobAlreadyClosedError",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobNotFoundError",
    "JobProcessingError",
    "JobRecord",
    "JobTimeoutError",
    "JobStatus",
    "LeaseLostError",
    "MemoryPriorityQueue",
    "MemoryQueue",
    "Message",
    "Metrics",
    "NoRetry",
    "NotRunningWorkerError",
    "OnFull",
    "ParseJobError",
    "PersistenceError",
    "PersistentPriorityQueue",
    "PersistentQueue",
    "PriorityQueue",
    "Queue",
    "Result",
    "ResultNotJSONError",
    "Retry",
    "ResultWorker",
    "RunningWorkerError",
    "SameConcurrencyError",
    "Schedule",
    "Status",
    "Strategy",
    "SubscriberFullError",
    "SubscriberStats",
    "Subscription",
    "TopicJob",
    "TopicQueue",
    "Topics",
    "VarMQError",
    "Worker",
    "WorkerOptions",
    "WorkerPausedError",
    "WorkerPausingError",
    "WorkerStateError",
    "WorkerStoppedError",
    "WorkerStoppingError",
    "err_func",
    "func",
    "get_worker",
    "load_queues",
    "new_distributed_priority_queue",
    "new_distributed_queue",
    "new_err_worker",
    "new_result_worker",
    "new_topics",
    "new_worker",
    "result_func",
    "run",
    "run_async",
    "save_queues",
    "workers",
]

T = TypeVar("T")
R = TypeVar("R")


def new_worker(
    fn: Callable[[Job[T]], None] | Callable[[Job[T]], Awaitable[None]],
    concurrency: int = 1,
    **options: Unpack[WorkerOptions],
) -> Worker[T]:
    """A worker running ``fn(job)`` (plain or ``async def``) on up to ``concurrency`` jobs.

    ``concurrency`` 0 or less means the CPU count. The keyword options are those of
    :class:`WorkerOptions`; docs/workers.md and docs/retries.md say what each does.
    """
    return Worker(fn, concurrency, **options)


def new_err_worker(
    fn: Callable[[Job[T]], None] | Callable[[Job[T]], Awaitable[None]],
    concurrency: int = 1,
    **options: Unpack[WorkerOptions],
) -> ErrWorker[T]:
    """A worker whose job handles also give the exception ``fn`` raised (``err()``)."""
    return ErrWorker(fn, concurrency, **options)


def new_result_worker(
    fn: Callable[[Job[T]], R] | Callable[[Job[T]], Awaitable[R]],
    concurrency: int = 1,
    **options: Unpack[WorkerOptions],
) -> ResultWorker[T, R]:
    """A worker whose job handles give the value ``fn`` returned (``result()``)."""
    return ResultWorker(fn, concurrency, **options)


def new_topics(*, dedup_window: int = DEFAULT_DEDUP_WINDOW) -> Topics:
    """Topics in this process: ``publish(name, data)`` gives a copy to every subscriber
    (``subscribe``, ``worker.bind_topic``) and bound queue (``bind``) whose pattern matches.

    A publish with a ``message_id`` seen among the last ``dedup_window`` ids makes no copy
    (0: no such memory). docs/topics.md says what each call does.
    """
    return Topics(dedup_window=dedup_window)


def new_distributed_queue(
    q: IDistributedQueue,
    *,
    job_id_generator: Callable[[], str] | None = None,
    payload_encoder: Callable[[Any], Any] | None = None,
    capacity: int = 0,
) -> DistributedQueue[Any]:
    """A producer-only handle on a distributed queue: no worker, no subscription."""
    require(q, IDistributedQueue, "new_distributed_queue")
    return DistributedQueue(q, capacity, None, _producer(job_id_generator, payload_encoder))


def new_distributed_priority_queue(
    q: IDistributedPriorityQueue,
    *,
    job_id_generator: Callable[[], str] | None = None,
    payload_encoder: Callable[[Any], Any] | None = None,
    capacity: int = 0,
) -> DistributedPriorityQueue[Any]:
    """A producer-only handle on a distributed priority queue."""
    require(q, IDistributedPriorityQueue, "new_distributed_priority_queue")
    return DistributedPriorityQueue(q, capacity, None, _producer(job_id_generator, payload_encoder))


def _producer(
    job_id_generator: Callable[[], str] | None, payload_encoder: Callable[[Any], Any] | None
) -> Producer:
    """How a producer-only handle adds: no worker to tell."""
    return Producer(job_id_generator or no_id, payload_encoder)
