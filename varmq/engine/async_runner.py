"""Where ``async def`` job functions run: :class:`AsyncRunner`, one event loop.

It drives the same :class:`~varmq.engine.dispatch.Dispatcher` step as the threads of
:mod:`varmq.engine.thread_runner`, so concurrency, lifecycle and metrics are identical: one
dispatch coroutine takes jobs while slots are free and starts a task per job, and each run is
settled by its source (:meth:`~varmq.sources.base.Source.settle_async`) before its slot is
released.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..contract import observe
from ..model import tracing
from ..model.errors import JobCancelledError, JobTimeoutError
from ..model.jobs import CURRENT_JOB, Job
from ..model.loops import LOOP_IDENTS, LOOP_THREAD
from ..model.retry import Outcome
from ..model.states import State
from ..sources.base import Source, Step
from .dispatch import Dispatcher, Slot

__all__ = ["AsyncRunner"]

# Enum members as module globals, read for every job (see thread_runner.py).
_RUN, _TAKE, _PARK, _RETIRE = Step.RUN, Step.TAKE, Step.PARK, Step.RETIRE
_STOPPING = State.STOPPING

log = logging.getLogger("varmq.worker")


class AsyncRunner:
    """Runs an ``async def`` job function on one event loop: its own thread's, or the loop of
    the caller of ``Worker.serve()`` (:meth:`host_on`), for one run of the worker.

    One dispatch coroutine takes jobs while slots are free and starts a task per job; storage
    calls (takes, acknowledgements) go to a small thread pool so they never block the loop.
    """

    # The one dispatch coroutine, whatever the concurrency.
    thread_limit: int | None = 1
    # Its dispatch coroutine steps for every job: no job is handed to it with a wake-up.
    takes_handed = False

    def __init__(
        self,
        dispatch: Dispatcher,
        name: str,
        fn: Callable[[Any], Awaitable[Any]],
        timeout: float | None,
    ) -> None:
        self._dispatch = dispatch
        self._name = name
        self._fn = fn
        self._timeout = timeout
        self._slot = Slot()
        # The loop that runs jobs now, and the caller's loop for the next start (serve()).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._host: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._io: ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # The tasks running the functions of jobs that may be cancelled by id, by id of the job;
        # touched only on the loop.
        self._cancellable: dict[int, asyncio.Future[Any]] = {}

    def host_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the jobs of the worker's next start on ``loop`` (the caller's), not a thread."""
        self._host = loop

    def start_locked(self) -> None:
        self._dispatch.thread_added_locked(None)
        host, self._host = self._host, None
        if host is not None:  # serve(): on the caller's loop, which is running this call
            self._prepare(host)
            host.create_task(self._hosted_dispatch())
            return
        ready = threading.Event()
        thread = threading.Thread(
            target=self._thread_main, args=(ready,), name=f"varmq:{self._name}:loop", daemon=True
        )
        thread.start()
        ready.wait()

    def _prepare(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wakeup = asyncio.Event()
        self._io = ThreadPoolExecutor(4, thread_name_prefix=f"varmq:{self._name}:io")

    async def _hosted_dispatch(self) -> None:
        LOOP_THREAD.dispatch = self._dispatch
        ident = threading.get_ident()
        LOOP_IDENTS.add(ident)
        try:
            await self._dispatch_loop()
        finally:
            LOOP_THREAD.dispatch = None
            LOOP_IDENTS.discard(ident)
            assert self._io is not None
            self._io.shutdown(wait=False)  # the loop is the caller's: never block it

    def spawn(self, n: int) -> None:
        return None  # the one loop thread is started with the worker

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._prepare(loop)
        LOOP_THREAD.dispatch = self._dispatch
        LOOP_IDENTS.add(threading.get_ident())
        ready.set()
        try:
            loop.run_until_complete(self._dispatch_loop())
        finally:
            LOOP_IDENTS.discard(threading.get_ident())
            assert self._io is not None
            self._io.shutdown(wait=True)
            loop.close()

    def cancel(self, source: Source, job: Job[Any]) -> bool:
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(self._cancel_on_loop, job)
        except RuntimeError:  # the loop is closed: nothing runs there any more
            return False
        return True

    def _cancel_on_loop(self, job: Job[Any]) -> None:
        task = self._cancellable.get(id(job))
        if task is not None:
            task.cancel()

    def wake(self, slot: Slot) -> None:
        loop, wakeup = self._loop, self._wakeup
        if loop is None or wakeup is None:
            return
        if _running_loop() is loop:
            wakeup.set()
        else:
            loop.call_soon_threadsafe(wakeup.set)

    async def _dispatch_loop(self) -> None:
        dispatch = self._dispatch
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None and self._io is not None
        while True:
            with dispatch.lock:
                if self._wakeup.is_set():
                    self._wakeup.clear()
                    dispatch.woken_locked()
                step, source, arg = dispatch.step_locked(False)
                if step is _RETIRE:
                    if dispatch.in_flight == 0:
                        dispatch.retire_locked()
                        return
                    step = _PARK
                if step is _PARK:
                    dispatch.parked_locked(self._slot)
            if step is _RUN:
                assert source is not None
                self._start(source, arg)
            elif step is _TAKE:
                assert source is not None
                delivered, jobs = await loop.run_in_executor(self._io, source.take, arg)
                with dispatch.lock:
                    job = dispatch.taken_locked(source, arg, delivered, jobs)
                if job is not None:
                    self._start(source, job)
            else:
                await self._wakeup.wait()

    def _start(self, source: Source, job: Job[Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(source, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, source: Source, job: Job[Any]) -> None:
        dispatch = self._dispatch
        extra = job._extra
        timeout = self._timeout if extra is None or extra.timeout is None else extra.timeout
        timed_out = cancelled = False
        ran = True
        started = dispatch.run_started(source, job)
        observer = observe.OBSERVER
        attempt = None if observer is None else tracing.begin_attempt(observer, source.label, job)
        # varmq.current_job(): this task's own context (a copy made when it was created), so
        # the job's function, and the task _run_within makes for it, see this job only.
        current = CURRENT_JOB.set(job)
        try:
            if timeout is None and not source.cancellable:
                value = await self._fn(job)
            else:
                value, timed_out, cancelled, ran = await self._run_within(source, job, timeout)
            error: BaseException | None = None
            if timed_out:
                error = JobTimeoutError(job.id, source.label, timeout)  # type: ignore[arg-type]
            elif cancelled:
                error = JobCancelledError(job.id, running=ran)
        except BaseException as exc:
            value, error = None, exc
        CURRENT_JOB.reset(current)
        if attempt is not None:
            attempt.detach()
        if started:
            dispatch.run_ended(source, job, started)
        settled: Outcome | None
        try:
            outcome = settled = await source.settle_async(job, value, error, self._io)
        except Exception:
            log.exception(
                "varmq: worker %s could not settle job %r of queue %r; its slot is given back "
                "and the storage's lease decides what happens to the job",
                self._name,
                job.id,
                source.label,
            )
            outcome, settled = Outcome.FAILED, None
        if attempt is not None:
            tracing.end_attempt(job, error, settled)
        with dispatch.lock:
            dispatch.finish_locked(source, outcome, timed_out=timed_out)
            if dispatch.in_flight == 0 and dispatch.state is _STOPPING:
                self._wake_dispatcher_locked()

    async def _run_within(
        self, source: Source, job: Job[Any], timeout: float | None
    ) -> tuple[Any, bool, bool, bool]:
        """Run ``job`` for at most ``timeout`` seconds (``None``: no limit) in a task of its
        own: ``(value, timed out, cancelled by id, whether it started)``. At its timeout, or
        when it is cancelled by id (:meth:`cancel`), the task is cancelled (the job sees
        ``CancelledError``)."""
        before = False
        if source.cancellable and not job._cancel_requested() and source.start_check_due(job):
            # It waited since its take: ask the storage, whose answer is atomic with any cancel.
            loop = asyncio.get_running_loop()
            if not await loop.run_in_executor(self._io, source.may_start, job):
                job._request_cancel()
        task = asyncio.ensure_future(self._fn(job))
        if source.cancellable:
            self._cancellable[id(job)] = task
            if job._cancel_requested():
                task.cancel()  # cancelled before it started: it never runs
                before = True
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if done:
                if task.cancelled() and job._cancel_requested():
                    return None, False, True, not before
                return task.result(), False, False, True
            job._request_cancel()
            task.cancel()
            # A job that ignores the cancellation keeps its slot until it ends on its own.
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is None:
                return task.result(), False, False, True  # it finished as it was cancelled
            return None, True, False, True
        finally:
            self._cancellable.pop(id(job), None)

    def _wake_dispatcher_locked(self) -> None:
        self._dispatch.unpark_locked(self._slot)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
