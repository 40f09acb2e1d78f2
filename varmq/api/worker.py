"""Workers: what users hold. The control surface (lifecycle, waits, gauges, errors), their
options (:class:`WorkerOptions`), and workers found by name (:func:`get_worker`).

A worker wires the machinery together at construction and then stays out of the way of the
jobs: :mod:`varmq.engine` (state, slots, the step, the threads or event loop that run jobs, the
timer), :mod:`varmq.sources` (taking from and settling with each bound queue),
:mod:`varmq.api.binding` (``bind_*``, ``with_*``) and :mod:`varmq.api.schedules` (``schedule``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypedDict, TypeVar

from typing_extensions import Self

from ..engine.async_runner import AsyncRunner
from ..engine.dispatch import Dispatcher
from ..engine.thread_runner import ThreadRunner
from ..engine.timer import Timer
from ..engine.waits import wait_for, wait_for_async
from ..model import validate
from ..model.errors import AcknowledgeJobError, RunningWorkerError
from ..model.groups import (
    EnqueuedErrGroupJob,
    EnqueuedGroupJob,
    EnqueuedResultGroupJob,
    Group,
)
from ..model.jobs import EnqueuedErrJob, EnqueuedJob, EnqueuedResultJob, FailedJob, Job
from ..model.metrics import Metrics
from ..model.retry import Retry
from ..model.states import State, Status
from ..model.strategy import Strategy
from ..model.tracing import task_of
from ..sources.base import Source
from ..sources.registration import WorkerRecords
from .binder import Binder
from .binding import MemoryBinding, StorageBinding
from .handles import JobMaker, Producer, no_id
from .queues import PriorityQueue
from .registry import Registry, now
from .schedules import Schedule, check_data, check_storage
from .storage_queues import (
    DistributedPriorityQueue,
    DistributedQueue,
    PersistentPriorityQueue,
    PersistentQueue,
)
from .unsettled import UnsettledLog

__all__ = [
    "BaseWorker",
    "ErrWorker",
    "ErrorHandler",
    "ResultWorker",
    "Worker",
    "WorkerOptions",
    "get_worker",
    "workers",
]

log = logging.getLogger("varmq.worker")

T = TypeVar("T")
R = TypeVar("R")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)


ErrorHandler = (
    Callable[["BaseWorker[Any, Any, Any]", BaseException], None]
    | Callable[["BaseWorker[Any, Any, Any]", BaseException, "FailedJob | None"], None]
)
"""``error_handler(worker, exc)`` or ``error_handler(worker, exc, job)``: called with every error
the worker reports; a handler with a third parameter also gets the :class:`~varmq.FailedJob`
whose function raised ``exc`` (``None`` for errors of the storage path)."""


class WorkerOptions(TypedDict, total=False):
    """Every keyword option of ``new_worker``, ``new_err_worker`` and ``new_result_worker``.

    See ``docs/workers.md`` for what each does and its default.
    """

    name: str | None
    auto_run: bool
    strategy: Strategy
    job_id_generator: Callable[[], str] | None
    error_handler: ErrorHandler | None
    idle_worker_expiry: float
    min_idle_worker_ratio: int
    poll_interval: float
    payload_decoder: Callable[[Any], Any] | None
    payload_encoder: Callable[[Any], Any] | None
    max_errors: int
    stopped_retention: float
    retry: Retry | None
    poison_limit: int
    prefetch: int | None
    log_failures: bool
    timeout: float | None
    hard_timeout: float | None
    on_startup: Callable[[], object] | None
    on_shutdown: Callable[[], object] | None


def _is_coroutine_function(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


class BaseWorker(MemoryBinding[T, H, G]):
    """What every worker kind offers: control, waits, gauges, in-memory queues."""

    _job_class: type[EnqueuedJob[Any]] = EnqueuedJob
    _group_class: type[EnqueuedGroupJob] = EnqueuedGroupJob
    _group_wants = ""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        concurrency: int = 1,
        *,
        name: str | None = None,
        auto_run: bool = True,
        strategy: Strategy = Strategy.PRIORITY,
        job_id_generator: Callable[[], str] | None = None,
        error_handler: ErrorHandler | None = None,
        idle_worker_expiry: float = 0.0,
        min_idle_worker_ratio: int = 1,
        poll_interval: float = 1.0,
        payload_decoder: Callable[[Any], Any] | None = None,
        payload_encoder: Callable[[Any], Any] | None = None,
        max_errors: int = 1024,
        stopped_retention: float = 60.0,
        retry: Retry | None = None,
        poison_limit: int = 5,
        prefetch: int | None = None,
        log_failures: bool = True,
        timeout: float | None = None,
        hard_timeout: float | None = None,
        on_startup: Callable[[], object] | None = None,
        on_shutdown: Callable[[], object] | None = None,
    ) -> None:
        validate.job_function(fn)
        limit = validate.concurrency("concurrency", concurrency)
        validate.instance("name", name, str)
        validate.instance("auto_run", auto_run, bool, none_ok=False)
        picking = validate.strategy(strategy)
        for option, hook in (
            ("on_startup", on_startup),
            ("on_shutdown", on_shutdown),
            ("job_id_generator", job_id_generator),
            ("error_handler", error_handler),
            ("payload_decoder", payload_decoder),
            ("payload_encoder", payload_encoder),
        ):
            validate.optional_callable(option, hook)
        expiry = validate.seconds("idle_worker_expiry", idle_worker_expiry)
        ratio = validate.whole("min_idle_worker_ratio", min_idle_worker_ratio)
        poll = validate.seconds("poll_interval", poll_interval, positive=True)
        validate.whole("max_errors", max_errors, minimum=1)
        validate.seconds("stopped_retention", stopped_retention)
        validate.instance("retry", retry, Retry)
        validate.instance("log_failures", log_failures, bool, none_ok=False)
        if timeout is not None:
            timeout = validate.seconds("timeout", timeout, positive=True)
        if hard_timeout is not None:
            hard_timeout = validate.seconds("hard_timeout", hard_timeout, positive=True)
        validate.whole("poison_limit", poison_limit, minimum=1)
        if prefetch is not None:
            validate.whole("prefetch", prefetch, minimum=0)
        self._name = name or ""
        # Read by varmq.run: how far past its timeout a plain function may run before the
        # process ends itself (see varmq.ops.service).
        self._hard_timeout = hard_timeout
        self._on_startup = on_startup
        self._on_shutdown = on_shutdown
        # True while on_shutdown runs (guarded by the dispatcher's lock): a wait for the stop
        # also waits for it.
        self._hook_running = False
        # Set once, before start, by varmq.run: then the hook waits for every worker it runs.
        self._shutdown_hook_held = False
        self._error_handler = error_handler
        self._handler_takes_job = validate.takes_job(error_handler)
        self._log_failures = log_failures
        self._retention = stopped_retention
        self._stopped_at: float | None = None
        self._errors: queue.Queue[BaseException] = queue.Queue(maxsize=max_errors)
        self._errors_lock = threading.Lock()
        self._handler_failed = False
        label = self._name or f"worker@{id(self):x}"
        self._label = label
        self._unsettled_log = UnsettledLog(log, label)
        self._is_async = _is_coroutine_function(fn)

        def make_runner(dispatch: Dispatcher) -> ThreadRunner | AsyncRunner:
            if self._is_async:
                return AsyncRunner(dispatch, label, fn, timeout)
            return ThreadRunner(dispatch, label, fn, timeout, lambda: self._timer)

        self._dispatch = Dispatcher(
            concurrency=limit,
            strategy=picking,
            idle_expiry=expiry,
            # Clamped like upstream's WithMinIdleWorkerRatio: 0 means 1, above 100 means 100.
            min_idle_ratio=min(max(ratio, 1), 100),
            poll_interval=poll,
            prefetch=prefetch,
            make_runner=make_runner,
            on_stopped=self._on_stopped,
            name=label,
        )
        self._timer = Timer(self._dispatch, label)
        producer = Producer(
            job_id_generator or no_id, payload_encoder, self._dispatch, self._wake_timer
        )
        # Its records in the stores of its storage queues, seen by store.workers() anywhere.
        self._worker_records = WorkerRecords(self._name, self._record_counts)
        self._binder: Binder[H, G] = Binder(
            dispatch=self._dispatch,
            producer=producer,
            # The job class itself makes the jobs: one call per add, not two.
            jobs=JobMaker(self._job_class, self._new_group),  # type: ignore[arg-type]
            report=self._report,
            retry=retry,
            decode=payload_decoder,
            poison_limit=poison_limit,
            wake_timer=self._wake_timer,
            thread_name=f"varmq:{label}",
            cancel_running=self._cancel_running,
            outcomes=self._group_wants,
            worker_records=self._worker_records,
        )
        if auto_run:
            self.start()

    # -- what the binds build --------------------------------------------------------------

    def _new_group(self, size: int) -> tuple[Group, Callable[[Group, list[Any]], G]]:
        group = Group(size, self._group_wants)
        cls = self._group_class

        def wrap(g: Group, jobs: list[Any]) -> G:
            handle: G = cls(g, jobs)  # type: ignore[assignment]
            return handle

        return group, wrap

    def _cancel_running(self, source: Source, job: Job[Any]) -> None:
        """A job of ``source`` was cancelled by id: stop it if it runs (a job not started yet is
        settled as cancelled when a slot reaches it)."""
        self._dispatch.runner.cancel(source, job)

    def _wake_timer(self) -> None:
        """Something was put on hold or leased: the timer must run, and may be due sooner."""
        if self._dispatch.state is State.ACTIVE:
            self._timer.start()
        self._timer.poke()

    def _report(self, exc: BaseException, job: FailedJob | None = None) -> None:
        """Report ``exc``: to ``errs()``, the error handler and, for a failed job or a failed
        settle (the job runs again: ``unacknowledged``), the log."""
        if isinstance(exc, AcknowledgeJobError):
            self._dispatch.count_unacknowledged()
            self._unsettled_log.warn(exc)
        if job is not None and self._log_failures:
            log.warning(
                "job %r of queue %r failed on attempt %d: %s: %s",
                job.id,
                job.queue,
                job.attempt,
                type(exc).__name__,
                exc,
                # An error the worker made (a timeout) has no traceback: the message says all.
                exc_info=(type(exc), exc, exc.__traceback__) if exc.__traceback__ else None,
                extra=_job_fields(job),
            )
        with self._errors_lock:
            if self._errors.full():
                with contextlib.suppress(queue.Empty):
                    self._errors.get_nowait()
            self._errors.put_nowait(exc)
        handler = self._error_handler
        if handler is None:
            return
        try:
            if self._handler_takes_job:
                handler(self, exc, job)  # type: ignore[call-arg]
            else:
                handler(self, exc)  # type: ignore[call-arg]
        except Exception:
            if not self._handler_failed:
                self._handler_failed = True
                log.exception("error_handler of worker %s raised; the error is contained", self)

    def _on_stopped(self) -> None:
        # Called under the dispatcher lock when the worker reaches Stopped.
        self._stopped_at = now()
        self._timer.stop()
        for source in self._dispatch.sources:
            source.worker_stopped()
        hook = None if self._shutdown_hook_held else self._on_shutdown
        records = self._worker_records.stopping()  # their removal is owed
        if hook is not None or records:
            # Not under the lock, and not in a thread that runs jobs: a thread of its own.
            self._hook_running = True
            threading.Thread(
                target=self._run_shutdown_hook,
                args=(hook, records),
                name=f"varmq:{self._label}:shutdown",
                daemon=True,
            ).start()

    def _record_counts(self) -> tuple[int, int, int, int]:
        """What its records in stores say: concurrency, running, completed, failed."""
        metrics = self._dispatch.metrics
        return self.num_concurrency, self.num_processing, metrics.completed, metrics.failed

    def _hold_shutdown_hook(self) -> Callable[[], object] | None:
        """For :func:`varmq.run`: ``on_shutdown`` no longer runs when this worker stops; the
        hook is returned for the caller to run once every worker sharing the process stopped
        (a store one worker's hook closes may still hold another's jobs)."""
        self._shutdown_hook_held = True
        return self._on_shutdown

    def _run_shutdown_hook(self, hook: Callable[[], object] | None, records: bool = False) -> None:
        """Remove the worker's records from stores (``records``), then run ``hook``."""
        try:
            if records:
                self._worker_records.remove_all()
            if hook is not None:
                hook()
        except Exception as exc:
            log.exception("varmq: the on_shutdown hook of worker %s raised", self._label)
            self._report(exc)
        finally:
            with self._dispatch.lock:
                self._hook_running = False
                self._dispatch.notify_locked()

    def _stopped_for(self) -> float | None:
        stopped_at = self._stopped_at
        if stopped_at is None or self._dispatch.state is not State.STOPPED:
            return None
        return now() - stopped_at

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start an initiated or stopped worker; it takes jobs at once.

        ``on_startup`` (a worker option) runs first, in the calling thread; if it raises, the
        worker does not start and the exception propagates.
        """
        dispatch = self._dispatch
        dispatch.check_process()
        with dispatch.lock:
            if dispatch.state not in (State.INITIATED, State.STOPPED):
                raise dispatch.state_error()
        wait_for(dispatch, lambda: not self._hook_running, None)  # the last on_shutdown
        if self._on_startup is not None:
            self._on_startup()
        if self._name:
            _REGISTRY.register(self)
        with dispatch.lock:
            dispatch.start_locked()
            self._stopped_at = None
            timed = dispatch.needs_timer()
        self._worker_records.started()
        dispatch.spawn_pending()
        if timed or self._timer.schedules():
            self._timer.start()

    def pause(self) -> None:
        """Stop taking new jobs; running jobs finish (Pausing, then Paused)."""
        self._dispatch.check_process()
        self._dispatch.pause()

    def resume(self) -> None:
        """Take jobs again after a pause (and fire the latest missed occurrence of each
        schedule, once)."""
        self._dispatch.check_process()
        self._dispatch.resume()
        if self._timer.schedules():
            self._timer.poke()

    def stop(self) -> None:
        """Stop taking jobs. Running jobs finish; queued jobs are kept.

        Jobs taken from storage ahead of a free slot (the prefetch) and not started go back to
        their storage at once, where the storage can take them back (``release``), so another
        consumer gets them without waiting for their leases; this is the only wait of
        ``stop()``, one storage call per job. Otherwise they run before the worker stops.
        """
        dispatch = self._dispatch
        dispatch.check_process()
        with dispatch.lock:
            handed = dispatch.stop_locked()
        dispatch.hand_back(handed)

    def restart(self) -> None:
        """Stop, wait until stopped, and start again; queued jobs are kept."""
        dispatch = self._dispatch
        dispatch.check_process()
        with dispatch.lock:
            handed = dispatch.stop_locked()
            generation = dispatch.generation
        dispatch.hand_back(handed)
        wait_for(
            dispatch,
            lambda: dispatch.state is State.STOPPED or dispatch.generation != generation,
            None,
        )
        with dispatch.lock:
            if dispatch.generation != generation:
                raise RunningWorkerError()
        self.start()

    def tune_pool(self, concurrency: int) -> None:
        """Change the concurrency of a running worker (0: the CPU count)."""
        limit = validate.concurrency("tune_pool(concurrency)", concurrency)
        dispatch = self._dispatch
        with dispatch.lock:
            dispatch.tune_locked(limit)
        dispatch.spawn_pending()

    # -- recurring jobs -------------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        *,
        every: float | None = None,
        cron: str | None = None,
        data: Any = None,
        queue: Any = None,
    ) -> Schedule:
        """Add a job to ``queue`` at every occurrence of ``every`` (seconds) or ``cron`` (an
        expression, in UTC; needs ``pip install 'varmq[cron]'``), with ``data``, while the worker
        is active; returns the :class:`~varmq.Schedule` (``cancel()`` ends it).

        Each occurrence's job id is ``f"{name}:{occurrence}"`` (the occurrence's UTC time in ISO
        8601), so every process that declares the schedule adds the same ids and the queue
        stores each once: the job runs once however many consumers run, with no leader. On a
        storage queue that needs job records (``keep_results``, at least the period), so that
        an occurrence that already ran is not added again (``ValueError`` otherwise). After the
        worker was stopped or paused, only the latest missed occurrence fires, once.
        ``every=`` occurrences are multiples of ``every`` seconds since the Unix epoch.

        ``queue`` is a handle bound to this worker, or any storage handle (a producer-only one
        too); ``None`` means the worker's one bound queue.
        """
        handle = self._schedule_queue(name, queue)
        producer = getattr(handle, "_producer", None)
        made = Schedule(
            name,
            every=every,
            cron=cron,
            data=data,
            queue=handle,
            add=_adder(handle, data, name),
            report=self._report,
            on_cancel=self._unschedule,
        )
        if any(s.name == name for s in self._timer.schedules()):
            raise ValueError(f"varmq: worker {self._label} already has a schedule {name!r}")
        if isinstance(handle, _STORAGE_HANDLES):
            check_data(name, data, producer.to_json if producer is not None else None)
            check_storage(made, handle._storage, time.time())
        self._timer.add_schedule(made)
        self._wake_timer()
        return made

    def _schedule_queue(self, name: str, queue: Any) -> Any:
        if queue is not None:
            if not callable(getattr(queue, "add", None)):
                raise TypeError(
                    f"varmq: schedule {name!r}: queue must be a queue handle, got {queue!r}"
                )
            return queue
        bound = self._binder.handles
        if len(bound) != 1:
            raise ValueError(
                f"varmq: schedule {name!r}: worker {self._label} has {len(bound)} bound queues; "
                "say which one with queue="
            )
        return bound[0]

    def _unschedule(self, schedule: Schedule) -> None:
        self._timer.remove_schedule(schedule)

    # -- waits --------------------------------------------------------------------------------
    #
    # Each wait is a condition on the dispatcher's state, evaluated under its lock: the blocking
    # waits sleep on its condition variable, the ``*_async`` ones on futures of the caller's
    # event loop (never blocking it).

    def _drained_locked(self) -> bool:
        dispatch = self._dispatch
        state = dispatch.state
        if state is State.INITIATED:
            return True
        if dispatch.busy_locked() or dispatch.buffer or dispatch.acks_pending():
            return False
        return state is not State.ACTIVE or dispatch.queues_empty_locked()

    def _idle_locked(self) -> bool:
        dispatch = self._dispatch
        return (
            dispatch.state is State.ACTIVE
            and dispatch.busy_locked() == 0
            and dispatch.queues_empty_locked()
        )

    def _paused_locked(self) -> bool:
        return self._dispatch.state is State.PAUSED

    def _stopped_locked(self) -> bool:
        return self._dispatch.state is State.STOPPED and not self._hook_running

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the queues are drained and nothing runs (paused/stopped: nothing runs)."""
        return wait_for(self._dispatch, self._drained_locked, timeout)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Wait until the worker is Idle with empty queues."""
        return wait_for(self._dispatch, self._idle_locked, timeout)

    def wait_until_paused(self, timeout: float | None = None) -> bool:
        """Wait until the worker is Paused."""
        return wait_for(self._dispatch, self._paused_locked, timeout)

    def wait_until_stopped(self, timeout: float | None = None) -> bool:
        """Wait until the worker is Stopped (and its ``on_shutdown`` hook has returned)."""
        return wait_for(self._dispatch, self._stopped_locked, timeout)

    async def wait_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait`, without blocking the event loop."""
        return await wait_for_async(self._dispatch, self._drained_locked, timeout)

    async def wait_until_idle_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait_until_idle`, without blocking the event loop."""
        return await wait_for_async(self._dispatch, self._idle_locked, timeout)

    async def wait_until_paused_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait_until_paused`, without blocking the event loop."""
        return await wait_for_async(self._dispatch, self._paused_locked, timeout)

    async def wait_until_stopped_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait_until_stopped`, without blocking the event loop."""
        return await wait_for_async(self._dispatch, self._stopped_locked, timeout)

    def pause_and_wait(self, timeout: float | None = None) -> bool:
        """Pause, then wait until Paused."""
        self.pause()
        return self.wait_until_paused(timeout)

    def wait_and_pause(self, timeout: float | None = None) -> bool:
        """Wait for the queues to drain, then pause; ``False`` (not paused) on timeout."""
        if not self.wait(timeout):
            return False
        self.pause()
        return True

    def stop_and_wait(self, timeout: float | None = None) -> bool:
        """Stop, then wait until Stopped: running jobs finish and acknowledge first."""
        self.stop()
        return self.wait_until_stopped(timeout)

    async def stop_async(self, timeout: float | None = None) -> bool:
        """Stop, then wait until Stopped, without blocking the event loop.

        Jobs taken ahead of a free slot are handed back to their storage on a thread, since
        that is storage I/O; ``False`` when ``timeout`` ran out first.
        """
        dispatch = self._dispatch
        dispatch.check_process()
        with dispatch.lock:
            handed = dispatch.stop_locked()
        if handed:
            await asyncio.get_running_loop().run_in_executor(None, dispatch.hand_back, handed)
        return await self.wait_until_stopped_async(timeout)

    def wait_and_stop(self, timeout: float | None = None) -> bool:
        """Wait for the queues to drain, then stop; ``False`` (not stopped) on timeout."""
        if not self.wait(timeout):
            return False
        self.stop()
        return True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._dispatch.state is State.INITIATED:
            return
        if exc_type is None:
            self.wait()
        self.stop_and_wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leave an ``async with`` block: drained and stopped (only stopped when it raised)."""
        if self._dispatch.state is State.INITIATED:
            return
        if exc_type is None:
            await self.wait_async()
        await self.stop_async()

    async def serve(self) -> None:
        """Run the worker on the running event loop until it is stopped.

        The worker's ``async def`` jobs run on this loop, so they can use the clients the
        application created on it (an ``httpx.AsyncClient``, a database pool); plain job
        functions keep running on the worker's threads. Starts the worker if it is not running
        (make it with ``auto_run=False``: a worker already running its own loop raises
        :class:`RunningWorkerError`) and returns once it stopped (``await worker.stop_async()``
        from elsewhere, or :func:`varmq.run_async`).
        """
        dispatch = self._dispatch
        dispatch.check_process()
        loop = asyncio.get_running_loop()
        with dispatch.lock:
            if dispatch.state not in (State.INITIATED, State.STOPPED):
                raise RunningWorkerError(
                    f"worker {self._label} is already running (on its own event loop): make "
                    "it with auto_run=False to serve it on yours"
                )
        runner = dispatch.runner
        if isinstance(runner, AsyncRunner):
            runner.host_on(loop)
        self.start()
        await self.wait_until_stopped_async()

    # -- state and gauges ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The name given at creation ("" if none)."""
        return self._name

    @property
    def status(self) -> Status:
        """The current :class:`Status`."""
        return self._dispatch.status()

    @property
    def is_running(self) -> bool:
        return self.status is Status.RUNNING

    @property
    def is_idle(self) -> bool:
        return self.status is Status.IDLE

    @property
    def is_active(self) -> bool:
        """Running or Idle."""
        return self._dispatch.state is State.ACTIVE

    @property
    def is_paused(self) -> bool:
        return self._dispatch.state is State.PAUSED

    @property
    def is_stopped(self) -> bool:
        return self._dispatch.state is State.STOPPED

    @property
    def metrics(self) -> Metrics:
        """Job counters of this process (see :class:`Metrics`)."""
        return self._dispatch.metrics

    @property
    def num_pending(self) -> int:
        """Jobs waiting: in every bound queue, plus jobs taken from storage not yet started."""
        return sum(_waiting_or_zero(source) for source in list(self._dispatch.sources))

    @property
    def num_processing(self) -> int:
        """Jobs running now (those past their timeout whose function still runs included)."""
        dispatch = self._dispatch
        with dispatch.lock:
            return dispatch.in_flight - dispatch.reserved

    @property
    def num_running_past_timeout(self) -> int:
        """Plain functions still running after their job was settled at its timeout (or
        cancel): a thread cannot be stopped, so they run until they return. A stopped worker
        does not wait for them; :func:`varmq.run` does, within its grace."""
        dispatch = self._dispatch
        with dispatch.lock:
            return dispatch.abandoned

    def _oldest_overrun(self) -> tuple[str, str, float | None, float] | None:
        """The plain function that has run the longest past its job's timeout (or cancel) and
        still runs: ``(job id, queue, timeout or None for a cancel, seconds past it)``;
        ``None`` when no function runs past its timeout."""
        overrun = self._timer.oldest_overrun()
        if overrun is None:
            return None
        seconds = max(time.monotonic() - overrun.since, 0.0)
        return overrun.job.id, overrun.label, overrun.timeout, seconds

    def _longest_overrun(self) -> float:
        """Seconds the oldest function still running past its timeout (or cancel) has run
        past it; 0.0 when none does."""
        oldest = self._oldest_overrun()
        return 0.0 if oldest is None else oldest[3]

    def _give_back_running(self, acks: float = 1.0) -> tuple[int, int]:
        """For :func:`varmq.run` ending the process (``hard_timeout``), the worker stopped:
        hand the jobs of its storage queues that are taken and not settled (running, or
        waiting for a slot) back to their storage to be taken again at once, where it can,
        then give the acknowledgements on their way up to ``acks`` seconds to be sent;
        ``(handed back, left to their leases)``. Their functions are not stopped: the process
        ends under them."""
        dispatch = self._dispatch
        handed = left = 0
        for source in list(dispatch.sources):
            given, kept = source.give_back_running()
            handed += given
            left += kept
        deadline = time.monotonic() + acks
        while dispatch.acks_pending() and time.monotonic() < deadline:
            time.sleep(0.01)
        return handed, left

    @property
    def num_concurrency(self) -> int:
        """The concurrency limit."""
        return self._dispatch.concurrency

    @property
    def num_idle_workers(self) -> int:
        """Idle threads waiting for work (async workers: free slots)."""
        dispatch = self._dispatch
        if self._is_async:
            return max(dispatch.concurrency - dispatch.in_flight, 0)
        return len(dispatch.idle)

    def queue_stats(self) -> list[dict[str, Any]]:
        """Per bound queue: name, kind and counts (from the storage, for storage queues).

        Each dict has ``name``, ``kind`` (``"fifo"`` or ``"priority"``), ``storage``
        (``"memory"`` or the adapter's package), ``waiting``, ``in_flight``, ``delayed``,
        ``dead`` and ``oldest_age`` (seconds; 0 for in-memory queues), ``reachable`` and
        ``error``: a storage that cannot answer gives ``reachable=False``, its error, and
        ``None`` for the counts. While durations are observed
        (``metrics.observe_durations()``), also ``oldest_running_age`` (seconds).
        """
        now = time.monotonic() if self._dispatch.metrics.observing else None
        return [source.describe(now) for source in list(self._dispatch.sources)]

    def errs(self) -> queue.Queue[BaseException]:
        """Reported errors, oldest first; bounded, the oldest are dropped on overflow."""
        return self._errors

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._label} {self.status.value}>"


