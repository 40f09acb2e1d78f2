"""The worker's heart: lifecycle state, slots, and the step that hands a job to a slot.

A *slot* is one unit of concurrency: a job holds one from the moment it is taken until it is
closed. Threads (or, for ``async def`` functions, one event loop) ask :meth:`Scheduler.step`
what to do next; it answers "run this job", "take from that storage" (done outside the lock),
"park" or "retire". There is no dispatcher thread between a queue and the thread that runs the
job: a thread takes for itself, so a job costs no thread hand-off.

Everything below the lock line is guarded by ``Scheduler.lock``. Its invariants:

- ``in_flight`` = jobs running + slots reserved for a storage take under way (``reserved``);
  ``in_flight <= concurrency`` except briefly after ``tune_pool`` lowered it.
- ``buffered`` = jobs taken from storage and not started yet, waiting in their source's
  buffer for a free slot; at most ``prefetch`` beyond the slots free at the take. They run
  in every state (their leases are renewed meanwhile): Paused and Stopped wait for them.
- a parked slot is in ``idle`` exactly when its park lock is held and nobody released it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from . import errors
from .metrics import Metrics
from .queues import MemoryPriorityQueue, MemoryQueue
from .sources import MemorySource, Source, StorageJob, StorageSource
from .states import STATUS_OF, State, Status, state_error
from .strategies import Strategy, pick

__all__ = ["Scheduler", "Slot", "State", "Status"]


class Slot:
    """A thread's parking place: its lock is held while the thread waits to be woken."""

    __slots__ = ("park",)

    def __init__(self) -> None:
        self.park = threading.Lock()
        self.park.acquire()


# Steps a thread can be told to take.
RUN, TAKE, PARK, RETIRE = range(4)

# How a run ended, for the counters: returned; raised (final); raised and handed back for
# another attempt; raised and moved to the dead letters.
OK, FAILED, RETRIED, DEAD = range(4)

Decode = Callable[[Any], Any]


