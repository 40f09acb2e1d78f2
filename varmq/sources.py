"""A bound queue as the worker's dispatcher sees it: the :class:`Source` interface, and the
in-memory kind.

Every queue bound to a worker is wrapped in one source. Under the dispatcher's lock
(:mod:`varmq.dispatch`), a source says whether it has work (:meth:`Source.ready_locked`) and
plans the next step for a free slot (:meth:`Source.plan_locked`): run a job it hands over at
once, or take a batch outside the lock (:meth:`Source.take`) when taking needs I/O. Every run
ends in :meth:`Source.settle`, where the source applies the outcome that
:func:`varmq.retry.after_failure` decided (acknowledge, hand back for a later attempt,
dead-letter) and completes the job's handle. The timer (:mod:`varmq.timer`) gives a source the
passing of time (:meth:`Source.tick_locked`).

Two kinds exist: :class:`MemorySource` here, whose storage holds the worker's own job objects,
and :class:`~varmq.storage_source.StorageSource`, whose storage holds JSON envelopes and leases
what it hands out. Nobody outside these two modules asks which kind a source is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

from .contract import envelope
from .contract.protocols import QueueStats
from .errors import (
    FailedToCastJobError,
    FailedToDequeueError,
    JobCancelledError,
    ParseJobError,
)
from .job import FailedJob, Job, as_handle, cancel_waiting
from .memory_records import JobBook
from .queues import (
    GIL,
    DeadLetters,
    DelayedJobs,
    MemoryPriorityQueue,
    MemoryQueue,
    TakenJobs,
)
from .records import Records
from .retry import Outcome, Retry, after_failure

__all__ = ["CancelRunning", "Decode", "MemorySource", "Report", "Source", "Step"]

log = logging.getLogger("varmq.worker")

Decode = Callable[[Any], Any]
CancelRunning = Callable[["Source", Job[Any]], None]
"""How a source asks its worker to cancel a job of its that runs (as a timeout would)."""


class Report(Protocol):
    """How a source reports an error to its worker (``errs()``, the handler, the log); ``job``
    is given when a job's function raised it."""

    def __call__(self, exc: BaseException, job: FailedJob | None = None) -> None: ...


class Step(Enum):
    """What the dispatcher tells a runner's slot to do next."""

    RUN = 0
    """Run the job given with it."""
    TAKE = 1
    """Take up to the given number of jobs from the given source, outside the lock."""
    PARK = 2
    """Wait until woken."""
    RETIRE = 3
    """Leave: the worker is stopping, or has more threads than it needs."""


# Enum members as module globals, read for every job (see runners.py).
_RUN = Step.RUN
_OK = Outcome.OK

# Back-off after a failed take starts here and doubles up to the poll interval.
_FIRST_BACKOFF = 0.01

# Built-in queues whose dequeue is atomic on its own, so threads may take without the lock.
_LOCK_FREE_QUEUES = (MemoryQueue, MemoryPriorityQueue)