_STORAGE_HANDLES = (
    PersistentQueue,
    PersistentPriorityQueue,
    DistributedQueue,
    DistributedPriorityQueue,
)


def _job_fields(job: FailedJob) -> dict[str, Any]:
    """The fields a structured log line about ``job`` carries (varmq.ops.json_logs)."""
    return {
        "varmq_queue": job.queue,
        "varmq_job_id": job.id,
        "varmq_attempt": job.attempt,
        "varmq_task": task_of(job.data),
    }


def _adder(handle: Any, data: Any, name: str) -> Callable[[str, float], object]:
    """What adds the occurrence (job id, time) of schedule ``name`` with ``data`` to
    ``handle``, refusals raised (``strict``): through the storage's schedule marks where it
    keeps them."""
    priority = (
        0
        if isinstance(handle, PriorityQueue | PersistentPriorityQueue | DistributedPriorityQueue)
        else None
    )
    occurrence = getattr(handle, "_add_occurrence", None)
    if occurrence is not None:
        return lambda job_id, when: occurrence(data, priority, job_id, name, when)
    if priority is not None:
        return lambda job_id, when: handle.add(data, priority, job_id=job_id, strict=True)
    return lambda job_id, when: handle.add(data, job_id=job_id, strict=True)


def _waiting_or_zero(source: Any) -> int:
    try:
        return int(source.waiting())
    except Exception:  # a storage that cannot answer: counted as nothing known to wait
        return 0


