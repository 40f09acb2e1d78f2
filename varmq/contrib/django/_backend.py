"""``VarmqBackend``: Django's Tasks framework on a varmq store.

A Django task call is stored as a varmq job whose data is ``{"task": <module path of the
Task>, "args": [...], "kwargs": {...}}`` in a distributed priority queue named like the
Django queue, with a job record (``keep_results``) for ``get_result`` from any process. The
job id is the result id, ``"<queue>/<task module path>/<32 hex digits>"``: the queue and task
of a result are read from its id, so a result is found without any other index.

Django's priority (-100..100, higher first) is a varmq priority (lower first): its negation,
equal priorities in enqueue order. ``run_after`` is a delayed job. Inside ``atomic()`` the job
is stored by ``transaction.on_commit``: a rolled-back transaction stores nothing.

The worker (``manage.py varmq_worker``, or :meth:`VarmqBackend.worker`) is a result worker: a
run's return value, with the call's arguments, is what its record keeps. A task that raises
ends ``FAILED`` with its exception's class path and traceback (:class:`TaskRaised` carries
them through varmq's record, which keeps a class *name*).

Opened lazily, once per backend object (Django keeps one per alias and thread): the store and
its queue objects, under :attr:`VarmqBackend._lock`, which guards only ``_store`` and
``_handles``.
"""

from __future__ import annotations

import inspect
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, transaction
from django.utils.module_loading import import_string

import varmq

from ...model.records import JobRecord
from ...ops.stores import adapter_for
from ._compat import (
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    module_path,
    normalize_json,
)

__all__ = ["TaskRaised", "VarmqBackend"]

#: What a result id looks like: queue, task path, a random part (see the module docstring).
_RANDOM_DIGITS = 32