class Scheduler:
    """Lifecycle, slot accounting and job selection for one worker."""

    def __init__(
        self,
        *,
        concurrency: int,
        strategy: Strategy,
        idle_expiry: float,
        min_idle_ratio: int,
        poll_interval: float,
        decode: Decode | None,
        prefetch: int | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.metrics = Metrics(self.lock)
        self.strategy = strategy
        self.idle_expiry = idle_expiry
        self.min_idle_ratio = min_idle_ratio
        self.poll_interval = poll_interval
        self.decode = decode
        # Jobs a storage take may fetch beyond the free slots (None: the concurrency).
        self.prefetch = prefetch
        # -- guarded by lock --
        self.state = State.INITIATED
        self.concurrency = concurrency
        self.in_flight = 0
        self.buffered = 0
        self.reserved = 0
        self.threads = 0
        self.waking = 0
        self.idle: list[Slot] = []
        self.sources: list[Source] = []
        self.storage_sources: list[StorageSource] = []
        # The one source, when it is the worker's only one and a built-in in-memory queue:
        # threads then take from it without the lock (see ThreadRunner._run_on).
        self.fast_source: MemorySource | None = None
        self.cursor = -1
        self.spawns = 0
        self.generation = 0
        # Threads blocked in wait_for: nobody to notify when it is 0 (most of the time).
        self.waiters = 0
        # Set by the runner: wakes one parked slot or asks for a spawn. Called under lock.
        self.wake_slot: Callable[[Slot], None] = _release
        self.on_stopped: Callable[[], None] = _nothing
        self.on_taken: Callable[[list[StorageJob]], None] = _ignore_jobs
        # Starts n new threads; set by the runner, always called without the lock held.
        self.spawn: Callable[[int], None] = _ignore_count
        # The async runner has one dispatcher whatever the concurrency.
        self.thread_limit: int | None = None

    # -- derived values --------------------------------------------------------------------

    @property
    def min_idle(self) -> int:
        return max(self.concurrency * self.min_idle_ratio // 100, 1)

    def status(self) -> Status:
        state = self.state
        if state is State.ACTIVE:
            return Status.RUNNING if self.in_flight or self.buffered else Status.IDLE
        return STATUS_OF[state]

    def state_error(self) -> errors.VarMQError:
        """The error a call that needs an active worker raises in the current state."""
        return state_error(self.status())

    # -- sources ----------------------------------------------------------------------------

    def add_source(self, source: Source) -> None:
        with self.lock:
            self.sources.append(source)
            self.sources.sort(key=lambda s: (s.rank, s.index))
            if isinstance(source, StorageSource):
                self.storage_sources.append(source)
                source.on_settled = self.acks_settled
            only = self.sources[0] if len(self.sources) == 1 else None
            self.fast_source = (
                only
                if isinstance(only, MemorySource) and type(only.storage) in _ATOMIC_QUEUES
                else None
            )
            # Binding always wakes the worker: jobs already stored start without another signal.
            self.wake_locked()
            self.changed.notify_all()
            spawns = self.take_spawns_locked()
        if spawns:
            self.spawn(spawns)

    # -- signals ----------------------------------------------------------------------------

    def signal(self, submitted: int = 0, source: StorageSource | None = None) -> None:
        """New work may be there: count ``submitted`` jobs and wake a slot if one is needed."""
        with self.lock:
            self.metrics.submitted += submitted
            if source is not None:
                source.maybe_ready = True
            if self.waking == 0:
                self.wake_locked()
            spawns = self.take_spawns_locked()
        if spawns:
            self.spawn(spawns)

    def add_submitted(self, n: int) -> None:
        """Count jobs accepted for later (delayed): nothing to wake for yet."""
        with self.lock:
            self.metrics.submitted += n

    def wake_locked(self) -> None:
        """Wake one parked slot, or plan a new thread, if the worker could take a job now."""
        if self.state is not State.ACTIVE or self.in_flight + self.waking >= self.concurrency:
            return
        self.wake_one_locked()

    def wake_one_locked(self) -> None:
        if self.idle:
            slot = self.idle.pop()
            self.waking += 1
            self.wake_slot(slot)
        elif self.threads < (self.thread_limit or self.concurrency):
            self.threads += 1
            self.waking += 1
            self.spawns += 1

    def take_spawns_locked(self) -> int:
        n, self.spawns = self.spawns, 0
        return n

    # -- the step ---------------------------------------------------------------------------

    def step_locked(self, retire_idle: bool) -> tuple[int, Any]:
        """Decide what the calling slot does next. Must hold ``lock``.

        Returns ``(RUN, job)``, ``(TAKE, (source, n))``, ``(PARK, None)`` or
        ``(RETIRE, None)``. ``retire_idle`` is False for the async runner, whose single
        dispatcher never retires while the worker lives.
        """
        if self.buffered and self.in_flight < self.concurrency:
            # Taken jobs run in every state: their lease is ticking.
            for source in self.storage_sources:
                if source.buffer:
                    self.buffered -= 1
                    self.in_flight += 1
                    return RUN, source.buffer.popleft()
        if self.state is State.ACTIVE:
            usable: Callable[[Source], bool] = _always
            if self.storage_sources:
                now = time.monotonic()

                def usable(s: Source) -> bool:
                    return s.usable(now)

            sources = self.sources
            for _ in range(4):
                if self.in_flight >= self.concurrency:
                    break
                if len(sources) == 1:
                    picked: Source | None = sources[0]
                    if not (usable(sources[0]) and sources[0].has_work()):
                        break
                else:
                    picked, self.cursor = pick(self.strategy, sources, self.cursor, usable)
                    if picked is None:
                        break
                if isinstance(picked, MemorySource):
                    job = picked.take(self.decode)
                    if job is None:
                        continue
                    self.in_flight += 1
                    if self.waking == 0 and self.in_flight < self.concurrency and picked.has_work():
                        # More is waiting: pass the baton so load ramps up.
                        self.wake_one_locked()
                    return RUN, job
                assert isinstance(picked, StorageSource)
                source = picked
                n = 1
                if source.batched:
                    # Every free slot, plus a prefetch so that one round trip feeds the slots
                    # that free up while these jobs run.
                    limit = self.concurrency if self.prefetch is None else self.prefetch
                    n = self.concurrency - self.in_flight + max(limit - self.buffered, 0)
                # One take at a time per source; a signal during the take sets it again.
                source.taking = True
                source.maybe_ready = False
                self.in_flight += 1  # the taker's own slot
                self.reserved += 1
                return TAKE, (source, n)
        if self.state is State.STOPPING or self.state is State.STOPPED:
            return RETIRE, None
        if retire_idle and self.threads > self.concurrency:
            return RETIRE, None
        return PARK, None

    def taken_locked(
        self, source: StorageSource, n: int, delivered: int, jobs: list[StorageJob]
    ) -> StorageJob | None:
        """Account a storage take of up to ``n`` jobs; returns the job for the taker's slot.

        ``delivered`` counts what the storage handed out (undecodable items included): a
        full batch means more may be waiting. The other jobs wait in the source's buffer and
        a slot is woken for each one a free slot can run now.
        """
        self.reserved -= 1
        source.taking = False
        if source.retry_at:
            source.maybe_ready = True  # retried once the back-off is over
        elif delivered >= n:
            source.maybe_ready = True
        elif not source.maybe_ready:
            # Short take and no signal since it began: empty until polled or signalled.
            source.empty_since = time.monotonic()
        if not jobs:
            # The taker steps again right after this: nobody else needs waking.
            self.release_locked(1, wake=False)
            return None
        source.running += len(jobs)
        self.on_taken(jobs)
        first, rest = jobs[0], jobs[1:]
        if rest:
            source.buffer.extend(rest)
            self.buffered += len(rest)
            for _ in range(min(len(rest), self.concurrency - self.in_flight)):
                self.wake_one_locked()
        return first

    def count_locked(self, tally: list[int]) -> None:
        """Count runs tallied outside the lock: ``tally[outcome]`` runs ended that way."""
        metrics = self.metrics
        ok, failed, retried, dead = tally
        metrics.successful += ok
        metrics.failed += failed + retried + dead
        metrics.retried += retried
        metrics.completed += ok + failed + dead
        metrics.dead_lettered += dead

    def finish_locked(self, job: Any, outcome: int, wake: bool = True) -> None:
        """Account one run of ``job`` that ended with ``outcome`` (OK, FAILED, ...).

        ``wake=False`` when the caller takes its next step right away: it needs no one else.
        """
        metrics = self.metrics
        if outcome == OK:
            metrics.successful += 1
        else:
            metrics.failed += 1
        if outcome == RETRIED:
            metrics.retried += 1
        else:
            metrics.completed += 1
            if outcome == DEAD:
                metrics.dead_lettered += 1
        origin = job.source if isinstance(job, StorageJob) else getattr(job, "_origin", None)
        if origin is not None:
            origin.running -= 1
        self.release_locked(1, wake)

    def release_locked(self, n: int, wake: bool = True) -> None:
        if n <= 0:
            return
        self.in_flight -= n
        if self.in_flight == 0 and not self.buffered:
            if self.state is State.PAUSING:
                self.state = State.PAUSED
            self.check_stopped_locked()
            if self.waiters:
                self.changed.notify_all()
        if wake and self.waking == 0:
            if self.state is State.ACTIVE:
                self.wake_locked()
            elif self.buffered:
                self.wake_one_locked()  # paused or stopping: taken jobs still run

    def acks_settled(self) -> None:
        """Deferred acknowledgements were sent: a stopping worker may now be stopped."""
        with self.lock:
            self.check_stopped_locked()
            if self.waiters:
                self.changed.notify_all()

    def retire_locked(self) -> None:
        self.threads -= 1
        self.check_stopped_locked()

    def check_stopped_locked(self) -> None:
        if (
            self.state is State.STOPPING
            and self.in_flight == 0
            and self.buffered == 0
            and self.threads == 0
            and not any(source.unacked for source in self.storage_sources)
        ):
            self.state = State.STOPPED
            self.changed.notify_all()
            self.on_stopped()

    # -- lifecycle --------------------------------------------------------------------------

    def start_locked(self) -> None:
        status = self.status()
        if self.state not in (State.INITIATED, State.STOPPED):
            raise state_error(status)
        self.state = State.ACTIVE
        self.generation += 1
        self.changed.notify_all()

    def pause(self) -> None:
        with self.lock:
            state = self.state
            if state is State.ACTIVE:
                busy = self.in_flight or self.buffered
                self.state = State.PAUSING if busy else State.PAUSED
                self.changed.notify_all()
            elif state in (State.PAUSING, State.PAUSED):
                return
            else:
                raise self.state_error()

    def resume(self) -> None:
        with self.lock:
            state = self.state
            if state is State.ACTIVE:
                return
            if state is not State.PAUSED:
                raise self.state_error()
            self.state = State.ACTIVE
            self.changed.notify_all()
            self.wake_locked()
            spawns = self.take_spawns_locked()
        if spawns:
            self.spawn(spawns)

    def stop_locked(self) -> None:
        state = self.state
        if state in (State.STOPPING, State.STOPPED):
            return
        if state is State.INITIATED:
            raise errors.NotRunningWorkerError()
        self.state = State.STOPPING
        # Parked slots wake up, see STOPPING and retire.
        while self.idle:
            self.wake_slot(self.idle.pop())
            self.waking += 1
        self.changed.notify_all()
        self.check_stopped_locked()

    def tune_locked(self, concurrency: int) -> None:
        if self.state is not State.ACTIVE:
            raise self.state_error()
        if concurrency == self.concurrency:
            raise errors.SameConcurrencyError()
        grew = concurrency > self.concurrency
        self.concurrency = concurrency
        if grew:
            # One wake is enough: each slot that takes a job wakes the next while work remains.
            self.wake_locked()
        elif self.idle_expiry <= 0:
            # Without an expiry, surplus idle threads go now; with one, the expiry trims them.
            surplus = min(len(self.idle) - self.min_idle, self.threads - concurrency)
            for _ in range(max(surplus, 0)):
                self.wake_slot(self.idle.pop())
                self.waking += 1

    # -- waiting ----------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``predicate`` (evaluated under the lock) holds; False on timeout.

        Storage lengths can change without anyone here noticing (other processes), so the
        condition is re-checked at least every poll interval.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while not predicate():
                if deadline is None:
                    remaining = self.poll_interval
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    remaining = min(remaining, self.poll_interval)
                self.waiters += 1
                try:
                    self.changed.wait(remaining)
                finally:
                    self.waiters -= 1
            return True

    def acks_pending(self) -> bool:
        return any(source.unacked for source in self.storage_sources)

    def queues_empty_locked(self) -> bool:
        return all(source.waiting() == 0 for source in self.sources)


# Built-in queues whose dequeue is atomic on its own, so threads may take without the lock.
_ATOMIC_QUEUES = (MemoryQueue, MemoryPriorityQueue)


def _always(source: Source) -> bool:
    return True


def _release(slot: Slot) -> None:
    slot.park.release()


def _nothing() -> None:
    return None


def _ignore_jobs(jobs: list[StorageJob]) -> None:
    return None


def _ignore_count(n: int) -> None:
    return None
