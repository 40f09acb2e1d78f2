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

# __all__ (below) is what a program writes daily. The names imported as "X as X" stay importable
# from varmq but are left out of it: the errors seldom caught (all of them are in varmq.errors),
# the handles of add_all's groups, the Go-parity job functions, what few programs name. The
# "as" tells type checkers that they are re-exported.
from .api.callables import err_func as err_func
from .api.callables import func as func
from .api.callables import result_func as result_func
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
    ErrWorker,
    ResultWorker,
    Worker,
    WorkerOptions,
    get_worker,
    workers,
)
from .api.worker import ErrorHandler as ErrorHandler
from .contract.protocols import IDistributedPriorityQueue, IDistributedQueue
from .contract.topic_names import OnFull as OnFull
from .contract.workers import WorkerInfo as WorkerInfo
from .model.errors import AcknowledgeJobError as AcknowledgeJobError
from .model.errors import (
    EnqueueError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    UnknownTaskError,
    VarMQError,
    WorkerStateError,
)
from .model.errors import FailedToCastJobError as FailedToCastJobError
from .model.errors import FailedToDequeueError as FailedToDequeueError
from .model.errors import ForkedWorkerError as ForkedWorkerError
from .model.errors import JobAlreadyClosedError as JobAlreadyClosedError
from .model.errors import JobProcessingError as JobProcessingError
from .model.errors import LeaseLostError as LeaseLostError
from .model.errors import NotRunningWorkerError as NotRunningWorkerError
from .model.errors import ParseJobError as ParseJobError
from .model.errors import PersistenceError as PersistenceError
from .model.errors import ResultNotJSONError as ResultNotJSONError
from .model.errors import RunningWorkerError as RunningWorkerError
from .model.errors import SameConcurrencyError as SameConcurrencyError
from .model.errors import SubscriberFullError as SubscriberFullError
from .model.errors import WorkerPausedError as WorkerPausedError
from .model.errors import WorkerPausingError as WorkerPausingError
from .model.errors import WorkerStoppedError as WorkerStoppedError
from .model.errors import WorkerStoppingError as WorkerStoppingError
from .model.groups import EnqueuedErrGroupJob as EnqueuedErrGroupJob
from .model.groups import EnqueuedGroupJob as EnqueuedGroupJob
from .model.groups import EnqueuedResultGroupJob as EnqueuedResultGroupJob
from .model.groups import Item, Result
from .model.jobs import (
    EnqueuedErrJob,
    EnqueuedJob,
    EnqueuedResultJob,
    FailedJob,
    Job,
    JobStatus,
    TopicJob,
    current_job,
)
from .model.metrics import DurationHistogram as DurationHistogram
from .model.metrics import Metrics
from .model.records import JobError, JobRecord
from .model.records import JobProgress as JobProgress
from .model.retry import DeadLetter, NoRetry, Retry
from .model.states import Status
from .model.strategy import Strategy
from .ops.service import run, run_async
from .sources.memory_queues import MemoryPriorityQueue, MemoryQueue
from .tasks.app import App
from .tasks.task import AsyncTask as AsyncTask
from .tasks.task import Task, TaskRun
from .topics.subscription import Message, Subscription
from .topics.subscription import SubscriberStats as SubscriberStats
from .topics.topics import DEFAULT_DEDUP_WINDOW, Topics
from .topics.topics import Binding as Binding

__all__ = [
    "DEFAULT_DEDUP_WINDOW",
    "App",
    "BaseWorker",
    "DeadLetter",
    "DistributedPriorityQueue",
    "DistributedQueue",
    "EnqueueError",
    "EnqueuedErrJob",
    "EnqueuedJob",
    "EnqueuedResultJob",
    "ErrWorker",
    "FailedJob",
    "Item",
    "Job",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobNotFoundError",
    "JobRecord",
    "JobStatus",
    "JobTimeoutError",
    "MemoryPriorityQueue",
    "MemoryQueue",
    "Message",
    "Metrics",
    "NoRetry",
    "PersistentPriorityQueue",
    "PersistentQueue",
    "PriorityQueue",
    "Queue",
    "Result",
    "ResultWorker",
    "Retry",
    "Schedule",
    "Status",
    "Strategy",
    "Subscription",
    "Task",
    "TaskRun",
    "TopicJob",
    "TopicQueue",
    "Topics",
    "UnknownTaskError",
    "VarMQError",
    "Worker",
    "WorkerOptions",
    "WorkerStateError",
    "current_job",
    "get_worker",
    "load_queues",
    "new_distributed_priority_queue",
    "new_distributed_queue",
    "new_err_worker",
    "new_result_worker",
    "new_topics",
    "new_worker",
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
