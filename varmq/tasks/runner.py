"""What an app's worker runs on every job: the task the job names, with its arguments rebuilt
(:class:`TaskRunner`), and the counts per task name it keeps for operators
(:class:`TaskCounts`).

A job's data is a task call, ``{"task": name, "args": [...], "kwargs": {...}}``. The runner
looks the name up in the app's registry at every job (a task registered after the worker was
made is found), rebuilds the arguments from the function's annotations, calls it and gives
back the JSON form of its value, which the result worker keeps in the job's record. A name
it does not know fails the job with :class:`~varmq.UnknownTaskError`: never dropped, never
run as something else.

Locks: :class:`TaskCounts` has one lock, ``_lock``, guarding its list of per-thread
counters; it is taken when a thread counts its first run and by ``snapshot``, never while a
task runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from ..model.errors import UnknownTaskError
from ..model.jobs import Job
from ..model.retry import Retry, attach_policy

if TYPE_CHECKING:
    from .task import Task

__all__ = ["TaskCounts", "TaskRunner"]

# A job whose call cannot be rebuilt will not rebuild better next time: straight to the dead
# letters, whatever the task's retry policy.
_NEVER_AGAIN = Retry(max_attempts=1)


class TaskCounts:
    """Runs per task name in this process: ``succeeded``, ``failed`` and the seconds spent, for
    the Prometheus collector (``varmq_task_runs_total``, ``varmq_task_seconds_total``).

    Each thread counts in its own dict (no lock on the path of a job); ``snapshot`` sums them.
    ``_lock`` guards ``_tables``, the list of those dicts, when a thread adds its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: list[tuple[threading.Thread, dict[str, list[float]]]] = []
        self._retired: dict[str, list[float]] = {}  # the counts of threads that ended
        self._local = threading.local()

    def _table(self) -> dict[str, list[float]]:
        table: dict[str, list[float]] = {}
        self._local.table = table
        with self._lock:
            self._tables.append((threading.current_thread(), table))
        return table

    def add(self, name: str, ok: bool, seconds: float) -> None:
        """Count one run of ``name`` that ended (``ok``: it returned)."""
        table = getattr(self._local, "table", None)
        if table is None:
            table = self._table()
        counts = table.get(name)
        if counts is None:
            counts = table[name] = [0.0, 0.0, 0.0]
        counts[0 if ok else 1] += 1
        counts[2] += seconds

    def snapshot(self) -> dict[str, tuple[int, int, float]]:
        """``{name: (succeeded, failed, seconds)}`` now (a run ending meanwhile may be left
        out of it, never counted twice)."""
        with self._lock:
            # Threads that ended count no more: their tables fold into one, so that a pool
            # whose idle threads expire does not grow the list for ever.
            for _thread, table in [entry for entry in self._tables if not entry[0].is_alive()]:
                _merge(self._retired, table)
            self._tables = [entry for entry in self._tables if entry[0].is_alive()]
            totals: dict[str, list[float]] = {}
            _merge(totals, self._retired)
            tables = [table for _, table in self._tables]
        for table in tables:
            _merge(totals, table)
        return {name: (int(c[0]), int(c[1]), c[2]) for name, c in totals.items()}


def _merge(into: dict[str, list[float]], table: dict[str, list[float]]) -> None:
    for name, counts in list(table.items()):
        total = into.setdefault(name, [0.0, 0.0, 0.0])
        for i in range(3):
            total[i] += counts[i]


def _call_of(job: Job[Any]) -> tuple[str, Any, Any]:
    """The task name, args and kwargs a job's data holds; ``ValueError`` for other data."""
    data = job.data
    if type(data) is dict:
        name = data.get("task")
        if type(name) is str:
            return name, data.get("args", ()), data.get("kwargs") or {}
    raise ValueError(
        f"job {job.id!r} is not a task call: its data is not "
        '{"task": name, "args": [...], "kwargs": {...}}'
    )


class TaskRunner:
    """The function of an app's worker: runs the task each job names.

    ``threaded`` runners are given to a plain worker and run an ``async def`` task to its end
    on a fresh event loop in the worker's thread; the others are given to an ``async def``
    worker (every task async) and await it on the worker's loop.
    """

    def __init__(self, tasks: Mapping[str, Task[Any, Any]], counts: TaskCounts) -> None:
        self._tasks = tasks
        self._counts = counts

    def _task(self, job: Job[Any]) -> tuple[Task[Any, Any], tuple[Any, ...], dict[str, Any]]:
        try:
            name, args, kwargs = _call_of(job)
        except ValueError as exc:
            attach_policy(exc, _NEVER_AGAIN)
            raise
        task = self._tasks.get(name)
        if task is None:
            error = UnknownTaskError(name, sorted(self._tasks))
            self._counts.add(name, False, 0.0)
            raise error
        try:
            positional, keywords = task.signature.decode_call(args, kwargs)
        except (TypeError, ValueError) as exc:
            attach_policy(exc, _NEVER_AGAIN)
            self._counts.add(name, False, 0.0)
            raise
        return task, positional, keywords

    def _ended(self, task: Task[Any, Any], started: float, error: BaseException | None) -> None:
        self._counts.add(task.name, error is None, perf_counter() - started)
        if error is not None and task.retry is not None:
            attach_policy(error, task.retry)

    def run(self, job: Job[Any]) -> Any:
        """Run the task ``job`` names, here; the JSON form of what it returned."""
        task, args, kwargs = self._task(job)
        started = perf_counter()
        try:
            if task.is_async:
                value = asyncio.run(task.fn(*args, **kwargs))
            else:
                value = task.fn(*args, **kwargs)
            result = value if value is None else task.signature.encode_result(value)
        except BaseException as exc:
            self._ended(task, started, exc)
            raise
        self._counts.add(task.name, True, perf_counter() - started)
        return result

    async def run_async(self, job: Job[Any]) -> Any:
        """Await the task ``job`` names (every task of this worker is ``async def``)."""
        task, args, kwargs = self._task(job)
        started = perf_counter()
        try:
            value = await task.fn(*args, **kwargs)
            result = task.signature.encode_result(value)
        except BaseException as exc:
            self._ended(task, started, exc)
            raise
        self._ended(task, started, None)
        return result