class Source:
    """One bound queue: its storage, name, bind rank, and counts kept by the dispatcher.

    ``running`` and ``buffered`` are guarded by the dispatcher's lock: jobs of this source
    taken and not finished, and those of them waiting in the dispatcher's buffer for a slot.
    """

    #: What ``queue_stats`` reports as the storage of this kind of source.
    storage_label = "memory"
    #: Job handles taken from a lock-free queue and not settled (in-memory sources).
    taken: TakenJobs | None = None
    #: Whether a job of this source may be cancelled while it runs (its queue keeps job
    #: records): the runner then settles it through the timer, as it would at a timeout.
    cancellable = False

    def job_records(self) -> Records:
        """The job records of this queue, for the operator routes (REST, ``varmq job``).

        Raises ``TypeError`` when this kind of queue cannot keep records and ``ValueError`` when
        it was bound or opened without ``keep_results``.
        """
        raise TypeError(f"varmq: queue {self.label!r} keeps no job records")

    def cancelled_here(self, job_id: str) -> None:
        """``job_id`` was just cancelled through this process; a source that holds it running
        stops it now instead of at its next look at storage. Nothing to do by default."""

    def __init__(
        self,
        storage: Any,
        *,
        label: str,
        rank: int,
        index: int,
        prioritised: bool,
        report: Report,
        retry: Retry | None,
        decode: Decode | None,
        poll: float,
        on_delayed: Callable[[], None],
        cancel_running: CancelRunning | None = None,
    ) -> None:
        self.storage = storage
        self.label = label
        self.rank = rank
        self.index = index
        self.prioritised = prioritised
        self.retry = retry
        self.decode = decode
        self._report = report
        self._on_delayed = on_delayed
        self._cancel_running = cancel_running
        self._poll = poll
        self.running = 0
        self.buffered = 0
        # Start times (monotonic) of this source's running jobs, by id of the job: kept only
        # while the worker's durations are observed; for the oldest running job's age.
        self.started: dict[int, float] = {}
        # A take that failed makes the source unready until this monotonic time (0: none).
        self.retry_at = 0.0
        self._backoff = 0.0
        self._failing_since = 0.0

    def _take_failed(self, exc: BaseException) -> None:
        """A take raised: back off (10 ms, doubling up to the poll interval), and report the
        outage once, when it begins (not at every retry)."""
        first = self._backoff == 0.0
        self._backoff = min(max(self._backoff * 2, _FIRST_BACKOFF), self._poll)
        self.retry_at = time.monotonic() + self._backoff
        if first:
            self._failing_since = time.monotonic()
            log.warning(
                "varmq: queue %r: taking jobs failed (%s: %s); retrying every %.2g s at most "
                "until it works again",
                self.label,
                type(exc).__name__,
                exc,
                self._poll,
            )
            self._report(FailedToDequeueError(self.label, exc))
        self._on_delayed()  # the timer looks again when the back-off ends

    def _take_worked(self) -> None:
        if self._backoff:
            log.warning(
                "varmq: queue %r: taking jobs works again after %.1f s",
                self.label,
                time.monotonic() - self._failing_since,
            )
        self._backoff = 0.0
        self.retry_at = 0.0

    # -- selection (under the dispatcher's lock) -----------------------------------------

    def signalled_locked(self) -> None:
        """Someone says a job was added to the storage."""

    def ready_locked(self) -> bool:
        """Whether a take could find a job now."""
        raise NotImplementedError

    def plan_locked(self, free: int, room: int) -> tuple[Step, Any] | None:
        """The step for a free slot: ``(RUN, job)``, ``(TAKE, n)`` or ``None`` (empty).

        ``free`` slots are free now; ``room`` more jobs may be taken ahead for slots that free
        up while these run (the prefetch left).
        """
        raise NotImplementedError

    def take(self, n: int) -> tuple[int, list[Job[Any]]]:
        """Take up to ``n`` jobs outside the lock (after a ``TAKE`` step).

        Returns how many the storage handed out and the jobs that decoded.
        """
        raise NotImplementedError

    def taken_locked(self, n: int, delivered: int, jobs: list[Job[Any]]) -> None:
        """Account a take of up to ``n`` that got ``delivered`` items and ``jobs``."""

    def lock_free_queue(self) -> Any | None:
        """Storage a thread may dequeue from without the dispatcher's lock, if this is one.

        Items dequeued from it go through :meth:`runnable`.
        """
        return None

    def runnable(self, item: Any) -> Job[Any] | None:
        """The job to run for ``item`` dequeued from :meth:`lock_free_queue`; ``None``: skip."""
        raise NotImplementedError

    def length(self) -> int:
        """Jobs waiting in the storage; for the length strategies."""
        raise NotImplementedError

    def waiting(self) -> int:
        """Jobs waiting to start: in the storage, held for a delay, taken and not started."""
        return self.length() + self.buffered

    # -- after a run (outside the lock) --------------------------------------------------

    def _failed(self, job: Job[Any], error: BaseException) -> None:
        """Report a run of ``job`` that raised ``error`` (a job cancelled by id is no error of
        the job's, and is not reported: it is counted ``failed`` all the same)."""
        if isinstance(error, JobCancelledError):
            return
        self._report(error, FailedJob(job.id, self.label, job.attempt, job.data))

    def settle(self, job: Job[Any], value: Any, error: BaseException | None) -> Outcome:
        """Finish one run of ``job``: report its error, apply the outcome, close its handle."""
        raise NotImplementedError

    async def settle_async(
        self, job: Job[Any], value: Any, error: BaseException | None, io: Any
    ) -> Outcome:
        """:meth:`settle` for an event loop: never blocks it (``io`` runs blocking calls)."""
        return self.settle(job, value, error)

    @property
    def pending_acks(self) -> int:
        """Acknowledgements queued and not sent yet; a stopping worker waits for 0."""
        return 0

    # -- time ----------------------------------------------------------------------------

    def needs_timer(self) -> bool:
        """Whether this source needs the worker's timer now (delays, polls, leases)."""
        return False

    def tick_locked(self, now: float, poll: float) -> tuple[bool, float | None]:
        """Let time pass (under the dispatcher's lock): ``(became ready, next due time)``."""
        return False, None

    #: Whether a job taken from this source and never started can be handed back at once.
    can_release = False

    def release(self, job: Job[Any]) -> bool:
        """Hand ``job`` (taken, never started) back to the storage; whether it was."""
        return False

    def expired_locked(self, job: Job[Any], now: float) -> bool:
        """Whether ``job``, taken and waiting in the buffer, lost its lease and must be dropped
        instead of started (and so it is, here)."""
        return False

    def worker_stopped(self) -> None:
        """The worker stopped: end whatever this source runs in the background."""

    # -- operators -----------------------------------------------------------------------

    def stats(self) -> QueueStats:
        """Counts of this queue: waiting, in flight, delayed, dead and the oldest age."""
        raise NotImplementedError

    def describe(self, now: float | None = None) -> dict[str, Any]:
        """One row of ``Worker.queue_stats()``.

        A storage that cannot answer gives ``"reachable": False``, its ``"error"`` and
        ``None`` for every count (never zeros that look like an empty queue). With ``now``
        (durations observed), also ``"oldest_running_age"`` in seconds.
        """
        row: dict[str, Any] = {
            "name": self.label,
            "kind": "priority" if self.prioritised else "fifo",
            "storage": self.storage_label,
        }
        try:
            row.update(self.stats())
            row["reachable"], row["error"] = True, None
        except Exception as exc:
            row.update(dict.fromkeys(("waiting", "in_flight", "delayed", "dead", "oldest_age")))
            row["reachable"], row["error"] = False, f"{type(exc).__name__}: {exc}"
        if now is not None:
            oldest = min(self.started.values(), default=None)
            row["oldest_running_age"] = 0.0 if oldest is None else max(now - oldest, 0.0)
        return row


