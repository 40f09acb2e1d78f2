"""A registered task (:class:`Task`, :class:`AsyncTask`) and one enqueued call of it
(:class:`TaskRun`).

A task is a plain or ``async def`` function with a name, registered on a :class:`~varmq.App`.
Calling it runs it inline; ``enqueue`` stores one job whose data is the call as JSON,
``{"task": name, "args": [...], "kwargs": {...}}`` (docs/tasks.md gives the exact bytes), on
the task's queue, and returns a :class:`TaskRun` that follows that job by id through the
queue's records. Where the job runs is the app's concern (:mod:`varmq.tasks.app`); how the
arguments become JSON and come back typed is :mod:`varmq.tasks.arguments` (with
:mod:`~varmq.tasks.json_values` and :mod:`~varmq.tasks.rebuild`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from typing_extensions import Self

from ..model.errors import EnqueueError, JobNotFoundError
from ..model.records import JobRecord
from ..model.retry import Retry

if TYPE_CHECKING:
    from .arguments import TaskSignature

__all__ = ["AsyncTask", "CallOptions", "Task", "TaskApp", "TaskQueue", "TaskRun"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class TaskQueue(Protocol):
    """What a task needs of one queue of its app (:class:`varmq.tasks.app.AppQueue`)."""

    @property
    def name(self) -> str:
        """The queue's name."""
        ...

    def handle(self) -> Any:
        """The handle that adds to the queue and follows its jobs by id."""
        ...


class TaskApp(Protocol):
    """What a task needs of its app (:class:`varmq.App`): its queues by name."""

    def _queue(self, name: str) -> TaskQueue: ...


class TaskRun(Generic[R_co]):
    """One enqueued call of a task, followed by its job id from any process: ``status()``
    (the job's record), ``result()`` (the value the task returned, rebuilt from its return
    annotation), ``cancel()``, and their ``_async`` twins for asyncio code."""

    __slots__ = ("_decode", "_queue", "id")

    def __init__(self, job_id: str, queue: TaskQueue, decode: Callable[[Any], Any] | None) -> None:
        #: The job's id: any process follows the job with ``task.run_of(job_id)``.
        self.id = job_id
        self._queue = queue
        self._decode = decode

    def __repr__(self) -> str:
        return f"TaskRun(id={self.id!r}, queue={self._queue.name!r})"

    def status(self) -> JobRecord:
        """The job's record now: its ``state``, ``attempts``, times, ``progress``, outcome.

        Raises :class:`~varmq.JobNotFoundError` once the record expired (``keep_results``).
        """
        record: JobRecord | None = self._queue.handle().job(self.id)
        if record is None:
            raise JobNotFoundError(self._queue.name, self.id)
        return record

    async def status_async(self) -> JobRecord:
        """:meth:`status` without blocking the event loop."""
        record: JobRecord | None = await self._queue.handle().job_async(self.id)
        if record is None:
            raise JobNotFoundError(self._queue.name, self.id)
        return record

    def result(self, timeout: float | None = None) -> R_co:
        """Wait for the job to end and give what the task returned; :class:`~varmq.JobFailedError`
        when it failed, went to the dead letters or was cancelled, ``TimeoutError`` after
        ``timeout`` seconds, :class:`~varmq.JobNotFoundError` when its record expired."""
        value = self._queue.handle().result_of(self.id, timeout)
        return value if self._decode is None else self._decode(value)  # type: ignore[no-any-return]

    async def result_async(self, timeout: float | None = None) -> R_co:
        """:meth:`result` for asyncio code: never blocks the event loop."""
        value = await self._queue.handle().result_of_async(self.id, timeout)
        return value if self._decode is None else self._decode(value)  # type: ignore[no-any-return]

    def cancel(self) -> bool:
        """Cancel the job: ``True`` means it will not start (or, running, it is stopped);
        ``False`` that it had ended already. docs/results.md says what each answer means."""
        return bool(self._queue.handle().cancel(self.id))

    async def cancel_async(self) -> bool:
        """:meth:`cancel` without blocking the event loop."""
        return bool(await self._queue.handle().cancel_async(self.id))


