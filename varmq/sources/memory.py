"""The in-memory kind of bound queue: :class:`MemorySource`, whose storage holds the worker's own
job objects (a :class:`~varmq.sources.memory_queues.MemoryQueue`, a priority one, or any
``IQueue`` the caller binds).

Taking is cheap and done under the dispatcher's lock, or, for a built-in queue that is the
worker's only one, without it (:mod:`varmq.engine.fastpath`, recorded in
:class:`~varmq.sources.taken.TakenJobs`). What happens after a run is decided by the retry
policy and applied here: the job's handle completes, or waits in :class:`DelayedJobs` for its
next attempt, or goes to :class:`DeadLetters`.
"""

from __future__ import annotations

import time
from typing import Any

from ..contract import envelope
from ..contract.protocols import QueueStats, RateStats
from ..model.errors import FailedToCastJobError, ParseJobError
from ..model.jobs import EnqueuedJob, Job, as_handle, cancel_waiting
from ..model.rates import StartWindow
from ..model.retry import Outcome, after_failure
from .base import Source, SourceSettings, Step
from .memory_queues import DeadLetters, DelayedJobs, MemoryPriorityQueue, MemoryQueue
from .memory_records import JobBook, JobIds
from .taken import GIL, TakenJobs

__all__ = ["MemorySource"]

# Enum members as module globals, read for every job (see engine/thread_runner.py).
_RUN = Step.RUN
_OK = Outcome.OK

# Built-in queues whose dequeue is atomic on its own, so threads may take without the lock.
_LOCK_FREE_QUEUES = (MemoryQueue, MemoryPriorityQueue)


