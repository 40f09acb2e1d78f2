"""Where job functions run: threads for plain functions, one event loop for coroutines.

Both runners drive the same :class:`~varmq.scheduler.Scheduler` step, so concurrency,
lifecycle and metrics are identical. Neither has a dispatcher in front of it: a thread (or the
loop's dispatch coroutine) takes the next job itself.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Protocol

from .job import EnqueuedJob, Job
from .scheduler import PARK, RETIRE, RETRIED, RUN, TAKE, Scheduler, Slot, State
from .sources import StorageJob, StorageSource

__all__ = ["AsyncRunner", "ThreadRunner"]


# Called once a job's function returned or raised, before its slot is released: reports the
# error, acknowledges, retries or dead-letters; returns the outcome (scheduler.OK, ...). Runs
# without the scheduler lock.
class AfterRun(Protocol):
    def __call__(
        self, job: Job[Any], error: BaseException | None, defer: Executor | None = None
    ) -> int: ...


Finished = tuple[Job[Any], Any, BaseException | None, int]

# Without an idle expiry, threads above the minimum idle count exit after this long without
# work: starting a thread costs far more than a job, so a burst should not churn them.
IDLE_GRACE = 0.2


def _close(finished: Finished) -> None:
    job, value, error, outcome = finished
    if isinstance(job, EnqueuedJob) and outcome != RETRIED:
        job._complete(value, error)


class ThreadRunner:
    """Runs a plain job function on up to ``concurrency`` threads, created on demand.

    Each thread exists to run jobs; the worker owns it and stops it by ``stop()`` (it retires
    when it finds the worker stopping). Threads are daemons so that a process that never
    stops its worker can still exit; ``stop_and_wait`` is how to finish work first.
    """

    def __init__(
        self, sched: Scheduler, name: str, fn: Callable[[Any], Any], after_run: AfterRun
    ) -> None:
        self._sched = sched
        self._name = name
        self._fn = fn
        self._after_run = after_run
        self._numbers = itertools.count(1)
        sched.spawn = self.spawn

    def start_locked(self) -> None:
        """Create the first thread, parked, so a started worker has one idle thread."""
        slot = Slot()
        self._sched.idle.append(slot)
        self._sched.threads += 1
        self._start_thread(slot, parked=True)

    def spawn(self, n: int) -> None:
        for _ in range(n):
            self._start_thread(Slot(), parked=False)

    def _start_thread(self, slot: Slot, parked: bool) -> None:
        thread = threading.Thread(
            target=self._main,
            args=(slot, parked),
            name=f"varmq:{self._name}:worker-{next(self._numbers)}",
            daemon=True,
        )
        thread.start()

    def _main(self, slot: Slot, parked: bool) -> None:
        sched = self._sched
        finished: Finished | None = None
        woken = not parked
        while True:
            if parked:
                if not self._park(slot):
                    return
                woken = True
            tally: list[int] | None = None
            if finished is not None:
                # Closed before its slot is released: once a wait on the worker returns,
                # every job that ran has its outcome on its handle.
                _close(finished)
                if sched.fast_source is not None:
                    finished, tally = self._run_on(finished)
            with sched.lock:
                if woken:
                    sched.waking -= 1
                    woken = False
                if tally is not None:
                    sched.count_locked(tally)
                if finished is not None:
                    sched.finish_locked(finished[0], finished[3], wake=False)
                kind, arg = sched.step_locked(True)
                if kind == PARK:
                    sched.idle.append(slot)
                elif kind == RETIRE:
                    sched.retire_locked()
                spawns = sched.take_spawns_locked()
            finished = None
            if spawns:
                self.spawn(spawns)
            parked = kind == PARK
            if kind == RUN:
                finished = self._run(arg)
            elif kind == TAKE:
                job = self._take(*arg)
                if job is not None:
                    finished = self._run(job)
            elif kind == RETIRE:
                return

    def _run_on(self, finished: Finished) -> tuple[Finished, list[int] | None]:
        """Keep the slot and run the next jobs of the worker's one in-memory queue.

        The common case (one built-in in-memory queue, active worker, a backlog) then costs
        no scheduler lock per job: the queue's own take is atomic, the job's claim is under
        the job's lock, and the slot simply passes from one job to the next. The outcomes
        are tallied here and counted when the thread next takes the lock. Reading the state
        without the lock is safe: the slot is still held, so a pause or stop waits for it.
        """
        sched = self._sched
        source = sched.fast_source
        tally: list[int] | None = None
        while (
            source is not None
            and sched.state is State.ACTIVE
            and sched.in_flight <= sched.concurrency
        ):
            job = source.storage.dequeue()
            if job is None:
                break
            if not job._claim():
                continue  # cancelled while it waited
            job._origin = source
            if tally is None:
                tally = [0, 0, 0, 0]
            tally[finished[3]] += 1
            if sched.idle and sched.waking == 0 and len(source.storage):
                with sched.lock:
                    sched.wake_locked()
                    spawns = sched.take_spawns_locked()
                if spawns:
                    self.spawn(spawns)
            finished = self._run(job)
            _close(finished)
            source = sched.fast_source
        return finished, tally

    def _take(self, source: StorageSource, n: int) -> StorageJob | None:
        sched = self._sched
        delivered, jobs = source.take(n, sched.decode)
        with sched.lock:
            job = sched.taken_locked(source, n, delivered, jobs)
            spawns = sched.take_spawns_locked()
        if spawns:
            self.spawn(spawns)
        return job

    def _run(self, job: Job[Any]) -> Finished:
        try:
            value = self._fn(job)
            error = None
        except BaseException as exc:
            value, error = None, exc
        return job, value, error, self._after_run(job, error)

    def _park(self, slot: Slot) -> bool:
        """Wait to be woken; ``False`` when the thread should retire instead."""
        sched = self._sched
        expiry = sched.idle_expiry if sched.idle_expiry > 0 else IDLE_GRACE
        while True:
            if slot.park.acquire(timeout=expiry):
                return True
            with sched.lock:
                if slot in sched.idle:
                    if len(sched.idle) > sched.min_idle or sched.threads > sched.concurrency:
                        sched.idle.remove(slot)
                        sched.retire_locked()
                        return False
                    continue
            # Someone took the slot off the idle list and is releasing it right now.
            slot.park.acquire()
            return True


class AsyncRunner:
    """Runs an ``async def`` job function on one event loop thread owned by the worker.

    One dispatch coroutine takes jobs while slots are free and starts a task per job; storage
    calls (takes, acknowledgements) go to a small thread pool so they never block the loop.
    """

    def __init__(
        self,
        sched: Scheduler,
        name: str,
        fn: Callable[[Any], Awaitable[Any]],
        after_run: AfterRun,
    ) -> None:
        self._sched = sched
        self._name = name
        self._fn = fn
        self._after_run = after_run
        self._slot = Slot()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._io: ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        sched.thread_limit = 1
        sched.wake_slot = self._wake

    def start_locked(self) -> None:
        sched = self._sched
        sched.threads += 1
        ready = threading.Event()
        thread = threading.Thread(
            target=self._thread_main, args=(ready,), name=f"varmq:{self._name}:loop", daemon=True
        )
        thread.start()
        ready.wait()

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._wakeup = asyncio.Event()
        self._io = ThreadPoolExecutor(4, thread_name_prefix=f"varmq:{self._name}:io")
        ready.set()
        try:
            loop.run_until_complete(self._dispatch())
        finally:
            self._io.shutdown(wait=True)
            loop.close()

    def _wake(self, slot: Slot) -> None:
        loop, wakeup = self._loop, self._wakeup
        if loop is None or wakeup is None:
            return
        if _running_loop() is loop:
            wakeup.set()
        else:
            loop.call_soon_threadsafe(wakeup.set)

    async def _dispatch(self) -> None:
        sched = self._sched
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None and self._io is not None
        while True:
            with sched.lock:
                if self._wakeup.is_set():
                    self._wakeup.clear()
                    sched.waking = max(sched.waking - 1, 0)
                kind, arg = sched.step_locked(False)
                if kind == RETIRE:
                    if sched.in_flight == 0:
                        sched.retire_locked()
                        return
                    kind = PARK
                if kind == PARK:
                    sched.idle.append(self._slot)
            if kind == RUN:
                self._start(arg)
            elif kind == TAKE:
                source, n = arg
                delivered, jobs = await loop.run_in_executor(self._io, source.take, n, sched.decode)
                with sched.lock:
                    job = sched.taken_locked(source, n, delivered, jobs)
                if job is not None:
                    self._start(job)
            else:
                await self._wakeup.wait()

    def _start(self, job: Job[Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: Job[Any]) -> None:
        sched = self._sched
        try:
            value = await self._fn(job)
            error = None
        except BaseException as exc:
            value, error = None, exc
        if isinstance(job, StorageJob) and error is not None:
            # Retrying or dead-lettering is a storage round trip: off the loop.
            outcome = await asyncio.get_running_loop().run_in_executor(
                self._io, self._after_run, job, error
            )
        elif isinstance(job, StorageJob):
            outcome = self._after_run(job, None, self._io)
        else:
            outcome = self._after_run(job, error)
        _close((job, value, error, outcome))
        with sched.lock:
            sched.finish_locked(job, outcome)
            if sched.in_flight == 0 and sched.state is State.STOPPING:
                self._wake_dispatcher_locked()

    def _wake_dispatcher_locked(self) -> None:
        sched = self._sched
        if self._slot in sched.idle:
            sched.idle.remove(self._slot)
            sched.waking += 1
            self._wake(self._slot)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
