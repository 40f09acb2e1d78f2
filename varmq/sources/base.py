"""A bound queue as the worker's engine sees it: the :class:`Source` interface and the
vocabulary of the step (:class:`Step`).

Every queue bound to a worker is wrapped in one source. Under the dispatcher's lock
(:mod:`varmq.engine.dispatch`), a source says whether it has work (:meth:`Source.ready_locked`)
and plans the next step for a free slot (:meth:`Source.plan_locked`): run a job it hands over
at once, or take a batch outside the lock (:meth:`Source.take`) when taking needs I/O. Every
run ends in :meth:`Source.settle`, where the source applies the outcome that
:func:`varmq.model.retry.after_failure` decided (acknowledge, hand back for a later attempt,
dead-letter) and completes the job's handle. The timer (:mod:`varmq.engine.timer`) gives a
source the passing of time (:meth:`Source.tick_locked`).

Three kinds exist: :class:`~varmq.sources.memory.MemorySource`, whose storage holds the
worker's own job objects; :class:`~varmq.sources.storage.StorageSource`, whose storage holds
JSON envelopes and leases what it hands out; :class:`~varmq.sources.topic.TopicSource`, a topic
subscription's buffer. The engine sees this interface only, never a kind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from ..contract.protocols import QueueStats
from ..model.errors import FailedToDequeueError, JobCancelledError
from ..model.jobs import FailedJob, Job
from ..model.retry import Outcome, Retry
from .taken import TakenJobs

__all__ = ["CancelRunning", "Decode", "Report", "Source", "SourceSettings", "Step"]

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


# Back-off after a failed take starts here and doubles up to the poll interval.
_FIRST_BACKOFF = 0.01


@dataclass(frozen=True)
class SourceSettings:
    """What every kind of source is made with, by the bind (:class:`varmq.api.binder.Binder`).

    ``label`` names the queue in errors and stats; ``rank`` and ``index`` order it among the
    worker's queues (bind ``priority=``, then bind order); ``prioritised``: a priority queue;
    ``report`` tells the worker of an error; ``retry`` is the retry policy, ``decode`` the
    payload decoder; ``poll`` the poll interval; ``on_delayed`` wakes the worker's timer for
    something held back; ``cancel_running`` stops a running job of the source (as its timeout
    would), where jobs can be cancelled by id.
    """

    label: str
    rank: int
    index: int
    prioritised: bool
    report: Report
    retry: Retry | None
    decode: Decode | None
    poll: float
    on_delayed: Callable[[], None]
    cancel_running: CancelRunning | None = None


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
    #: Whether a producer may give a job of this source straight to a parked thread when it is
    #: the worker's only source (the fast path's hand-over: a built-in in-memory queue, whose
    #: takes never raise; see :meth:`started_locked`).
    hands_over = False

    def cancelled_here(self, job_id: str) -> None:
        """``job_id`` was just cancelled through this process; a source that holds it running
        stops it now instead of at its next look at storage. Nothing to do by default."""

    def start_check_due(self, job: Job[Any]) -> bool:
        """Whether ``job`` (of a :attr:`cancellable` source) must be checked with
        :meth:`may_start` before it starts; no I/O. ``False`` by default."""
        return False

    def may_start(self, job: Job[Any]) -> bool:
        """Whether ``job`` may start: ``False`` when it was cancelled meanwhile (a blocking
        call on storage sources). ``True`` by default."""
        return True

    def __init__(self, storage: Any, settings: SourceSettings) -> None:
        self.storage = storage
        self.label = settings.label
        self.rank = settings.rank
        self.index = settings.index
        self.prioritised = settings.prioritised
        self.retry = settings.retry
        self.decode = settings.decode
        self._report = settings.report
        self._on_delayed = settings.on_delayed
        self._cancel_running = settings.cancel_running
        self._poll = settings.poll
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

    def started_locked(self, job: Job[Any]) -> None:
        """``job``, claimed, goes to a thread without passing through the storage (a hand-over
        to an idle worker, when :attr:`hands_over`): record it as taken."""
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

    def give_back_running(self) -> tuple[int, int]:
        """The process is about to end with jobs of this queue still running (a function ran
        past ``hard_timeout``): hand each of them back to the storage, to be taken again at
        once, where it can; ``(handed back, left to their leases)``. In-memory queues have
        nothing to hand back to (their jobs end with the process): ``(0, 0)``."""
        return 0, 0

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