class Worker(BaseWorker[T, EnqueuedJob[T], EnqueuedGroupJob], StorageBinding[T]):
    """A worker whose job function returns nothing; it can also bind storage queues."""


class ErrWorker(BaseWorker[T, EnqueuedErrJob[T], EnqueuedErrGroupJob], StorageBinding[T]):
    """A worker whose job function may raise; the exception is the job's error.

    It binds storage queues that keep job records (``keep_results``): the exception is recorded
    there, for ``handle.result_of(job_id)`` in any process.
    """

    _job_class = EnqueuedErrJob
    _group_class = EnqueuedErrGroupJob
    _group_wants = "errs"


class ResultWorker(
    BaseWorker[T, EnqueuedResultJob[T, R], EnqueuedResultGroupJob[R]],
    StorageBinding[T],
    Generic[T, R],
):
    """A worker whose job function returns a value (or raises).

    It binds storage queues that keep job records (``keep_results``): the value (JSON) or the
    exception is recorded there, for ``handle.result_of(job_id)`` in any process.
    """

    _job_class = EnqueuedResultJob
    _group_class = EnqueuedResultGroupJob
    _group_wants = "results"


# The process's workers by name (made with name=, registered when they start).
_REGISTRY: Registry[BaseWorker[Any, Any, Any]] = Registry()


def get_worker(name: str) -> BaseWorker[Any, Any, Any] | None:
    """The worker registered as ``name`` (made with ``name=``, started), or ``None``."""
    return _REGISTRY.get(name)


def workers() -> dict[str, BaseWorker[Any, Any, Any]]:
    """A snapshot of every registered worker, by name."""
    return _REGISTRY.all()
