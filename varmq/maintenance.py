"""The worker's one timer thread: storage polls, back-off ends and lease renewals.

It exists only while a started worker has storage-backed queues. It is the only place in
the core that acts because time passed:

- a storage queue last found empty is looked at again every ``poll_interval`` seconds, so
  jobs added by other processes are found even when no notification arrives;
- a storage queue backing off after an error is retried when its back-off ends;
- delayed and retried jobs of in-memory queues move into their queue when due, and a
  storage queue is looked at when a job this process delayed or gave back becomes due;
- a job whose storage leases it (``ILeaseExtendable``) has its lease renewed every third of
  the lease length while it waits or runs. One timer serves every job: no thread per job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .errors import LeaseLostError
from .scheduler import Scheduler, State
from .sources import MemorySource, StorageJob, StorageSource

__all__ = ["Maintenance"]

# After a renewal that raised (storage unreachable), try again this soon.
_RENEW_RETRY = 1.0


class Maintenance:
    """Timer thread of one worker; started with the worker, ends when it stops."""

    def __init__(
        self, sched: Scheduler, name: str, report: Callable[[BaseException], None]
    ) -> None:
        self._sched = sched
        self._name = name
        self._report = report
        # Guards _leases, _running and _thread; _cv is notified when something may be due
        # earlier than the thread planned to wake.
        self._cv = threading.Condition(threading.Lock())
        self._leases: dict[int, StorageJob] = {}
        self._running = False
        self._thread: threading.Thread | None = None

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
        """Ask the thread to end; safe to call under the scheduler lock (it never joins)."""
        with self._cv:
            self._running = False
            self._cv.notify_all()

    def poke(self) -> None:
        """Something may be due sooner than planned: recompute."""
        with self._cv:
            self._cv.notify_all()

    # -- leases -------------------------------------------------------------------------------

    def track(self, jobs: list[StorageJob]) -> None:
        """Renew the leases of ``jobs`` until :meth:`forget` (called under the sched lock)."""
        now = time.monotonic()
        with self._cv:
            for job in jobs:
                lease = job.source.lease_seconds()
                if lease > 0:
                    job.renew_at = now + lease / 3
                    self._leases[id(job)] = job
            self._cv.notify_all()

    def forget(self, job: StorageJob) -> None:
        if self._leases:
            with self._cv:
                self._leases.pop(id(job), None)

    @property
    def leased(self) -> int:
        return len(self._leases)

    # -- the thread ---------------------------------------------------------------------------

    def _main(self) -> None:
        while True:
            due_leases: list[StorageJob] = []
            with self._cv:
                if not self._running:
                    return
                now = time.monotonic()
                next_due = now + self._sched.poll_interval
                for job in self._leases.values():
                    if job.renew_at <= now:
                        due_leases.append(job)
                    else:
                        next_due = min(next_due, job.renew_at)
            next_due = min(next_due, self._wake_due_sources(now))
            for job in due_leases:
                self._renew(job)
            if due_leases:
                continue
            with self._cv:
                if not self._running:
                    return
                delay = next_due - time.monotonic()
                if delay > 0:
                    self._cv.wait(delay)

    def _wake_due_sources(self, now: float) -> float:
        """Make due queues takeable again and wake the worker; returns the next due time."""
        sched = self._sched
        poll = sched.poll_interval
        next_due = now + poll
        woke = False
        with sched.lock:
            if sched.state is State.STOPPED:
                return next_due
            for source in sched.sources:
                if isinstance(source, MemorySource):
                    if source.promote_due(now):
                        woke = True
                    due = source.shelf.next_due()
                    if due is not None:
                        next_due = min(next_due, due)
                    continue
                assert isinstance(source, StorageSource)
                if source.wake_at:
                    if source.wake_at <= now:
                        source.wake_at = 0.0
                        source.maybe_ready = True
                        woke = True
                    else:
                        next_due = min(next_due, source.wake_at)
                if source.retry_at:
                    if source.retry_at <= now:
                        woke = True
                    else:
                        next_due = min(next_due, source.retry_at)
                elif not source.maybe_ready and not source.taking:
                    due = source.empty_since + poll
                    if due <= now:
                        source.maybe_ready = True
                        woke = True
                    else:
                        next_due = min(next_due, due)
            if woke:
                sched.wake_locked()
            spawns = sched.take_spawns_locked()
        if spawns:
            sched.spawn(spawns)
        return next_due

    def _renew(self, job: StorageJob) -> None:
        lease = job.source.lease_seconds()
        try:
            kept = bool(job.source.storage.extend_lease(job.ack_id))
        except Exception:
            with self._cv:
                job.renew_at = time.monotonic() + min(_RENEW_RETRY, lease / 6)
            return
        with self._cv:
            if id(job) not in self._leases:
                return  # finished meanwhile
            if kept:
                job.renew_at = time.monotonic() + lease / 3
                return
            del self._leases[id(job)]
        self._report(LeaseLostError(job.id, job.ack_id))
