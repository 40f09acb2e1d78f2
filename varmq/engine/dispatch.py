"""The worker's dispatcher: lifecycle state, slots, and the step that gives a slot its next job.

A *slot* is one unit of concurrency: a job holds one from the moment it is taken until it is
settled. The runner's threads (or, for ``async def`` functions, its one dispatch coroutine) ask
:meth:`Dispatcher.step_locked` what to do next; it answers with a
:class:`~varmq.sources.base.Step`: run this job, take from that source (done outside the lock),
park, or retire. There is no dispatcher thread between a queue and the thread that runs the
job: a thread takes for itself, so a job costs no thread hand-off. Where the worker's only
queue is a built-in in-memory one, the fast path (:mod:`varmq.engine.fastpath`) skips the step
for most jobs. Which queue to take from is the strategy's choice
(:mod:`varmq.engine.strategies`); how to take from it is the source's
(:class:`~varmq.sources.base.Source`, the one interface of a bound queue the engine knows).

Everything below the lock line is guarded by ``Dispatcher.lock``. Its invariants:

- ``in_flight`` = jobs running + slots reserved for a take under way (``reserved``);
  ``in_flight <= concurrency`` except briefly after ``tune_pool`` lowered it.
- ``buffer`` holds jobs taken from storage and not started yet, waiting for a free slot; at
  most ``prefetch`` beyond the slots free at the take. They run in every state (their leases
  are renewed meanwhile): Paused and Stopped wait for them.
- a parked slot is in ``idle`` exactly when its park lock is held and nobody is about to
  release it: a slot taken off the list is released at once (for a hand-over, right after the
  lock is left). A slot with a ``handed`` job holds that job's count in ``in_flight``.
- ``abandoned`` counts runs that passed their timeout (or were cancelled by id) and were settled
  while their thread still runs the function: they hold their slot (and their thread) until it
  returns, but the worker does not wait for them to pause, stop or drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from ..model import errors
from ..model.jobs import Job
from ..model.loops import resolve
from ..model.metrics import Metrics
from ..model.retry import Outcome
from ..model.states import STATUS_OF, State, Status, state_error
from ..model.strategy import Strategy
from ..sources.base import Source, Step
from .strategies import pick

__all__ = ["Dispatcher", "Runner", "Slot"]
# Enum members as module globals, read for every job (see thread_runner.py).
_RUN, _TAKE, _PARK, _RETIRE = Step.RUN, Step.TAKE, Step.PARK, Step.RETIRE
_ACTIVE, _STOPPING, _STOPPED, _PAUSING = State.ACTIVE, State.STOPPING, State.STOPPED, State.PAUSING
_OK = Outcome.OK


class Forks:
    """How many times this process is a fork child of the process it started as."""

    count = 0


def _forked() -> None:
    Forks.count += 1


os.register_at_fork(after_in_child=_forked)


class Slot:
    """A thread's parking place: its lock is held while the thread waits to be woken.

    ``handed`` is a job given to the parked thread with its wake-up (see
    :func:`~varmq.engine.fastpath.hand_over`): already taken and holding a slot, for the thread to
    run first.
    """

    __slots__ = ("handed", "park")

    def __init__(self) -> None:
        self.park = threading.Lock()
        self.park.acquire()
        self.handed: tuple[Source, Job[Any]] | None = None


class Runner(Protocol):
    """Where job functions run (:mod:`varmq.engine.thread_runner`), as the dispatcher drives it."""

    #: Most threads (dispatch loops) it runs at once; ``None``: the concurrency.
    thread_limit: int | None
    #: Whether a parked slot runs the job it is woken with (``Slot.handed``) first.
    takes_handed: bool

    def start_locked(self) -> None:
        """The worker started: create what runs jobs (called under the dispatcher's lock)."""

    def spawn(self, n: int) -> None:
        """Start ``n`` more threads (called without the lock)."""

    def wake(self, slot: Slot) -> None:
        """Wake the parked ``slot`` (called under the lock)."""

    def cancel(self, source: Source, job: Job[Any]) -> bool:
        """Cancel ``job`` of ``source`` if it runs here, as its timeout would (from any thread,
        without the lock); whether it was found running."""


class Dispatcher:
    """Lifecycle, slot accounting and job selection for one worker."""

    def __init__(
        self,
        *,
        concurrency: int,
        strategy: Strategy,
        idle_expiry: float,
        min_idle_ratio: int,
        poll_interval: float,
        prefetch: int | None,
        make_runner: Callable[[Dispatcher], Runner],
        on_stopped: Callable[[], None],
        name: str,
    ) -> None:
        self.name = name
        self._pid = os.getpid()
        self.forks = Forks.count
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.metrics = Metrics(self.lock)
        self.strategy = strategy
        self.idle_expiry = idle_expiry
        self.min_idle_ratio = min_idle_ratio
        self.poll_interval = poll_interval
        # Jobs a storage take may fetch beyond the free slots (None: the concurrency).
        self.prefetch = prefetch
        self._on_stopped = on_stopped
        # -- guarded by lock --
        self.state = State.INITIATED
        self.concurrency = concurrency
        self.in_flight = 0
        self.abandoned = 0
        self.reserved = 0
        self.buffer: deque[tuple[Source, Job[Any]]] = deque()
        self.threads = 0
        self.waking = 0
        self.idle: list[Slot] = []
        self.sources: list[Source] = []
        # The one source and its storage, when it is the worker's only one and threads may
        # take from it without the lock (see varmq.engine.fastpath.run_backlog).
        self.fast: tuple[Source, Any] | None = None
        # The one source, when it is the worker's only one and a built-in in-memory queue, and
        # the runner's threads run jobs handed to them: a producer may give a job straight to
        # a parked thread (see varmq.engine.fastpath), and a thread that finds it empty parks
        # at once.
        self.handing: Source | None = None
        self.cursor = -1
        self.spawns = 0
        self.generation = 0
        # Callers blocked in wait_for or wait_for_async: nobody to notify when it is 0 (most of
        # the time). The async ones wait on futures of their own loops, resolved by _notify.
        self.waiters = 0
        self.async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.runner = make_runner(self)

    # -- derived values --------------------------------------------------------------------

    @property
    def min_idle(self) -> int:
        return max(self.concurrency * self.min_idle_ratio // 100, 1)

    def status(self) -> Status:
        state = self.state
        if state is _ACTIVE:
            return Status.RUNNING if self.in_flight or self.buffer else Status.IDLE
        return STATUS_OF[state]

    def state_error(self) -> errors.VarMQError:
        """The error a call that needs an active worker raises in the current state."""
        return state_error(self.status())

    # -- sources ----------------------------------------------------------------------------

    def add_source(self, source: Source) -> None:
        with self.lock:
            self.sources.append(source)
            self.sources.sort(key=lambda s: (s.rank, s.index))
            only = self.sources[0] if len(self.sources) == 1 else None
            queue = only.lock_free_queue() if only is not None else None
            self.fast = None if only is None or queue is None else (only, queue)
            self.handing = (
                only if only is not None and only.hands_over and self.runner.takes_handed else None
            )
            # Binding always wakes the worker: jobs already stored start without another signal.
            self.wake_locked()
            self.notify_locked()
            spawns = self.take_spawns_locked()
        if spawns:
            self.runner.spawn(spawns)

    def needs_timer(self) -> bool:
        return any(source.needs_timer() for source in self.sources)

    def check_process(self) -> None:
        """Raise :class:`~varmq.ForkedWorkerError` in a child forked after this was made.

        Checked before the lock is taken: a lock held by a thread at the fork stays held in
        the child for ever.
        """
        if Forks.count != self.forks:
            raise errors.ForkedWorkerError(self.name, self._pid)

    # -- signals ----------------------------------------------------------------------------

    def signal(self, submitted: int = 0, source: Source | None = None) -> None:
        """New work may be there: count ``submitted`` jobs and wake a slot if one is needed."""
        if Forks.count != self.forks:
            self.check_process()
        with self.lock:
            self.metrics.submitted += submitted
            if source is not None:
                source.signalled_locked()
            if self.waking == 0:
                self.wake_locked()
            spawns = self.take_spawns_locked()
        if spawns:
            self.runner.spawn(spawns)

    def count_dropped(self, n: int) -> None:
        """Count ``n`` topic messages a subscription's full buffer dropped (``dropped``)."""
        with self.lock:
            self.metrics.dropped += n

    def count_unacknowledged(self) -> None:
        """Count a settle the storage refused or failed (``unacknowledged``); never called
        under :attr:`lock` (storage calls are not made under it)."""
        with self.lock:
            self.metrics.unacknowledged += 1

    def add_submitted(self, n: int) -> None:
        """Count jobs accepted for later (delayed): nothing to wake for yet."""
        self.check_process()
        with self.lock:
            self.metrics.submitted += n

    def wake_locked(self) -> None:
        """Wake one parked slot, or plan a new thread, if the worker could take a job now."""
        if self.state is not _ACTIVE or self.in_flight + self.waking >= self.concurrency:
            return
        self.wake_one_locked()

    def wake_for_buffer_locked(self) -> None:
        """Wake one parked slot for the buffered jobs, unless one is on its way already or no
        slot is free (see taken_locked). No state check: taken jobs run in every state."""
        if self.buffer and self.waking == 0 and self.in_flight < self.concurrency:
            self.wake_one_locked()

    def wake_one_locked(self) -> None:
        if self.idle:
            slot = self.idle.pop()
            self.waking += 1
            self.runner.wake(slot)
        elif self.threads < (self.runner.thread_limit or self.concurrency):
            self.threads += 1
            self.waking += 1
            self.spawns += 1

    def take_spawns_locked(self) -> int:
        n, self.spawns = self.spawns, 0
        return n

    def spawn_pending(self) -> None:
        """Start the threads planned under the lock (call without it)."""
        with self.lock:
            spawns = self.take_spawns_locked()
        if spawns:
            self.runner.spawn(spawns)

    # -- the step ---------------------------------------------------------------------------

    def step_locked(self, retire_idle: bool) -> tuple[Step, Source | None, Any]:
        """Decide what the calling slot does next. Must hold ``lock``.

        Returns ``(RUN, source, job)``, ``(TAKE, source, n)``, ``(PARK, None, None)`` or
        ``(RETIRE, None, None)``. ``retire_idle`` is False for the async runner, whose single
        dispatcher never retires while the worker lives.
        """
        while self.buffer and self.in_flight < self.concurrency:
            # Taken jobs run in every state: their lease is ticking.
            source, job = self.buffer.popleft()
            source.buffered -= 1
            if source.expired_locked(job, time.monotonic()):
                # Its lease ran out while it waited for a slot: someone else may run it now.
                source.running -= 1
                self.metrics.lost += 1
                continue
            self.in_flight += 1
            self.wake_for_buffer_locked()  # more taken jobs may wait: pass the baton
            return _RUN, source, job
        if self.state is _ACTIVE:
            sources = self.sources
            for _ in range(4):
                if self.in_flight >= self.concurrency:
                    break
                if len(sources) == 1:
                    picked: Source | None = sources[0]
                    if not sources[0].ready_locked():
                        break
                else:
                    picked, self.cursor = pick(self.strategy, sources, self.cursor)
                if picked is None:
                    break
                if self.prefetch is not None:
                    room = self.prefetch - len(self.buffer)
                elif picked.cancellable:
                    # A queue whose jobs can be cancelled by id takes no job ahead unless asked
                    # (prefetch=N): a job taken for a free slot starts at once, so its record's
                    # "running" is true from the take, and a cancel that answers True finds it
                    # either queued (removed: it never starts) or running (stopped). A job
                    # taken ahead could start after such a cancel, before a renewal told of it.
                    room = 0
                else:
                    room = self.concurrency - len(self.buffer)
                planned = picked.plan_locked(self.concurrency - self.in_flight, room)
                if planned is None:
                    continue
                step, arg = planned
                self.in_flight += 1  # the slot of the job, or of the taker
                if step is _TAKE:
                    self.reserved += 1
                elif (
                    self.waking == 0 and self.in_flight < self.concurrency and picked.ready_locked()
                ):
                    # More is waiting: pass the baton so load ramps up.
                    self.wake_one_locked()
                return step, picked, arg
        if self.state is _STOPPING or self.state is _STOPPED:
            return _RETIRE, None, None
        if retire_idle and self.threads > self.concurrency:
            return _RETIRE, None, None
        return _PARK, None, None

    def taken_locked(
        self, source: Source, n: int, delivered: int, jobs: list[Job[Any]]
    ) -> Job[Any] | None:
        """Account a take of up to ``n`` jobs; returns the job for the taker's slot.

        ``delivered`` counts what the storage handed out (undecodable items included). The
        other jobs wait in the buffer. One parked slot is woken for them, and each slot that
        starts a buffered job wakes the next while more wait and a slot is free: the wake-ups
        are spread over the threads that run the jobs instead of all made here under the lock
        (where the woken threads would queue on it), and they stop as soon as the running
        threads take the buffered jobs as fast as they come (short jobs).
        """
        self.reserved -= 1
        source.taken_locked(n, delivered, jobs)
        if not jobs:
            # The taker steps again right after this: nobody else needs waking.
            self.release_locked(1, wake=False)
            return None
        source.running += len(jobs)
        first, rest = jobs[0], jobs[1:]
        if rest:
            self.buffer.extend((source, job) for job in rest)
            source.buffered += len(rest)
            self.wake_for_buffer_locked()
        return first

    def run_started(self, source: Source, job: Job[Any]) -> float:
        """A job function starts: its start time while durations are observed, else 0."""
        if not self.metrics.observing:
            return 0.0
        started = time.monotonic()
        source.started[id(job)] = started
        return started

    def run_ended(self, source: Source, job: Job[Any], started: float) -> None:
        """The job function that started at ``started`` returned: count its duration."""
        seconds = time.monotonic() - started
        source.started.pop(id(job), None)
        with self.lock:
            self.metrics.observe_locked(seconds)

    def count_locked(self, tally: list[int]) -> None:
        """Count runs tallied outside the lock: ``tally[outcome]`` runs ended that way."""
        metrics = self.metrics
        ok, failed, retried, dead = tally
        metrics.successful += ok
        metrics.failed += failed + retried + dead
        metrics.retried += retried
        metrics.completed += ok + failed + dead
        metrics.dead_lettered += dead

    def finish_locked(
        self, source: Source, outcome: Outcome, wake: bool = True, timed_out: bool = False
    ) -> None:
        """Account one run of a job of ``source`` that ended with ``outcome``.

        ``wake=False`` when the caller takes its next step right away: it needs no one else.
        """
        metrics = self.metrics
        if outcome is _OK and not timed_out:  # the common case, counted inline
            metrics.successful += 1
            metrics.completed += 1
        else:
            self._count_locked(outcome, timed_out)
        source.running -= 1
        self.release_locked(1, wake)

    def _count_locked(self, outcome: Outcome, timed_out: bool) -> None:
        metrics = self.metrics
        if outcome is _OK:
            metrics.successful += 1
        else:
            metrics.failed += 1
        if outcome is Outcome.RETRIED:
            metrics.retried += 1
        else:
            metrics.completed += 1
            if outcome is Outcome.DEAD:
                metrics.dead_lettered += 1
        if timed_out:
            metrics.timed_out += 1

    def timed_out_locked(self, outcome: Outcome, timed_out: bool = True) -> None:
        """A run passed its timeout (or, not ``timed_out``, was cancelled by id) and was settled
        with ``outcome`` while its thread still runs the function: counted now, its slot given
        back when the thread returns."""
        self._count_locked(outcome, timed_out)
        self.abandoned += 1
        self._settled_locked()

    def returned_late_locked(self, source: Source, wake: bool = True) -> None:
        """The thread of a run settled at its timeout has returned: its slot is free."""
        self.abandoned -= 1
        source.running -= 1
        self.release_locked(1, wake)

    def busy_locked(self) -> int:
        """Runs the worker waits for: in flight, except those abandoned at their timeout."""
        return self.in_flight - self.abandoned

    def release_locked(self, n: int, wake: bool = True) -> None:
        if n <= 0:
            return
        self.in_flight -= n
        if self.in_flight == self.abandoned and not self.buffer:
            self._settled_locked()
        if wake and self.waking == 0:
            if self.state is _ACTIVE:
                self.wake_locked()
            elif self.buffer:
                self.wake_one_locked()  # paused or stopping: taken jobs still run

    def _settled_locked(self) -> None:
        """A run ended: a pausing worker may be paused, a stopping one stopped, waiters told."""
        if self.in_flight - self.abandoned == 0 and not self.buffer:
            if self.state is _PAUSING:
                self.state = State.PAUSED
            self.check_stopped_locked()
            if self.waiters:
                self.notify_locked()

    def acks_settled(self) -> None:
        """Deferred acknowledgements were sent: a stopping worker may now be stopped."""
        with self.lock:
            self.check_stopped_locked()
            if self.waiters:
                self.notify_locked()

    def acks_pending(self) -> bool:
        return any(source.pending_acks for source in self.sources)

    # -- threads ----------------------------------------------------------------------------

    def thread_added_locked(self, parked: Slot | None) -> None:
        """A runner created a thread (that starts parked on ``parked``, if given)."""
        self.threads += 1
        if parked is not None:
            self.idle.append(parked)

    def parked_locked(self, slot: Slot) -> None:
        """``slot`` waits to be woken."""
        self.idle.append(slot)

    def unpark_locked(self, slot: Slot) -> None:
        """Wake ``slot`` if it is parked."""
        if slot in self.idle:
            self.idle.remove(slot)
            self.waking += 1
            self.runner.wake(slot)

    def woken_locked(self) -> None:
        """A woken slot is awake and stepping."""
        if self.waking:
            self.waking -= 1

    def surplus_locked(self) -> bool:
        """Whether an idle thread is one too many (idle above the minimum, or above the
        concurrency)."""
        return len(self.idle) > self.min_idle or self.threads > self.concurrency

    def retire_locked(self) -> None:
        self.threads -= 1
        self.check_stopped_locked()

    def check_stopped_locked(self) -> None:
        if (
            self.state is _STOPPING
            and self.in_flight == self.abandoned
            and not self.buffer
            and self.threads == self.abandoned  # each abandoned run holds its thread
            and not self.acks_pending()
        ):
            self.state = _STOPPED
            self.notify_locked()
            self._on_stopped()

    # -- lifecycle --------------------------------------------------------------------------

    def start_locked(self) -> None:
        status = self.status()
        if self.state not in (State.INITIATED, _STOPPED):
            raise state_error(status)
        self.state = _ACTIVE
        self.generation += 1
        self.notify_locked()
        self.runner.start_locked()
        self.wake_locked()

    def pause(self) -> None:
        with self.lock:
            state = self.state
            if state is _ACTIVE:
                busy = self.in_flight or self.buffer
                self.state = _PAUSING if busy else State.PAUSED
                self.notify_locked()
            elif state in (_PAUSING, State.PAUSED):
                return
            else:
                raise self.state_error()

    def resume(self) -> None:
        with self.lock:
            state = self.state
            if state is _ACTIVE:
                return
            if state is not State.PAUSED:
                raise self.state_error()
            self.state = _ACTIVE
            self.notify_locked()
            self.wake_locked()
            spawns = self.take_spawns_locked()
        if spawns:
            self.runner.spawn(spawns)

    def stop_locked(self) -> list[tuple[Source, Job[Any]]]:
        """Stop taking; returns the taken jobs that have not started and can go back to their
        storage at once (the caller hands them back without the lock: it is storage I/O)."""
        state = self.state
        if state in (_STOPPING, _STOPPED):
            return []
        if state is State.INITIATED:
            raise errors.NotRunningWorkerError()
        self.state = _STOPPING
        handed: list[tuple[Source, Job[Any]]] = []
        kept: deque[tuple[Source, Job[Any]]] = deque()
        for source, job in self.buffer:
            (handed if source.can_release else kept).append((source, job))
        if handed:
            self.buffer = kept
            for source, _ in handed:
                source.buffered -= 1
                source.running -= 1
        # Parked slots wake up, see STOPPING and retire.
        while self.idle:
            self.runner.wake(self.idle.pop())
            self.waking += 1
        self.notify_locked()
        self.check_stopped_locked()
        return handed

    def hand_back(self, handed: list[tuple[Source, Job[Any]]]) -> None:
        """Release the leases of jobs :meth:`stop_locked` took out of the buffer (no lock)."""
        released = sum(1 for source, job in handed if source.release(job))
        if released:
            with self.lock:
                self.metrics.released += released

    def tune_locked(self, concurrency: int) -> None:
        if self.state is not _ACTIVE:
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
                self.runner.wake(self.idle.pop())
                self.waking += 1

    # -- waiting (varmq.engine.waits waits for these) ----------------------------------------

    def notify_locked(self) -> None:
        """The state changed: wake every thread and coroutine waiting for a condition."""
        self.changed.notify_all()
        waiting, self.async_waiters = self.async_waiters, []
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody to wake
                loop.call_soon_threadsafe(resolve, future)

    def queues_empty_locked(self) -> bool:
        """Whether every bound queue is empty; one whose storage cannot answer is not."""
        for source in self.sources:
            try:
                if source.waiting():
                    return False
            except Exception:
                return False
        return True
