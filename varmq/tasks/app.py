"""The registry of tasks over one store: :class:`App`, and its queues (:class:`AppQueue`).

Every queue of an app is a priority queue that keeps job records: a task call has a priority,
and a :class:`~varmq.TaskRun` follows its job by id. On a store (``sqliteq.new``,
``redisq.new``) the queues are distributed priority queues opened on first use, so producers
and workers in any process share them; with ``App(None)`` they are in-memory queues bound to
the app's workers in this process, for tests and single-process programs.

Locks: ``App._lock`` guards the registry (``_tasks``), the queues (``_queues``), the schedules
and the workers the app made; it is held while one of those changes, never while a task runs
or a job is stored.
"""

from __future__ import annotations

import inspect
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, overload

from typing_extensions import Unpack

from ..api.handles import Producer, no_id
from ..api.storage_queues import DistributedPriorityQueue
from ..api.worker import ResultWorker, WorkerOptions
from ..contract.protocols import IDistributedPriorityQueue
from ..model import validate
from ..model.retry import Retry
from .arguments import TaskSignature, to_json_value
from .runner import TaskCounts, TaskRunner
from .task import AsyncTask, Task, TaskRun, new_job_id

__all__ = ["DEFAULT_KEEP_RESULTS", "App", "AppQueue", "all_apps"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_KEEP_RESULTS = 86_400.0
"""Seconds a task's record is kept after it ended unless the task says otherwise: one day."""

# A task runs once unless it says otherwise; a failure (an unknown task among them) goes to the
# dead letters of its queue, where requeue_dead finds it.
_RUN_ONCE = Retry(max_attempts=1)
# Every App alive in this process, for the Prometheus collector's per-task series.
_APPS: weakref.WeakSet[App] = weakref.WeakSet()


def all_apps() -> list[App]:
    """Every :class:`App` alive in this process."""
    return list(_APPS)


# Producer handles of an app's queues: ids are always given, data is JSON already.
_PRODUCER = Producer(no_id, None)


class AppQueue:
    """One queue of an app: its name, how long it keeps records, and the handle that adds to
    it and follows its jobs (made on first use)."""

    def __init__(self, app: App, name: str, keep_results: float) -> None:
        self.app = app
        self.name = name
        self.keep_results = keep_results
        self._handle: Any = None

    def __repr__(self) -> str:
        return f"AppQueue({self.name!r}, keep_results={self.keep_results})"

    def handle(self) -> Any:
        """The handle adding to this queue: a producer handle on the store's queue, or the
        in-memory queue bound to the app's worker (one is made if none binds it yet)."""
        handle = self._handle
        if handle is None:
            handle = self.app._open(self)
        return handle


@dataclass(frozen=True)
class _ScheduleSpec:
    name: str
    task: Task[Any, Any]
    every: float | None
    cron: str | None
    data: dict[str, Any]


def _default_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "__main__"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not qualname:
        raise TypeError(f"varmq: {fn!r} has no name: give the task one (@app.task(name=...))")
    if "<locals>" in qualname:  # a function defined in a function: its own name is the clearer
        qualname = qualname.rsplit(".", 1)[-1]
    return f"{module}.{qualname}"


class App:
    """A registry of tasks over one store: ``@app.task`` registers a function, ``enqueue``
    stores calls of it, ``app.worker()`` runs them (docs/tasks.md).

    ``store`` is what ``sqliteq.new``, ``redisq.new`` (or another adapter's ``new``) returned,
    or ``None`` for in-memory queues in this process. ``default_queue`` is the queue of every
    task that names none.
    """

    def __init__(self, store: Any = None, *, default_queue: str = "default") -> None:
        if store is not None and not callable(
            getattr(store, "new_distributed_priority_queue", None)
        ):
            raise TypeError(
                f"varmq: App(store) takes what sqliteq.new or redisq.new returned, or None; "
                f"got {type(store).__name__}, which has no new_distributed_priority_queue"
            )
        if not isinstance(default_queue, str) or not default_queue:
            raise ValueError(f"varmq: default_queue must be a queue name, got {default_queue!r}")
        self.store = store
        self.default_queue = default_queue
        self._lock = threading.Lock()
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._queues: dict[str, AppQueue] = {}
        self._schedules: list[_ScheduleSpec] = []
        self._workers: list[tuple[ResultWorker[Any, Any], tuple[str, ...]]] = []
        self.counts = TaskCounts()
        """Runs per task name in this process (``snapshot()``), for operators."""
        _APPS.add(self)

    def __repr__(self) -> str:
        where = "memory" if self.store is None else type(self.store).__module__.split(".")[0]
        return f"<varmq.App on {where}: {len(self._tasks)} tasks>"

    # -- registering -----------------------------------------------------------------------

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """The registered tasks by name (a read-only view)."""
        return dict(self._tasks)

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> AsyncTask[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        keep_results: float | None = None,
    ) -> _TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        keep_results: float | None = None,
    ) -> Any:
        """Register ``fn`` as a task (``@app.task``, or ``@app.task(...)`` with options).

        ``name`` (default: the function's module-qualified name) is what jobs carry: two
        functions under one name raise ``ValueError`` naming both. ``queue`` (default: the
        app's ``default_queue``), ``priority`` (lower first; default 0), ``retry`` (the task's
        policy; default: it runs once and a failure goes to the dead letters), ``timeout``
        (seconds a run may take), ``keep_results`` (seconds its record is kept after it ended;
        default one day; a queue keeps one value, the first its tasks give).
        """
        options = _TaskDecorator(self, name, queue, priority, retry, timeout, keep_results)
        if fn is None:
            return options
        return options(fn)

    def _register(
        self,
        fn: Callable[..., Any],
        name: str | None,
        queue: str | None,
        priority: int | None,
        retry: Retry | None,
        timeout: float | None,
        keep_results: float | None,
    ) -> Task[Any, Any]:
        if not callable(fn):
            raise TypeError(f"varmq: @app.task takes a function, got {fn!r}")
        task_name = _default_name(fn) if name is None else name
        if not isinstance(task_name, str) or not task_name:
            raise ValueError(f"varmq: a task name must be a non-empty str, got {task_name!r}")
        queue_name = self.default_queue if queue is None else queue
        if not isinstance(queue_name, str) or not queue_name:
            raise ValueError(f"varmq: task {task_name!r}: queue must be a name, got {queue!r}")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise TypeError(f"varmq: task {task_name!r}: priority must be an int, got {priority!r}")
        validate.instance(f"task {task_name!r}: retry", retry, Retry)
        if timeout is not None:
            timeout = validate.seconds(f"task {task_name!r}: timeout", timeout, positive=True)
        keep = DEFAULT_KEEP_RESULTS
        if keep_results is not None:  # above 0: a task's run is followed through its record
            keep = validate.seconds(
                f"task {task_name!r}: keep_results", keep_results, positive=True
            )
        kind = AsyncTask if inspect.iscoroutinefunction(fn) else Task
        made: Task[Any, Any] = kind(
            self,
            fn,
            task_name,
            queue_name,
            priority=priority or 0,
            retry=retry,
            timeout=timeout,
            keep_results=keep,
            signature=TaskSignature(task_name, fn),
        )
        with self._lock:
            known = self._tasks.get(task_name)
            if known is not None and known.fn is not fn:
                raise ValueError(
                    f"varmq: two functions under the task name {task_name!r}: "
                    f"{_where(known.fn)} and {_where(fn)}; give one of them another name "
                    "(@app.task(name=...))"
                )
            self._declare(queue_name, keep, keep_results is not None, task_name)
            self._tasks[task_name] = made
        return made

    def _declare(self, name: str, keep: float, explicit: bool, task: str) -> AppQueue:
        """The queue ``name``, declared with ``keep`` if new (under ``_lock``)."""
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = AppQueue(self, name, keep)
        elif explicit and found.keep_results != keep:
            raise ValueError(
                f"varmq: task {task!r} keeps results {keep} s, but queue {name!r} keeps them "
                f"{found.keep_results} s (a queue keeps one value): give the same keep_results"
            )
        return found

    # -- producing --------------------------------------------------------------------------

    def _queue(self, name: str) -> AppQueue:
        found = self._queues.get(name)
        if found is None:
            with self._lock:
                found = self._declare(name, DEFAULT_KEEP_RESULTS, False, "")
        return found

    def _open(self, queue: AppQueue) -> Any:
        """Make the handle of ``queue``: on the store, a producer handle; in memory, the queue
        bound to a worker of this app (made with default options if none binds it yet)."""
        if self.store is None:
            self.worker(queue.name)
            handle = queue._handle
            assert handle is not None
            return handle
        with self._lock:
            if queue._handle is None:
                stored: IDistributedPriorityQueue = self.store.new_distributed_priority_queue(
                    queue.name, keep_results=queue.keep_results
                )
                queue._handle = DistributedPriorityQueue(stored, 0, None, _PRODUCER)
            return queue._handle

    def enqueue(
        self,
        name: str,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        delay: float | None = None,
        job_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> TaskRun[Any]:
        """Enqueue a call of the task ``name`` without importing its function (the worker
        that runs it must know it). ``args`` and ``kwargs`` must be JSON values (or dataclasses,
        datetimes, UUIDs, Decimals, Enums: converted as ``enqueue`` converts them); the other
        options as for ``task.using``. A task registered here gives its queue, priority and
        timeout; for one that is not, ``queue`` defaults to the app's ``default_queue``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"varmq: app.enqueue needs a task name, got {name!r}")
        task = self._tasks.get(name)
        if task is not None:
            return task.using(delay=delay, job_id=job_id, priority=priority, queue=queue).enqueue(
                *args, **(kwargs or {})
            )
        try:
            data = {
                "task": name,
                "args": [to_json_value(value) for value in args],
                "kwargs": {str(key): to_json_value(value) for key, value in (kwargs or {}).items()},
            }
        except TypeError as exc:
            raise TypeError(f"varmq: task {name!r}: {exc}") from None
        target = self._queue(queue or self.default_queue)
        made_id = job_id or new_job_id()
        target.handle().add(data, priority or 0, job_id=made_id, delay=delay, strict=True)
        return TaskRun(made_id, target, None)

    def run_of(self, job_id: str, *, queue: str | None = None) -> TaskRun[Any]:
        """The run enqueued with ``job_id`` on ``queue`` (default: the app's
        ``default_queue``), to follow by id from any process; its result is the stored JSON
        (``task.run_of`` rebuilds it typed)."""
        return TaskRun(job_id, self._queue(queue or self.default_queue), None)

    # -- consuming --------------------------------------------------------------------------

    def worker(
        self, *queues: str, concurrency: int = 1, **worker_options: Unpack[WorkerOptions]
    ) -> ResultWorker[Any, Any]:
        """A result worker that runs the tasks of ``queues`` (every queue of the app when none
        is named) by the name each job carries, with every option of ``new_result_worker``.

        Its ``retry`` (default: each run once) applies to the tasks without their own; the
        app's schedules of those queues are declared on it. With ``App(None)`` it binds the
        in-memory queues, and each queue is bound to one worker.
        """
        names = list(queues) or sorted({self.default_queue, *self._queues})
        if not names:
            raise ValueError("varmq: the app has no queue yet: register a task first")
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"varmq: app.worker takes queue names, got {name!r}")
        declared = [self._queue(name) for name in names]
        worker_options.setdefault("retry", _RUN_ONCE)
        # No default name: a named worker is registered, and two apps would share one name.
        runner = TaskRunner(self._tasks, self.counts)
        mine = [t for t in self._tasks.values() if t.queue in names]
        every_async = bool(mine) and all(t.is_async for t in mine)
        fn = runner.run_async if every_async else runner.run
        worker: ResultWorker[Any, Any] = ResultWorker(fn, concurrency, **worker_options)
        with self._lock:
            if self.store is None:
                bound = {name for _, queues in self._workers for name in queues}
                taken = [q.name for q in declared if q.name in bound]
                if taken:
                    raise ValueError(
                        f"varmq: in-memory queue {taken[0]!r} is bound to a worker already "
                        "(App(None) binds each queue to one worker)"
                    )
                for queue in declared:
                    queue._handle = worker.bind_priority_queue(
                        name=queue.name, keep_results=queue.keep_results
                    )
            else:
                for queue in declared:
                    worker.with_distributed_priority_queue(
                        self.store.new_distributed_priority_queue(
                            queue.name, keep_results=queue.keep_results
                        )
                    )
            self._workers.append((worker, tuple(names)))
            schedules = [s for s in self._schedules if s.task.queue in names]
        for spec in schedules:
            self._declare_schedule(worker, spec)
        return worker

    def schedule(
        self,
        task: Task[Any, Any],
        *,
        every: float | None = None,
        cron: str | None = None,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        """Run ``task(*args, **kwargs)`` at every occurrence of ``every`` (seconds) or ``cron``
        (UTC), once however many workers of the app run: each worker made afterwards by
        :meth:`worker` on the task's queue declares it (``worker.schedule``, docs/schedules.md).
        ``name`` (default: the task's name) names its occurrences' job ids."""
        if not isinstance(task, Task) or task.app is not self:
            raise TypeError(f"varmq: app.schedule takes a task of this app, got {task!r}")
        positional, keywords = task.signature.encode_call(tuple(args), dict(kwargs or {}))
        data = {"task": task.name, "args": positional, "kwargs": keywords}
        spec = _ScheduleSpec(name or task.name, task, every, cron, data)
        with self._lock:
            if any(s.name == spec.name for s in self._schedules):
                raise ValueError(f"varmq: the app has a schedule {spec.name!r} already")
            self._schedules.append(spec)
            workers = [worker for worker, names in self._workers if task.queue in names]
        for worker in workers:  # workers made before the schedule declare it too
            self._declare_schedule(worker, spec)

    def _declare_schedule(self, worker: ResultWorker[Any, Any], spec: _ScheduleSpec) -> None:
        queue = self._queue(spec.task.queue)
        worker.schedule(
            spec.name, every=spec.every, cron=spec.cron, data=spec.data, queue=queue.handle()
        )

    def run_until_idle(self, timeout: float | None = None) -> None:
        """Wait until every worker of the app has run everything enqueued (for tests on
        ``App(None)``: enqueue, then this, then assert on ``run.result()``); ``TimeoutError``
        after ``timeout`` seconds. Runs every job enqueued meanwhile too, delayed ones and
        retries included."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            workers = [worker for worker, _ in self._workers]
        for worker in workers:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not worker.wait_until_idle(left):
                raise TimeoutError(f"varmq: app workers not idle after {timeout} s")


class _TaskDecorator:
    """What ``@app.task(...)`` with options returns: applied to a function, registers it."""

    def __init__(
        self,
        app: App,
        name: str | None,
        queue: str | None,
        priority: int | None,
        retry: Retry | None,
        timeout: float | None,
        keep_results: float | None,
    ) -> None:
        self._app = app
        self._options = (name, queue, priority, retry, timeout, keep_results)

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> AsyncTask[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Any:
        return self._app._register(fn, *self._options)


def _where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    qualname = getattr(fn, "__qualname__", repr(fn))
    module = getattr(fn, "__module__", "?")
    if code is None:
        return f"{module}.{qualname}"
    return f"{module}.{qualname} ({code.co_filename}:{code.co_firstlineno})"
