"""A bound queue as the worker's dispatcher sees it: the :class:`Source` interface, and the
in-memory kind.

Every queue bound to a worker is wrapped in one source. Under the dispatcher's lock
(:mod:`varmq.dispatch`), a source says whether it has work (:meth:`Source.ready_locked`) and
plans the next step for a free slot (:meth:`Source.plan_locked`): run a job it hands over at
once, or take a batch outside the lock (:meth:`Source.take`) when taking needs I/O. Every run
ends in :meth:`Source.settle`, where the source applies the outcome that
:func:`varmq.retry.after_failure` decided (acknowledge, hand back for a later attempt,
dead-letter) and completes the job's handle. The timer (:mod:`varmq.timer`) gives a source the
passing of time (:meth:`Source.tick_locked`, :meth:`Source.renew_leases`).

Two kinds exist: :class:`MemorySource` here, whose storage holds the worker's own job objects,
and :class:`~varmq.storage_source.StorageSource`, whose storage holds JSON envelopes and leases
what it hands out. Nobody outside these two modules asks which kind a source is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from . import envelope
from .errors import FailedToCastJobError, ParseJobError
from .job import Job, as_handle, cancel_waiting
from .protocols import QueueStats
from .queues import (
    GIL,
    DeadLetters,
    DelayedJobs,
    MemoryPriorityQueue,
    MemoryQueue,
    TakenJobs,
)
from .retry import Outcome, Retry, after_failure

__all__ = ["Decode", "MemorySource", "Report", "Source", "Step"]

Report = Callable[[BaseException], None]
Decode = Callable[[Any], Any]


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
        on_delayed: Callable[[], None],
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
        self.running = 0
        self.buffered = 0

    # -- selection (under the dispatcher's lock) -----------------------------------------

    def signalled_locked(self) -> None:
        """Someone says a job was added to the storage."""

    def ready_locked(self, now: float) -> bool:
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

    def renew_leases(self, now: float) -> float | None:
        """Renew the leases that are due (outside the lock); the next renewal time, if any."""
        return None

    # -- operators -----------------------------------------------------------------------

    def stats(self) -> QueueStats:
        """Counts of this queue: waiting, in flight, delayed, dead and the oldest age."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """One row of ``Worker.queue_stats()``."""
        return {
            "name": self.label,
            "kind": "priority" if self.prioritised else "fifo",
            "storage": self.storage_label,
            **self.stats(),
        }


class MemorySource(Source):
    """A queue holding the worker's job objects; taking is cheap, done under the lock.

    Delayed jobs (``add(delay=)`` and retries) wait in :attr:`delayed` until the timer moves them
    into the queue; jobs out of attempts go to :attr:`dead`; job handles taken and not settled
    are recorded in :attr:`taken`. A queue loaded from a snapshot hands its delayed jobs and
    dead letters over here when it is bound.
    """

    taken: TakenJobs

    def __init__(self, storage: Any, *, poison_limit: int = 5, **options: Any) -> None:
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

    def ready_locked(self, now: float) -> bool:
        return len(self.storage) > 0

    def plan_locked(self, free: int, room: int) -> tuple[Step, Any] | None:
        job = self.take_now()
        return None if job is None else (Step.RUN, job)

    def take_now(self) -> Job[Any] | None:
        """Take the next runnable job, skipping cancelled ones; ``None`` when empty."""
        while True:
            item = self.storage.dequeue()
            if item is None:
                return None
            job = self.runnable(item)
            if job is not None:
                self.running += 1
                if job is item:
                    self._taken_jobs[job] = None
                return job

    def runnable(self, item: Any) -> Job[Any] | None:
        """The job to run for ``item`` taken from the storage; ``None`` to skip it.

        A job handle is claimed (skipped if it was cancelled); bytes or str are decoded as a
        JSON envelope; anything else, or bytes that do not decode, is reported and skipped.
        """
        handle = as_handle(item)
        if handle is not None:
            return handle if handle._claim() else None
        if isinstance(item, bytes | bytearray | str):
            try:
                job_id, data = envelope.decode(item)
                if self.decode is not None:
                    data = self.decode(data)
            except Exception as exc:
                self._report(ParseJobError(self.label, "", str(exc)))
                return None
            return Job(job_id, data)
        self._report(FailedToCastJobError(self.label, item))
        return None

    def lock_free_queue(self) -> Any | None:
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
        outcome = Outcome.OK
        if error is not None:
            self._report(error)
            outcome, delay = after_failure(self.retry, error, job.attempt)
            if not job._retryable:
                outcome = Outcome.FAILED  # a job decoded from bytes has no handle to requeue
            elif outcome is Outcome.RETRIED:
                job._back_to_queue()
                self.delayed.add(job, time.monotonic() + delay)
                self._taken_jobs.pop(job, None)  # only once it is among the delayed
                self._on_delayed()
                return outcome
            elif outcome is Outcome.DEAD:
                self.dead.bury(job, error)
        job._complete(value, error)
        self._taken_jobs.pop(job, None)
        return outcome

    def needs_timer(self) -> bool:
        return len(self.delayed) > 0

    def tick_locked(self, now: float, poll: float) -> tuple[bool, float | None]:
        moved = False
        for job in self.delayed.pop_due(now):
            if self.offer(job):
                moved = True
            else:
                # The queue was closed or filled up meanwhile: the job cannot wait any longer.
                cancel_waiting([job])
        return moved, self.delayed.next_due()

    def stats(self) -> QueueStats:
        return {
            "waiting": len(self.storage),
            "in_flight": self.running,
            "delayed": len(self.delayed),
            "dead": len(self.dead),
            "oldest_age": 0.0,
        }