class MemorySource(Source):
    """A queue holding the worker's job objects; taking is cheap, done under the lock.

    Delayed jobs (``add(delay=)`` and retries) wait in :attr:`delayed` until the timer moves them
    into the queue; jobs out of attempts go to :attr:`dead`; job handles taken and not settled
    are recorded in :attr:`taken`. A queue loaded from a snapshot hands its delayed jobs and
    dead letters over here when it is bound. Bound with ``keep_results``, it keeps job records
    in :attr:`book` (:mod:`varmq.sources.memory_records`); ``None`` otherwise. :attr:`ids` holds
    each job id once (the book, or a :class:`~varmq.sources.memory_records.JobIds`): the handles
    ask it before they offer a job with an id.
    """

    taken: TakenJobs

    def __init__(
        self,
        storage: Any,
        settings: SourceSettings,
        *,
        poison_limit: int = 5,
        keep_results: float = 0.0,
        rate_limit: tuple[int, float] | None = None,
    ) -> None:
        super().__init__(storage, settings)
        #: The queue's rate limit (``bind_queue(rate_limit=)``); None: none. Guarded by the
        #: dispatcher's lock, which every take holds.
        self.rate = None if rate_limit is None else StartWindow(*rate_limit)
        #: The worker's poison limit (unused by in-memory jobs, which always decode; saved by
        #: snapshots with the retry policy).
        self.poison_limit = poison_limit
        self.delayed = DelayedJobs()
        self.dead = DeadLetters()
        self.taken = TakenJobs()
        self._taken_jobs = self.taken.jobs  # one attribute less per settled job
        self.book = (
            JobBook(self.label, self._cancel_running_job, keep_results)
            if keep_results > 0
            else None
        )
        self.ids: JobBook | JobIds = JobIds() if self.book is None else self.book
        # What settle tells of a job that closed; a book hears it from the job itself.
        self._ids_release = self.ids.release if isinstance(self.ids, JobIds) else None
        if isinstance(storage, _LOCK_FREE_QUEUES):
            # Jobs already in it (loaded from a snapshot, or put there before binding) hold
            # their ids, as if they had been added through a handle.
            for item in storage.values():
                if isinstance(item, EnqueuedJob) and item.id:
                    self.ids.hold(item)
            restored = storage.take_restored()
            if restored is not None:
                now = time.time()
                for due, job in restored.delayed:
                    if job.id:
                        self.ids.hold(job, due - now)
                offset = time.monotonic() - now  # wall-clock due times to monotonic
                self.delayed.add_all((job, due + offset) for due, job in restored.delayed)
                self.dead.keep(restored.dead)
        self.cancellable = self.book is not None
        # The built-in queues' takes never raise: a producer may then give a job straight to a
        # parked thread (varmq.engine.fastpath.hand_over).
        self.hands_over = type(storage) in _LOCK_FREE_QUEUES and self.rate is None

    def _cancel_running_job(self, job: Job[Any]) -> None:
        """Stop ``job`` (a job of this queue that runs), as its timeout would."""
        if self._cancel_running is not None:
            self._cancel_running(self, job)

    def ready_locked(self) -> bool:
        if self.retry_at and self.retry_at > time.monotonic():
            return False
        try:
            return len(self.storage) > 0
        except Exception as exc:  # a caller's IQueue that fails: reported, backed off
            self._take_failed(exc)
            return False

    def plan_locked(self, free: int, room: int) -> tuple[Step, Any] | None:
        job = self.take_now()
        return None if job is None else (_RUN, job)

    def take_now(self) -> Job[Any] | None:
        """Take the next runnable job, skipping cancelled ones; ``None`` when empty (or, with
        a rate limit, when its window is full: looked at again when it opens)."""
        rate = self.rate
        if rate is not None:
            now = time.monotonic()
            if rate.left(now) <= 0:
                self.retry_at = rate.opens(now)  # not a failure: no back-off, no report
                self._on_delayed()
                return None
        while True:
            try:
                item = self.storage.dequeue()
            except Exception as exc:  # a caller's IQueue that fails: reported, backed off
                self._take_failed(exc)
                return None
            if self.retry_at:
                self._take_worked()
            if item is None:
                return None
            try:
                claimed = item._claim()  # a job handle (as_handle, without its call)
            except AttributeError:
                job = self._decoded(item)
                if job is not None:
                    self.running += 1
                    if rate is not None:
                        rate.started(time.monotonic())
                    return job
                continue
            if claimed:
                if rate is not None:
                    rate.started(time.monotonic())
                self.running += 1
                self._taken_jobs[item] = None
                if self.book is not None:
                    self.book.started(item)
                return item  # type: ignore[no-any-return]

    def started_locked(self, job: Job[Any]) -> None:
        self.running += 1
        self._taken_jobs[job] = None

    def runnable(self, item: Any) -> Job[Any] | None:
        """The job to run for ``item`` taken from the storage; ``None`` to skip it.

        A job handle is claimed (skipped if it was cancelled); bytes or str are decoded as a
        JSON envelope; anything else, or bytes that do not decode, is reported and skipped.
        """
        handle = as_handle(item)
        if handle is not None:
            if not handle._claim():
                return None
            if self.book is not None:
                self.book.started(handle)
            return handle
        return self._decoded(item)

    def _decoded(self, item: Any) -> Job[Any] | None:
        if isinstance(item, bytes | bytearray | str):
            try:
                job_id, data, timeout, trace = envelope.decode(item)
                if self.decode is not None:
                    data = self.decode(data)
            except Exception as exc:
                self._report(ParseJobError(self.label, "", str(exc)))
                return None
            job = Job(job_id, data)
            if timeout is not None:
                job._set_timeout(timeout)
            if trace is not None:
                job._more().trace = trace
            return job
        self._report(FailedToCastJobError(self.label, item))
        return None

    def lock_free_queue(self) -> Any | None:
        if self.book is not None:
            return None  # every claim goes through runnable(), where the record hears of it
        if self.rate is not None:
            return None  # every take goes through take_now(), where the window is kept
        # Without the GIL, takers could not record what they took without a lock (TakenJobs).
        return self.storage if GIL and type(self.storage) in _LOCK_FREE_QUEUES else None

    def length(self) -> int:
        return len(self.storage)

    def waiting(self) -> int:
        delayed = len(self.delayed)
        if delayed and self.cancellable:  # a cancelled delayed job must not keep it busy
            delayed = self.delayed.open_count()
        return len(self.storage) + delayed

    def offer(self, job: Any) -> bool:
        """Put ``job`` in line in the storage, with its priority when the queue has them."""
        if self.prioritised:
            return bool(self.storage.enqueue(job, job._priority))
        return bool(self.storage.enqueue(job))

    def settle(self, job: Job[Any], value: Any, error: BaseException | None) -> Outcome:
        outcome = _OK
        if error is not None:
            self._failed(job, error)
            outcome, delay = after_failure(self.retry, error, job.attempt)
            if not job._retryable:
                outcome = Outcome.FAILED  # a job decoded from bytes has no handle to requeue
            elif outcome is Outcome.RETRIED:
                job._back_to_queue()
                due = time.monotonic() + delay
                if self.book is not None:
                    self.book.retrying(job, due)  # type: ignore[arg-type]
                self.delayed.add(job, due)
                self._taken_jobs.pop(job, None)  # only once it is among the delayed
                self._on_delayed()
                return outcome
            elif outcome is Outcome.DEAD:
                self.dead.bury(job, error)
                if self.book is not None:
                    self.book.dead(job)  # type: ignore[arg-type]
        job._complete(value, error)
        if job.id and self._ids_release is not None:
            self._ids_release(job)  # closed: its id is free (a queue with records keeps it)
        self._taken_jobs.pop(job, None)
        return outcome

    def needs_timer(self) -> bool:
        return len(self.delayed) > 0 or self.retry_at > 0

    def tick_locked(self, now: float, poll: float) -> tuple[bool, float | None]:
        woke = bool(self.retry_at) and self.retry_at <= now  # a back-off is over
        for job in self.delayed.pop_due(now):
            try:
                offered = self.offer(job)
            except Exception as exc:
                self._report(exc)
                offered = False
            if offered:
                woke = True
            else:
                # The queue was closed or filled up meanwhile: the job cannot wait any longer.
                cancel_waiting([job])
        later = [t for t in (self.delayed.next_due(), self.retry_at) if t and t > now]
        return woke, min(later, default=None)

    def stats(self) -> QueueStats:
        stats: RateStats = {
            "waiting": len(self.storage),
            "in_flight": self.running,
            "delayed": len(self.delayed),
            "dead": len(self.dead),
            "oldest_age": 0.0,
        }
        rate = self.rate
        if rate is not None:
            used = rate.used(time.monotonic())
            stats["rate_window_used"] = used
            stats["throttled"] = used >= rate.count and stats["waiting"] > 0
        return stats
