"""The worker's one timer thread: storage polls, back-off ends, due delayed jobs, timeouts,
recurring jobs.

It runs while a started worker has a bound queue that needs time to pass
(:meth:`~varmq.sources.base.Source.needs_timer`: storage queues always, in-memory queues while
they hold delayed jobs). It is the only place in the core that acts because time passed; what to do
at a given time is each source's business:

- a running plain job whose timeout passed is failed with :class:`~varmq.JobTimeoutError` and
  settled by its source (its ``cancelled`` event set, its lease no longer renewed), while its
  thread keeps running the function until it returns (see :meth:`Timer.watch`); a job
  cancelled by id while it runs (:meth:`Timer.cancel`) is settled the same way, at once, with
  :class:`~varmq.JobCancelledError`;
- :meth:`~varmq.sources.base.Source.tick_locked`: an in-memory queue moves its due delayed and
  retried jobs into line; a storage queue last found empty is looked at again every
  ``poll_interval`` seconds (so jobs added by other processes are found even when no
  notification arrives), and again when its back-off after an error ends or a job this process
  delayed or gave back falls due;
- the worker's recurring jobs (:class:`Due`, made by :mod:`varmq.api.schedules`): while the
  worker is active, each schedule's due occurrence is handed to the producer threads
  (:mod:`varmq.engine.pools`) to add, and the timer wakes at the next one (on the wall clock:
  occurrences are the same times in every process).

Lease renewals are not its work: each storage queue renews the leases of the jobs it handed out
on a thread of its own (:class:`~varmq.sources.leases.LeaseRenewer`), so that a storage that
hangs (a frozen Redis, a locked SQLite file) never delays the renewals of another.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..model import tracing
from ..model.errors import JobCancelledError, JobTimeoutError
from ..model.jobs import Job
from ..model.retry import Outcome
from ..model.states import State
from ..sources.base import Source
from .pools import producer_pool

if TYPE_CHECKING:
    from .dispatch import Dispatcher

log = logging.getLogger("varmq.worker")

__all__ = ["Due", "Overrun", "Timer", "Watch"]

# Schedules are looked at this long after an occurrence's time: the wall clock and the
# monotonic one the timer sleeps on drift apart a little.
_LATE = 0.001


class Due(Protocol):
    """A recurring job, as the timer fires it (:class:`varmq.Schedule`)."""

    @property
    def name(self) -> str:
        """Its name, unique among the worker's schedules."""
        ...

    def due(self, now: float) -> float | None:
        """The occurrence to fire at ``now`` (Unix seconds), or ``None``."""
        ...

    def next_after(self, now: float) -> float:
        """When (Unix seconds) the next occurrence after ``now`` is."""
        ...

    def fire(self, when: float) -> None:
        """Add the occurrence at ``when`` (on a producer thread)."""
        ...


class Watch:
    """A running job with a timeout (``None`` for one cancelled by id that had none), watched by
    the timer until its function returns."""

    __slots__ = ("deadline", "job", "source", "timeout")

    def __init__(self, source: Source, job: Job[Any], timeout: float | None) -> None:
        self.source = source
        self.job = job
        self.timeout = timeout
        self.deadline = math.inf if timeout is None else time.monotonic() + timeout


class Overrun:
    """A plain function still running after its job was settled at its timeout (``timeout``)
    or cancelled by id (``timeout`` ``None``): since when (``since``, monotonic), until its
    function returns. Made only for such runs."""

    __slots__ = ("job", "label", "since", "timeout")

    def __init__(self, job: Job[Any], label: str, timeout: float | None, since: float) -> None:
        self.job = job  # kept alive, so that its id is not reused while it is a key
        self.label = label
        self.timeout = timeout
        self.since = since


