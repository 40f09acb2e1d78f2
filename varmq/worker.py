"""Workers: the public control surface (lifecycle, waits, gauges) and queue binding.

The machinery lives elsewhere: :mod:`varmq.scheduler` (state and job selection),
:mod:`varmq.executor` (threads or an event loop) and :mod:`varmq.maintenance` (polls and
lease renewals). A worker object wires them together and is what users hold.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from types import TracebackType
from typing import Any, Generic, TypeVar

from . import registry
from .binding import MemoryBinding, StorageBinding
from .errors import RunningWorkerError
from .executor import AsyncRunner, ThreadRunner
from .group import (
    EnqueuedErrGroupJob,
    EnqueuedGroupJob,
    EnqueuedResultGroupJob,
)
from .job import EnqueuedErrJob, EnqueuedJob, EnqueuedResultJob, Job
from .maintenance import Maintenance
from .metrics import Metrics
from .retry import Retry
from .scheduler import DEAD, FAILED, OK, RETRIED, Scheduler, State, Status
from .sources import MemorySource, StorageJob, StorageSource
from .strategies import Strategy

__all__ = ["BaseWorker", "ErrWorker", "ResultWorker", "Worker", "cpu_count"]

log = logging.getLogger("varmq.worker")

T = TypeVar("T")
R = TypeVar("R")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)

ErrorHandler = Callable[[Any, BaseException], None]

_LAST_RANK = sys.maxsize


def cpu_count() -> int:
    """Logical CPUs; what a concurrency of 0 or less means."""
    return os.cpu_count() or 1


def _no_id() -> str:
    return ""


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
    ) -> None:
        if not callable(fn):
            raise TypeError(f"job function must be callable, got {type(fn).__name__}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        if idle_worker_expiry < 0:
            raise ValueError(f"idle_worker_expiry must be >= 0, got {idle_worker_expiry!r}")
        self._fn = fn
        self._name = name or ""
        self._next_id = job_id_generator or _no_id
        self._error_handler = error_handler
        self._to_json = payload_encoder
        self._retry = retry
        self._poison_limit = max(1, poison_limit)
        self._retention = stopped_retention
        self._stopped_at: float | None = None
        self._errors: queue.Queue[BaseException] = queue.Queue(maxsize=max(1, max_errors))
        self._errors_lock = threading.Lock()
        self._handler_failed = False
        self._sched = Scheduler(
            concurrency=concurrency if concurrency > 0 else cpu_count(),
            strategy=Strategy(strategy),
            idle_expiry=float(idle_worker_expiry),
            min_idle_ratio=min(max(int(min_idle_worker_ratio), 1), 100),
            poll_interval=float(poll_interval),
            decode=payload_decoder,
            prefetch=None if prefetch is None else max(0, prefetch),
        )
        label = self._name or f"worker@{id(self):x}"
        self._label = label
        self._maintenance = Maintenance(self._sched, label, self._report)
        self._is_async = _is_coroutine_function(fn)
        self._runner: ThreadRunner | AsyncRunner
        if self._is_async:
            self._runner = AsyncRunner(self._sched, label, fn, self._after_run)
        else:
            self._runner = ThreadRunner(self._sched, label, fn, self._after_run)
        self._sched.on_stopped = self._on_stopped
        self._sched.on_taken = self._maintenance.track
        if auto_run:
            self.start()

    # -- the job function ------------------------------------------------------------------

    def _after_run(
        self, job: Job[Any], error: BaseException | None, defer: Executor | None = None
    ) -> int:
        """Settle a finished run: report, then acknowledge, retry or dead-letter.

        With ``defer``, a successful storage job's acknowledgement is queued and any flush
        it needs runs on that executor, so the caller (an event loop) never blocks.
        """
        if error is not None:
            self._report(error)
        if isinstance(job, StorageJob):
            if defer is not None and error is None:
                self._maintenance.forget(job)
                job.source.ack_soon(job, defer)
                return OK
            return self._settle_stored(job, error)
        if error is None:
            return OK
        retry = self._retry
        origin = getattr(job, "_origin", None)
        if retry is None or not isinstance(job, EnqueuedJob) or origin is None:
            return FAILED
        if retry.should_retry(error, job.attempt):
            job._back_to_queue()
            origin.shelf.delay(job, time.monotonic() + retry.delay(job.attempt - 1))
            self._maintenance.start()
            self._maintenance.poke()
            return RETRIED
        origin.shelf.bury(job, error)
        return DEAD

    def _settle_stored(self, job: StorageJob, error: BaseException | None) -> int:
        self._maintenance.forget(job)
        source = job.source
        retry = self._retry
        if error is None or retry is None or not (source.nackable and source.buries):
            source.ack(job)
            return OK if error is None else FAILED
        if retry.should_retry(error, job.attempt):
            source.retry(job, retry.delay(job.attempt))
            self._maintenance.poke()
            return RETRIED
        source.bury(job.id, job.ack_id, f"{type(error).__name__}: {error}")
        return DEAD

    def _delayed(self) -> None:
        """A job was put on hold in this process: the timer must run to bring it back."""
        if self._sched.state is State.ACTIVE:
            self._maintenance.start()
        self._maintenance.poke()

    def _report(self, exc: BaseException) -> None:
        with self._errors_lock:
            if self._errors.full():
                with contextlib.suppress(queue.Empty):
                    self._errors.get_nowait()
            self._errors.put_nowait(exc)
        handler = self._error_handler
        if handler is None:
            return
        try:
            handler(self, exc)
        except Exception:
            if not self._handler_failed:
                self._handler_failed = True
                log.exception("error_handler of worker %s raised; the error is contained", self)

    def _on_stopped(self) -> None:
        # Called under the scheduler lock when the worker reaches Stopped.
        self._stopped_at = registry.now()
        self._maintenance.stop()

    def _stopped_for(self) -> float | None:
        stopped_at = self._stopped_at
        if stopped_at is None or self._sched.state is not State.STOPPED:
            return None
        return registry.now() - stopped_at

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start an initiated or stopped worker; it takes jobs at once."""
        sched = self._sched
        if self._name:
            registry.register(self)
        with sched.lock:
            sched.start_locked()
            self._stopped_at = None
            self._runner.start_locked()
            sched.wake_locked()
            spawns = sched.take_spawns_locked()
            timed = bool(sched.storage_sources) or any(
                isinstance(s, MemorySource) and s.shelf.delayed() for s in sched.sources
            )
        if spawns:
            sched.spawn(spawns)
        if timed:
            self._maintenance.start()

    def pause(self) -> None:
        """Stop taking new jobs; running jobs finish (Pausing, then Paused)."""
        self._sched.pause()

    def resume(self) -> None:
        """Take jobs again after a pause."""
        self._sched.resume()

    def stop(self) -> None:
        """Stop taking jobs; returns at once. Running jobs finish; queued jobs are kept."""
        with self._sched.lock:
            self._sched.stop_locked()

    def restart(self) -> None:
        """Stop, wait until stopped, and start again; queued jobs are kept."""
        sched = self._sched
        with sched.lock:
            sched.stop_locked()
            generation = sched.generation
        sched.wait_for(lambda: sched.state is State.STOPPED or sched.generation != generation, None)
        with sched.lock:
            if sched.generation != generation:
                raise RunningWorkerError()
        self.start()

    def tune_pool(self, concurrency: int) -> None:
        """Change the concurrency of a running worker (0 or less: the CPU count)."""
        sched = self._sched
        with sched.lock:
            sched.tune_locked(concurrency if concurrency > 0 else cpu_count())
            spawns = sched.take_spawns_locked()
        if spawns:
            sched.spawn(spawns)

    # -- waits --------------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the queues are drained and nothing runs (paused/stopped: nothing runs)."""
        sched = self._sched

        def settled() -> bool:
            state = sched.state
            if state is State.INITIATED:
                return True
            if sched.in_flight or sched.buffered or sched.acks_pending():
                return False
            return state is not State.ACTIVE or sched.queues_empty_locked()

        return sched.wait_for(settled, timeout)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Wait until the worker is Idle with empty queues."""
        sched = self._sched
        return sched.wait_for(
            lambda: (
                sched.state is State.ACTIVE and sched.in_flight == 0 and sched.queues_empty_locked()
            ),
            timeout,
        )

    def wait_until_paused(self, timeout: float | None = None) -> bool:
        """Wait until the worker is Paused."""
        sched = self._sched
        return sched.wait_for(lambda: sched.state is State.PAUSED, timeout)

    def wait_until_stopped(self, timeout: float | None = None) -> bool:
        """Wait until the worker is Stopped."""
        sched = self._sched
        return sched.wait_for(lambda: sched.state is State.STOPPED, timeout)

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

    def wait_and_stop(self, timeout: float | None = None) -> bool:
        """Wait for the queues to drain, then stop; ``False`` (not stopped) on timeout."""
        if not self.wait(timeout):
            return False
        self.stop()
        return True

    def __enter__(self) -> BaseWorker[T, H, G]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._sched.state is State.INITIATED:
            return
        if exc_type is None:
            self.wait()
        self.stop_and_wait()

    # -- state and gauges ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The name given at creation ("" if none)."""
        return self._name

    @property
    def status(self) -> Status:
        """The current :class:`Status`."""
        return self._sched.status()

    @property
    def is_running(self) -> bool:
        return self.status is Status.RUNNING

    @property
    def is_idle(self) -> bool:
        return self.status is Status.IDLE

    @property
    def is_active(self) -> bool:
        """Running or Idle."""
        return self._sched.state is State.ACTIVE

    @property
    def is_paused(self) -> bool:
        return self._sched.state is State.PAUSED

    @property
    def is_stopped(self) -> bool:
        return self._sched.state is State.STOPPED

    @property
    def metrics(self) -> Metrics:
        """Job counters of this process (see :class:`Metrics`)."""
        return self._sched.metrics

    @property
    def num_pending(self) -> int:
        """Jobs waiting: in every bound queue, plus jobs taken from storage not yet started."""
        return sum(source.waiting() for source in list(self._sched.sources))

    @property
    def num_processing(self) -> int:
        """Jobs running now."""
        sched = self._sched
        with sched.lock:
            return sched.in_flight - sched.reserved

    @property
    def num_concurrency(self) -> int:
        """The concurrency limit."""
        return self._sched.concurrency

    @property
    def num_idle_workers(self) -> int:
        """Idle threads waiting for work (async workers: free slots)."""
        sched = self._sched
        if self._is_async:
            return max(sched.concurrency - sched.in_flight, 0)
        return len(sched.idle)

    def queue_stats(self) -> list[dict[str, Any]]:
        """Per bound queue: name, kind and counts (from the storage, for storage queues).

        Each dict has ``name``, ``kind`` (``"fifo"`` or ``"priority"``), ``storage``
        (``"memory"`` or the adapter's type), ``waiting``, ``in_flight``, ``delayed``,
        ``dead`` and ``oldest_age`` (seconds; 0 for in-memory queues).
        """
        rows: list[dict[str, Any]] = []
        for source in list(self._sched.sources):
            if isinstance(source, MemorySource):
                stats = source.stats()
                kind = "priority" if source.prioritised else "fifo"
                where = "memory"
            else:
                assert isinstance(source, StorageSource)
                stats = source.stats()
                kind = "priority" if source.prioritised else "fifo"
                where = type(source.storage).__module__.split(".")[0]
            rows.append({"name": source.label, "kind": kind, "storage": where, **stats})
        return rows

    def errs(self) -> queue.Queue[BaseException]:
        """Reported errors, oldest first; bounded, the oldest are dropped on overflow."""
        return self._errors

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._label} {self.status.value}>"


class Worker(BaseWorker[T, EnqueuedJob[T], EnqueuedGroupJob], StorageBinding[T]):
    """A worker whose job function returns nothing; it can also bind storage queues."""


class ErrWorker(BaseWorker[T, EnqueuedErrJob[T], EnqueuedErrGroupJob]):
    """A worker whose job function may raise; the exception is the job's error."""

    _job_class = EnqueuedErrJob
    _group_class = EnqueuedErrGroupJob
    _group_wants = "errs"


class ResultWorker(
    BaseWorker[T, EnqueuedResultJob[T, R], EnqueuedResultGroupJob[R]], Generic[T, R]
):
    """A worker whose job function returns a value (or raises)."""

    _job_class = EnqueuedResultJob
    _group_class = EnqueuedResultGroupJob
    _group_wants = "results"
