"""Where plain job functions run: :class:`ThreadRunner`, threads created on demand up to the
concurrency.

It drives the :class:`~varmq.engine.dispatch.Dispatcher` step, as the event loop of
:mod:`varmq.engine.async_runner` does for ``async def`` functions, so concurrency, lifecycle and
metrics are identical. There is no dispatcher thread in front of it: a thread takes the next
job itself, runs it, and hands the run to the job's source to settle
(:meth:`~varmq.sources.base.Source.settle`) before its slot is released. A thread runs a job a
producer handed it with its wake-up first, and takes a backlog of the worker's one in-memory
queue without the lock (both: :mod:`varmq.engine.fastpath`).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..contract import observe
from ..model import tracing
from ..model.jobs import CURRENT_JOB, Job
from ..model.loops import LOOP_THREAD
from ..model.retry import Outcome
from ..model.states import State
from ..sources.base import Source, Step
from .dispatch import Dispatcher, Slot
from .fastpath import forget_thread_taker, parked_after_locked, run_backlog, thread_taker

if TYPE_CHECKING:
    from .timer import Timer

__all__ = ["ThreadRunner"]
# Enum members as module globals: reading Step.RUN on the class costs ~90 ns a time on
# Python 3.11 (the enum metaclass's __getattr__), and these are read for every job.
_RUN, _TAKE, _PARK, _RETIRE = Step.RUN, Step.TAKE, Step.PARK, Step.RETIRE
_ACTIVE, _STOPPING = State.ACTIVE, State.STOPPING
_OK = Outcome.OK


log = logging.getLogger("varmq.worker")

# Without an idle expiry, threads above the minimum idle count exit after this long without
# work: starting a thread costs far more than a job, so a burst should not churn them.
IDLE_GRACE = 0.2


class ThreadRunner:
    """Runs a plain job function on up to ``concurrency`` threads, created on demand.

    Each thread exists to run jobs; the worker owns it and stops it by ``stop()`` (it retires
    when it finds the worker stopping). Threads are daemons so that a process that never
    stops its worker can still exit; ``stop_and_wait`` is how to finish work first.
    """

    thread_limit: int | None = None
    takes_handed = True

    def __init__(
        self,
        dispatch: Dispatcher,
        name: str,
        fn: Callable[[Any], Any],
        timeout: float | None,
        timer: Callable[[], Timer],
    ) -> None:
        self._dispatch = dispatch
        self._name = name
        self._fn = fn
        # The worker's default timeout (a job's own comes first), and who watches it.
        self._timeout = timeout
        self._timer = timer
        self._numbers = itertools.count(1)

    def start_locked(self) -> None:
        """Create the first thread, parked, so a started worker has one idle thread."""
        slot = Slot()
        self._dispatch.thread_added_locked(slot)
        self._start_thread(slot, parked=True)

    def spawn(self, n: int) -> None:
        for _ in range(n):
            self._start_thread(Slot(), parked=False)

    def wake(self, slot: Slot) -> None:
        slot.park.release()

    def cancel(self, source: Source, job: Job[Any]) -> bool:
        return self._timer().cancel(source, job)

    def _start_thread(self, slot: Slot, parked: bool) -> None:
        thread = threading.Thread(
            target=self._main,
            args=(slot, parked),
            name=f"varmq:{self._name}:worker-{next(self._numbers)}",
            daemon=True,
        )
        thread.start()

    def _main(self, slot: Slot, parked: bool) -> None:
        LOOP_THREAD.dispatch = self._dispatch  # a blocking wait on this worker here would hang
        try:
            self._loop(slot, parked)
        finally:
            forget_thread_taker()

    def _loop(self, slot: Slot, parked: bool) -> None:
        dispatch = self._dispatch
        taker = thread_taker()
        finished: tuple[Source, Outcome | None] | None = None
        woken = not parked
        park = slot.park.acquire
        expiry = dispatch.idle_expiry if dispatch.idle_expiry > 0 else IDLE_GRACE
        while True:
            # The first wait, inline: the common one, and the fewer steps between the run of a
            # job and the wait, the sooner the interpreter is free for the others.
            if parked and not park(timeout=expiry) and not self._park(slot, expiry):
                return
            if parked:
                handed = slot.handed
                if handed is None:
                    woken = True
                else:
                    # Taken for this slot (and counted in flight) by the producer that
                    # woke it: run it, and park again at once if nothing else waits.
                    slot.handed = None
                    origin = handed[0]
                    outcome = self._run(origin, handed[1])
                    if outcome is _OK:
                        with dispatch.lock:
                            parked = parked_after_locked(dispatch, origin, slot)
                        if parked:
                            continue
                    finished = origin, outcome
            tally: list[int] | None = None
            if finished is not None and dispatch.fast is not None:
                finished, tally = run_backlog(dispatch, finished, taker, self._run, self.spawn)
            with dispatch.lock:
                if woken:
                    dispatch.woken_locked()
                    woken = False
                if tally is not None:
                    dispatch.count_locked(tally)
                if finished is not None:
                    if finished[1] is None:  # settled at its timeout, returned since
                        dispatch.returned_late_locked(finished[0], wake=False)
                    else:
                        dispatch.finish_locked(finished[0], finished[1], wake=False)
                step, source, arg = dispatch.step_locked(True)
                if step is _PARK:
                    dispatch.parked_locked(slot)
                elif step is _RETIRE:
                    dispatch.retire_locked()
                spawns = dispatch.take_spawns_locked()
            finished = None
            if spawns:
                self.spawn(spawns)
            parked = step is _PARK
            if step is _RUN:
                assert source is not None
                finished = source, self._run(source, arg)
            elif step is _TAKE:
                assert source is not None
                job = self._take(source, arg)
                if job is not None:
                    finished = source, self._run(source, job)
            elif step is _RETIRE:
                return

    def _take(self, source: Source, n: int) -> Job[Any] | None:
        dispatch = self._dispatch
        delivered, jobs = source.take(n)
        with dispatch.lock:
            job = dispatch.taken_locked(source, n, delivered, jobs)
            spawns = dispatch.take_spawns_locked()
        if spawns:
            self.spawn(spawns)
        return job

    def _run(self, source: Source, job: Job[Any]) -> Outcome | None:
        """Run ``job`` and settle it; ``None`` if its timeout passed first, or it was cancelled
        by id (the timer settled it then, and only its slot is left to give back)."""
        extra = job._extra
        timeout = self._timeout if extra is None or extra.timeout is None else extra.timeout
        watch = None
        cancellable = source.cancellable
        # Observed from before the watch: the timer may settle the run (a timeout, a cancel)
        # from the moment it is watched, and ends the observed attempt when it does.
        observer = observe.OBSERVER
        attempt = None if observer is None else tracing.begin_attempt(observer, source.label, job)
        if timeout is not None:
            watch = self._timer().watch(source, job, timeout)
        elif cancellable:
            self._timer().track(job)
        # Cancelled before it started (watched first, so a cancel now is not missed; asked of
        # the storage when the job waited since its take): settled as cancelled without running.
        if (
            cancellable
            and (
                job._cancel_requested()
                or (source.start_check_due(job) and not source.may_start(job))
            )
            and self._timer().cancel(source, job, running=False)
        ):
            if attempt is not None:
                attempt.detach()  # the timer's cancel ended it
            return None
        dispatch = self._dispatch
        started = dispatch.run_started(source, job) if dispatch.metrics.observing else 0.0
        current = CURRENT_JOB.set(job)  # varmq.current_job(); ~0.1 us with its reset
        try:
            value = self._fn(job)
            error = None
        except BaseException as exc:
            value, error = None, exc
        CURRENT_JOB.reset(current)
        if attempt is not None:
            attempt.detach()
        if started:
            dispatch.run_ended(source, job, started)
        if watch is not None:
            if not self._timer().unwatch(watch):
                return None  # its timeout passed, or a cancel came, first: settled
        elif cancellable and not self._timer().untrack(job):
            return None  # a cancel came first: settled
        try:
            outcome = source.settle(job, value, error)
        except Exception:
            outcome = self._settle_failed(source, job)
            if attempt is not None:
                tracing.end_attempt(job, error, None)
            return outcome
        if attempt is not None:
            tracing.end_attempt(job, error, outcome)
        return outcome

    def _settle_failed(self, source: Source, job: Job[Any]) -> Outcome:
        """Settling raised (a fault of varmq or of the storage, not of the job): the slot is
        given back all the same, so the worker never wedges on it."""
        log.exception(
            "varmq: worker %s could not settle job %r of queue %r; its slot is given back and "
            "the storage's lease decides what happens to the job",
            self._name,
            job.id,
            source.label,
        )
        return Outcome.FAILED

    def _park(self, slot: Slot, expiry: float) -> bool:
        """Wait to be woken, after a first wait of ``expiry`` seconds passed without a
        wake-up; ``False`` when the thread should retire instead."""
        dispatch = self._dispatch
        while True:
            with dispatch.lock:
                parked = slot in dispatch.idle
                if parked and dispatch.surplus_locked():
                    dispatch.idle.remove(slot)
                    dispatch.retire_locked()
                    return False
            if not parked:
                # Someone took the slot off the idle list and is releasing it right now.
                slot.park.acquire()
                return True
            if slot.park.acquire(timeout=expiry):
                return True