class MemorySource(Source):
    """A queue holding the worker's job objects; taking is cheap, done under the lock.

    Delayed jobs (``add(delay=)`` and retries) wait in :attr:`delayed` until the timer moves them
    into the queue; jobs out of attempts go to :attr:`dead`; job handles taken and not settled
    are recorded in :attr:`taken`. A queue loaded from a snapshot hands its delayed jobs and
    dead letters over here when it is bound. Bound with ``keep_results``, it keeps job records
    in :attr:`book` (:mod:`varmq.memory_records`); ``None`` otherwise.
    """

    taken: TakenJobs

    def __init__(
        self, storage: Any, *, poison_limit: int = 5, keep_results: float = 0.0, **options: Any
    ) -> None:
        super().__init__(storage, **options)
        #: The worker's poison limit (unused by in-memory jobs, which always decode; saved by
        #: snapshots with the retry policy).
        self.poison_limit = poison_limit
        self.delayed = DelayedJobs()
        self.dead = DeadLetters()
        self.taken = TakenJobs()
        self._taken_jobs = self.taken.jobs  # one attribute less per settled job
        if isinstance(storage, _LOCK_FREE_QUEUES):
            restored = storage.take_restored()
            if restored is not None:
                offset = time.monotonic() - time.time()  # wall-clock due times to monotonic
                self.delayed.add_all((job, due + offset) for due, job in restored.delayed)
                self.dead.keep(restored.dead)
        self.book = JobBook(self, keep_results) if keep_results > 0 else None
        self.cancellable = self.book is not None
        #: Whether the storage is one of the built-in queues, whose takes never raise: a
        #: producer may then give a job straight to a parked thread (Dispatcher.hand_over).
        self.builtin = type(storage) in _LOCK_FREE_QUEUES

    def job_records(self) -> Records:
        if self.book is None:
            raise ValueError(
                f"varmq: queue {self.label!r} keeps no job records: bind it with "
                "keep_results=SECONDS to follow its jobs by id"
            )
        return self.book

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
        """Take the next runnable job, skipping cancelled ones; ``None`` when empty."""
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
                    return job
                continue
            if claimed:
                self.running += 1
                self._taken_jobs[item] = None
                if self.book is not None:
                    self.book.started(item)
                return item  # type: ignore[no-any-return]

    def started_locked(self, job: Job[Any]) -> None:
        """``job``, claimed, goes to a thread without passing through the storage (a
        hand-over to an idle worker, see Dispatcher.hand_over): record it as taken."""
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
                job_id, data, timeout = envelope.decode(item)
                if self.decode is not None:
                    data = self.decode(data)
            except Exception as exc:
                self._report(ParseJobError(self.label, "", str(exc)))
                return None
            job = Job(job_id, data)
            job._set_timeout(timeout)
            return job
        self._report(FailedToCastJobError(self.label, item))
        return None

    def lock_free_queue(self) -> Any | None:
        if self.book is not None:
            return None  # every claim goes through runnable(), where the record hears of it
        # Without the GIL, takers could not record what they took without a lock (TakenJobs).
        return self.storage if GIL and type(self.storage) in _LOCK_FREE_QUEUES else None

    def length(self) -> int:
        return len(self.storage)

    def waiting(self) -> int:
        return len(self.storage) + len(self.delayed)

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
        return {
            "waiting": len(self.storage),
            "in_flight": self.running,
            "delayed": len(self.delayed),
            "dead": len(self.dead),
            "oldest_age": 0.0,
        }