class Timer:
    """Timer thread of one worker; started with the worker, ends when it stops."""

    def __init__(self, dispatch: Dispatcher, name: str) -> None:
        self._dispatch = dispatch
        self._name = name
        # Guards _running, _thread, _watches, _planned, _poked and _waiting; _cv is notified when
        # something may be due earlier than the thread planned to wake (at _planned). _poked
        # keeps a poke that came while the thread was busy (not waiting) from being lost.
        self._cv = threading.Condition(threading.Lock())
        self._running = False
        self._thread: threading.Thread | None = None
        # Running jobs with a timeout, by id of their Watch: at most the concurrency of them.
        self._watches: dict[int, Watch] = {}
        # Running jobs without a timeout that may be cancelled by id (every job of a queue with
        # job records), by id of the job: only cancel() looks at them, so the thread never
        # wakes for them. Item assignment and pop of a dict are atomic, so tracking a job
        # takes no lock, and the pop that finds it decides who settles the job when its
        # function returns while a cancel comes.
        self._cancellable: dict[int, Job[Any]] = {}
        # The runs settled early (at their timeout, or cancelled by id while they ran) whose
        # function still runs, by id of the job: added when the watch or the tracked job is
        # taken away to settle it, removed when the function returns (unwatch, untrack), both
        # under _cv, so that an entry never outlives its function. What hard_timeout measures.
        self._overruns: dict[int, Overrun] = {}
        # The worker's recurring jobs, in the order they were declared.
        self._schedules: list[Due] = []
        self._planned = 0.0
        self._poked = False
        self._waiting = False

    def watch(self, source: Source, job: Job[Any], timeout: float) -> Watch:
        """Fail ``job`` (just started) if it still runs ``timeout`` seconds from now; until
        then, :meth:`cancel` can settle it too."""
        entry = Watch(source, job, timeout)
        with self._cv:
            self._watches[id(entry)] = entry
            if self._running and (not self._waiting or entry.deadline < self._planned):
                self._poked = True  # busy: it looks again before it sleeps; waiting: woken
                self._cv.notify_all()
        if not self._running:
            self.start()
        return entry

    def add_schedule(self, schedule: Due) -> None:
        """Fire ``schedule`` from now on (while the worker is active)."""
        with self._cv:
            self._schedules.append(schedule)
            self._poked = True
            self._cv.notify_all()

    def remove_schedule(self, schedule: Due) -> bool:
        """Stop firing ``schedule``; whether it was there."""
        with self._cv:
            if schedule not in self._schedules:
                return False
            self._schedules.remove(schedule)
            return True

    def schedules(self) -> list[Due]:
        """The schedules it fires."""
        with self._cv:
            return list(self._schedules)

    def _fire_due(self, now: float) -> float | None:
        """Hand the due occurrences of every schedule to the producer threads; the monotonic
        time of the next one (``None``: no schedule)."""
        with self._cv:
            schedules = list(self._schedules)
        if not schedules:
            return None
        if self._dispatch.state is not State.ACTIVE:
            return now + self._dispatch.poll_interval  # paused: nothing fires, look again later
        wall = time.time()
        next_wall = math.inf
        for schedule in schedules:
            when = schedule.due(wall)
            if when is not None:
                producer_pool().submit(schedule.fire, when)
            next_wall = min(next_wall, schedule.next_after(wall))
        return now + max(next_wall - wall, 0.0) + _LATE  # never a moment early

    def unwatch(self, entry: Watch) -> bool:
        """The job's function returned: ``False`` if its timeout passed first (it is settled)."""
        with self._cv:
            if self._watches.pop(id(entry), None) is not None:
                return True
            self._overruns.pop(id(entry.job), None)
            return False

    def track(self, job: Job[Any]) -> None:
        """``job`` (just started, without a timeout) may be cancelled by id while it runs:
        until :meth:`untrack`, :meth:`cancel` can settle it."""
        self._cancellable[id(job)] = job  # kept alive, so its id is not reused meanwhile

    def untrack(self, job: Job[Any]) -> bool:
        """The tracked ``job``'s function returned: ``False`` if a cancel settled it first."""
        if self._cancellable.pop(id(job), None) is not None:
            return True
        with self._cv:  # the cancel that took it added its overrun under _cv: it is there now
            self._overruns.pop(id(job), None)
        return False

    def oldest_overrun(self) -> Overrun | None:
        """The run settled early whose function has run on the longest since (``None``: no
        function runs past its timeout or cancel)."""
        with self._cv:
            return min(self._overruns.values(), key=lambda o: o.since, default=None)

    def cancel(self, source: Source, job: Job[Any], running: bool = True) -> bool:
        """Settle the watched ``job`` now as cancelled by id, as a timeout would (its
        ``cancelled`` event set, its thread left to finish the function); whether it was
        watched (running, and not settled yet). ``running``: whether its function started."""
        entry: Watch | None
        with self._cv:
            if self._cancellable.pop(id(job), None) is not None:
                entry = Watch(source, job, None)
            else:
                entry = next((w for w in self._watches.values() if w.job is job), None)
                if entry is None:
                    return False
                del self._watches[id(entry)]
            if running:
                self._overruns[id(job)] = Overrun(job, source.label, None, time.monotonic())
        self._settle_early(entry, JobCancelledError(job.id, running=running), timed_out=False)
        return True

    def _expire(self, now: float) -> float | None:
        """Fail the watched jobs whose timeout passed; the next deadline, if any."""
        with self._cv:
            due = [w for w in self._watches.values() if w.deadline <= now]
            for entry in due:
                del self._watches[id(entry)]
                self._overruns[id(entry.job)] = Overrun(
                    entry.job, entry.source.label, entry.timeout, entry.deadline
                )
            later = min((w.deadline for w in self._watches.values()), default=None)
        for entry in due:
            assert entry.timeout is not None
            error = JobTimeoutError(entry.job.id, entry.source.label, entry.timeout)
            self._settle_early(entry, error, timed_out=True)
        return None if later == math.inf else later

    def _settle_early(self, entry: Watch, error: BaseException, timed_out: bool) -> None:
        """Settle a job whose function still runs, with ``error``; its slot is given back when
        the function returns."""
        job, source = entry.job, entry.source
        job._request_cancel()
        settled: Outcome | None
        try:
            outcome = settled = source.settle(job, None, error)
        except Exception:
            log.exception("varmq: settling stopped job %r of %r failed", job.id, source.label)
            outcome, settled = Outcome.FAILED, None
        tracing.end_attempt(job, error, settled)  # observed: ended at its settle, not its return
        with self._dispatch.lock:
            self._dispatch.timed_out_locked(outcome, timed_out)

    def start(self) -> None:
        with self._cv:
            if self._running:
                return
            self._running = True
            thread = threading.Thread(
                target=self._main, name=f"varmq:{self._name}:timer", daemon=True
            )
            self._thread = thread
        thread.start()

    def stop(self) -> None:
        """Ask the thread to end; safe to call under the dispatcher lock (it never joins)."""
        with self._cv:
            self._running = False
            self._cv.notify_all()

    def poke(self) -> None:
        """Something may be due sooner than planned: recompute."""
        with self._cv:
            self._poked = True
            self._cv.notify_all()

    def _main(self) -> None:
        dispatch = self._dispatch
        while True:
            with self._cv:
                if not self._running:
                    return
                self._poked = False
            now = time.monotonic()
            next_due = min(self._tick(now), now + dispatch.poll_interval)
            if self._watches:
                deadline = self._expire(now)
                if deadline is not None:
                    next_due = min(next_due, deadline)
            if self._schedules:
                occurrence = self._fire_due(now)
                if occurrence is not None:
                    next_due = min(next_due, occurrence)
            with self._cv:
                if not self._running:
                    return
                if self._poked:
                    continue  # poked while it worked: what it planned may be too late
                self._planned = next_due
                delay = next_due - time.monotonic()
                if delay > 0:
                    self._waiting = True
                    self._cv.wait(delay)
                    self._waiting = False

    def _tick(self, now: float) -> float:
        """Let every source see the time and wake the worker for those that became ready;
        returns the earliest time any of them is due again."""
        dispatch = self._dispatch
        poll = dispatch.poll_interval
        next_due = now + poll
        woke = False
        with dispatch.lock:
            if dispatch.state is State.STOPPED:
                return next_due
            for source in dispatch.sources:
                ready, due = source.tick_locked(now, poll)
                woke = woke or ready
                if due is not None:
                    next_due = min(next_due, due)
            if woke:
                dispatch.wake_locked()
        dispatch.spawn_pending()
        return next_due