_STATUS = {
    "queued": TaskResultStatus.READY,
    "delayed": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

# OPTIONS of the backend that are not queue options of the store.
_BACKEND_OPTIONS = ("url", "max_attempts", "backoff", "timeout", "concurrency")


class TaskRaised(Exception):
    """A Django task raised: the message is ``"<exception class path>: <its message>"``, the
    original exception is the cause (its traceback is in the record's)."""

    def __init__(self, class_path: str, error: BaseException) -> None:
        self.class_path = class_path
        super().__init__(f"{class_path}: {error}")


class VarmqBackend(BaseTaskBackend):
    """A ``TASKS`` backend storing Django tasks in a varmq store (any store URL: ``sqlite:``,
    ``redis://``...), with every capability of the framework: deferred tasks, ``async def``
    tasks, results by id from any process, priorities.

    ``OPTIONS``: ``url`` (required), ``keep_results`` (seconds a result is kept, default one
    day), ``max_attempts`` and ``backoff`` (retries of a task that raised; default 1: none),
    ``timeout`` (seconds a task may run), ``concurrency`` (the worker's, default the CPU
    count), and any queue option of the store (``visibility_timeout``, ``rate_limit``...).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        url = options.get("url")
        if not isinstance(url, str) or not url:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]: VarmqBackend needs OPTIONS['url'], a store URL such as "
                "'sqlite:/var/lib/app/jobs.db' or 'redis://localhost:6379/0'"
            )
        self.url = url
        self.retry = varmq.Retry(
            max_attempts=int(options.get("max_attempts", 1)),
            backoff=float(options.get("backoff", 1.0)),
        )
        self.timeout: float | None = options.get("timeout")
        self.concurrency: int | None = options.get("concurrency")
        self.queue_options = {k: v for k, v in options.items() if k not in _BACKEND_OPTIONS}
        self.queue_options.setdefault("keep_results", 86_400.0)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self._lock = threading.Lock()
        self._store: Any = None
        self._handles: dict[str, Any] = {}
        self._tasks: dict[str, Task] = {}

    # -- the store -----------------------------------------------------------------------

    def _open_store(self) -> Any:
        with self._lock:
            if self._store is None:
                opener = adapter_for(self.url).open_url
                accepted = inspect.signature(opener).parameters
                self._store = (
                    opener(self.url, create=True) if "create" in accepted else opener(self.url)
                )
            return self._store

    def storage_queue(self, name: str) -> Any:
        """The store's queue for the Django queue ``name`` (opened with the queue options)."""
        return self._open_store().new_distributed_priority_queue(name, **self.queue_options)

    def _handle(self, name: str) -> Any:
        with self._lock:
            handle = self._handles.get(name)
        if handle is None:
            handle = varmq.new_distributed_priority_queue(self.storage_queue(name))
            with self._lock:
                handle = self._handles.setdefault(name, handle)
        return handle

    def close(self) -> None:
        """Close the store (Django never does; tests and the worker command do)."""
        with self._lock:
            store, self._store, self._handles = self._store, None, {}
        if store is not None:
            store.close()

    # -- producing -----------------------------------------------------------------------

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Store a call of ``task``; its ``TaskResult`` (``READY``). Inside ``atomic()``, the
        job is stored when the transaction commits, and not at all if it rolls back."""
        self.validate_task(task)
        result_id = f"{task.queue_name}/{task.module_path}/{uuid.uuid4().hex}"
        result = TaskResult(
            task=task,
            id=result_id,
            status=TaskResultStatus.READY,
            enqueued_at=_now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        data = {"task": task.module_path, "args": result.args, "kwargs": result.kwargs}
        handle = self._handle(task.queue_name)

        def store() -> None:
            handle.add(data, -task.priority, job_id=result_id, run_at=task.run_after, strict=True)

        connection = transaction.get_connection()
        if connection.in_atomic_block:
            transaction.on_commit(store)
        else:
            store()
        return result

    # -- results -------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        """The result of the call stored under ``result_id``, read from its record (from any
        process); ``TaskResultDoesNotExist`` for an unknown id or a record no longer kept."""
        queue, _, rest = str(result_id).partition("/")
        path, _, random = rest.rpartition("/")
        if not queue or not path or len(random) != _RANDOM_DIGITS:
            raise TaskResultDoesNotExist(result_id)
        if self.queues and queue not in self.queues:
            raise TaskResultDoesNotExist(result_id)
        record = self._handle(queue).job(result_id)
        if record is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result_of(record, self._task(path))

    def _task(self, path: str) -> Task:
        task = self._tasks.get(path)
        if task is None:
            found = import_string(path)
            if not isinstance(found, Task):
                raise TypeError(f"{path} is not a Django task (decorate it with @task)")
            self._tasks[path] = task = found
        return task

    def _result_of(self, record: JobRecord, task: Task) -> TaskResult:
        stored = record.result if isinstance(record.result, dict) else {}
        errors = []
        if record.error is not None and record.state in ("failed", "dead", "cancelled"):
            class_path = _class_path(record.error.type, record.error.message)
            errors.append(
                TaskError(exception_class_path=class_path, traceback=record.error.traceback)
            )
        # A record counts attempts, not who ran them: one entry per attempt, the last one the
        # worker that finished it when the record says.
        ran_by = [self.alias] * record.attempts
        if ran_by and isinstance(stored.get("worker"), str):
            ran_by[-1] = stored["worker"]
        result = TaskResult(
            task=task,
            id=record.id,
            status=_STATUS.get(record.state, TaskResultStatus.READY),
            enqueued_at=_when(record.enqueued_at),
            started_at=_when(record.started_at),
            last_attempted_at=_when(record.started_at),
            finished_at=_when(record.finished_at),
            args=stored.get("args", []),
            kwargs=stored.get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=ran_by,
        )
        if record.state == "succeeded":
            object.__setattr__(result, "_return_value", stored.get("value"))
        return result

    # -- the worker ----------------------------------------------------------------------

    def worker(
        self, queues: Sequence[str] = (), concurrency: int | None = None
    ) -> varmq.ResultWorker[Any, Any]:
        """A result worker running this backend's tasks from ``queues`` (every queue of
        ``QUEUES`` when none is named); not started (``varmq.run`` starts it)."""
        names = list(queues) or sorted(self.queues)
        unknown = [name for name in names if self.queues and name not in self.queues]
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] has no queue {unknown[0]!r} (QUEUES: {sorted(self.queues)})"
            )
        options: dict[str, Any] = {"retry": self.retry, "auto_run": False}
        if self.timeout is not None:
            options["timeout"] = self.timeout
        worker = varmq.new_result_worker(
            self._run,
            concurrency or self.concurrency or os.cpu_count() or 1,
            name=f"django-{self.alias}",
            **options,
        )
        for name in names:
            worker.with_distributed_priority_queue(self.storage_queue(name))
        return worker

    def _run(self, job: varmq.Job[dict[str, Any]]) -> dict[str, Any]:
        """Run one stored call: Django's connections closed around it, as Django requires of
        long-running processes (a database restarted meanwhile is reconnected to)."""
        close_old_connections()
        try:
            data = job.data
            task = self._task(data["task"])
            args, kwargs = list(data.get("args", [])), dict(data.get("kwargs", {}))
            try:
                if task.takes_context:
                    context = TaskContext(task_result=self._running(job, task, args, kwargs))
                    value = task.call(context, *args, **kwargs)
                else:
                    value = task.call(*args, **kwargs)
            except Exception as exc:
                raise TaskRaised(module_path(type(exc)), exc) from exc
            return {
                "value": normalize_json(value),
                "args": args,
                "kwargs": kwargs,
                "worker": self.worker_id,
            }
        finally:
            close_old_connections()

    def _running(
        self, job: varmq.Job[Any], task: Task, args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult:
        """The ``TaskResult`` a ``takes_context`` task sees: running, on its attempt."""
        now = _now()
        return TaskResult(
            task=task,
            id=job.id,
            status=TaskResultStatus.RUNNING,
            enqueued_at=None,
            started_at=now,
            last_attempted_at=now,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[self.alias] * (job.attempt - 1) + [self.worker_id],
        )


def _class_path(kept_type: str, message: str) -> str:
    """The exception class path of a failed run: what :class:`TaskRaised` put in its message,
    else the class name the record kept (a timeout, a cancel: varmq's own errors)."""
    if kept_type == TaskRaised.__name__:
        return message.partition(":")[0]
    known = {"JobTimeoutError", "JobCancelledError", "UnknownTaskError"}
    return f"varmq.{kept_type}" if kept_type in known else kept_type


def _now() -> datetime:
    return datetime.now(timezone.utc) if settings.USE_TZ else datetime.now()


def _when(seconds: float | None) -> datetime | None:
    if seconds is None:
        return None
    if settings.USE_TZ:
        return datetime.fromtimestamp(seconds, timezone.utc)
    return datetime.fromtimestamp(seconds)