class CallOptions:
    """The options of one enqueue (``task.using(...)``): every field ``None`` means the task's
    own."""

    __slots__ = ("delay", "job_id", "priority", "queue")

    def __init__(
        self,
        delay: float | None = None,
        job_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> None:
        self.delay = delay
        self.job_id = job_id
        self.priority = priority
        self.queue = queue


_NO_OPTIONS = CallOptions()


def new_job_id() -> str:
    """A fresh job id for a call enqueued without one: every call has a record to follow."""
    return uuid.uuid4().hex


class Task(Generic[P, R]):
    """A function registered on a :class:`~varmq.App` (``@app.task``): call it to run it
    inline, ``enqueue`` it to run it on a worker of the app, in any process.

    ``name`` is what a job records (``module.qualname`` unless given); ``queue``,
    ``priority``, ``retry``, ``timeout`` and ``keep_results`` are the task's options.
    """

    def __init__(
        self,
        app: TaskApp,
        fn: Callable[P, Any],
        name: str,
        queue: str,
        *,
        priority: int,
        retry: Retry | None,
        timeout: float | None,
        keep_results: float,
        signature: TaskSignature,
        options: CallOptions = _NO_OPTIONS,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.priority = priority
        self.retry = retry
        self.timeout = timeout
        self.keep_results = keep_results
        self.signature = signature
        self._options = options
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on queue {self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as if it were not a task."""
        return self.fn(*args, **kwargs)  # type: ignore[no-any-return]

    #: Whether the function is an ``async def`` one.
    is_async = False

    def using(
        self,
        *,
        delay: float | None = None,
        job_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Self:
        """This task with options for the calls enqueued through what it returns: ``delay``
        (seconds before it may run), ``job_id`` (one job per id while its record is kept: an
        enqueue of an id already stored stores nothing and follows that job), ``priority``
        (lower first) and ``queue`` (another queue of the app)."""
        mine = self._options
        options = CallOptions(
            mine.delay if delay is None else delay,
            mine.job_id if job_id is None else job_id,
            mine.priority if priority is None else priority,
            mine.queue if queue is None else queue,
        )
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._options = options
        return twin

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskRun[R]:
        """Store one job that runs this task with these arguments on a worker of the app.

        The arguments must have a JSON form (docs/tasks.md says which types do); one that
        has none raises ``TypeError`` naming the task and the parameter, and nothing is
        stored. A storage error raises :class:`~varmq.EnqueueError`.
        """
        queue, data, priority, add = self._job(args, kwargs)
        _stored(queue, add, queue.handle().add(data, priority, **add))
        return TaskRun(add["job_id"], queue, self.signature.decode_result)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> TaskRun[R]:
        """:meth:`enqueue` for asyncio code: never blocks the event loop."""
        queue, data, priority, add = self._job(args, kwargs)
        _stored(queue, add, await queue.handle().add_async(data, priority, **add))
        return TaskRun(add["job_id"], queue, self.signature.decode_result)

    def _job(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[TaskQueue, dict[str, Any], int, dict[str, Any]]:
        """Where one call goes, its data, its priority and the other arguments of the add."""
        positional, keywords = self.signature.encode_call(args, kwargs)
        data = {"task": self.name, "args": positional, "kwargs": keywords}
        options = self._options
        queue = self.app._queue(options.queue or self.queue)
        priority = self.priority if options.priority is None else options.priority
        add = {
            "job_id": options.job_id or new_job_id(),
            "delay": options.delay,
            "timeout": self.timeout,
            "strict": True,  # a refusal raises EnqueueError: a run is never made for nothing
        }
        return queue, data, priority, add

    def run_of(self, job_id: str) -> TaskRun[R]:
        """The run of this task enqueued with ``job_id`` (in any process), to follow by id:
        nothing is read until you ask it something."""
        queue = self.app._queue(self._options.queue or self.queue)
        return TaskRun(job_id, queue, self.signature.decode_result)


def _stored(queue: TaskQueue, add: dict[str, Any], answer: Any) -> None:
    """Raise unless the add stored the job (strict adds raise themselves; kept as a guard)."""
    if answer is None or answer is False:
        raise EnqueueError(queue.name, add["job_id"], "the queue refused the job")


class AsyncTask(Task[P, R]):
    """A :class:`Task` of an ``async def`` function: calling it inline gives the coroutine."""

    def __call__(  # type: ignore[override]
        self, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, R]:
        """The coroutine of the function, to await here, as if it were not a task."""
        return self.fn(*args, **kwargs)  # type: ignore[no-any-return]

    is_async = True
