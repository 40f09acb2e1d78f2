"""Where job functions run: threads for plain functions, one event loop for coroutines.

Both runners drive the same :class:`~varmq.dispatch.Dispatcher` step, so concurrency,
lifecycle and metrics are identical. Neither has a dispatcher thread in front of it: a thread
(or the loop's dispatch coroutine) takes the next job itself, runs it, and hands the run to the
job's source to settle (:meth:`~varmq.sources.Source.settle`) before its slot is released. A
thread runs a job a producer handed it with its wake-up (see
:meth:`~varmq.dispatch.Dispatcher.hand_over`) before stepping.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .dispatch import Dispatcher, Slot
from .errors import JobCancelledError, JobTimeoutError
from .job import LOOP_IDENTS, LOOP_THREAD, Job
from .queues import TAKING, Taker
from .retry import Outcome
from .sources import Source, Step
from .states import State

if TYPE_CHECKING:
    from .timer import Timer

__all__ = ["AsyncRunner", "ThreadRunner"]
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
        # Each thread's record of what it takes lock-free (see TakenJobs), made once per thread.
        self._takers = threading.local()

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
            self._forget_taker()

    def _loop(self, slot: Slot, parked: bool) -> None:
        dispatch = self._dispatch
        taker = self._taker()
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
                            parked = dispatch.parked_after_locked(origin, slot)
                        if parked:
                            continue
                    finished = origin, outcome
            tally: list[int] | None = None
            if finished is not None and dispatch.fast is not None:
                finished, tally = self._run_on(finished, taker)
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

    def _run_on(
        self, finished: tuple[Source, Outcome | None], taker: Taker
    ) -> tuple[tuple[Source, Outcome | None], list[int] | None]:
        """Keep the slot and run the next jobs of the worker's one lock-free in-memory queue.

        The common case (one built-in in-memory queue, active worker, a backlog) then costs
        no dispatcher lock per job: the queue's own take is atomic, the job's claim is under
        the job's lock, and the slot simply passes from one job to the next. The outcomes
        are tallied here and counted when the thread next takes the lock. Reading the state
        without the lock is safe: the slot is still held, so a pause or stop waits for it.
        The handle taken is kept in this thread's :class:`~varmq.queues.Taker`, where a
        snapshot finds it (see :class:`~varmq.queues.TakenJobs`).
        """
        dispatch = self._dispatch
        fast = dispatch.fast
        tally: list[int] | None = None
        taken = finished[0].taken
        if fast is None or taken is None:
            return finished, None
        if taker not in taken.takers:  # registered once per thread and queue (see _main)
            taken.takers.add(taker)
            taker.registered.append(taken)
        while (
            fast is not None
            and finished[1] is not None
            and fast[0] is finished[0]
            and dispatch.state is _ACTIVE
            and dispatch.in_flight <= dispatch.concurrency
        ):
            source, queue = fast
            taker.job = TAKING  # then check for a snapshot: see TakenJobs
            if taken.cutting:
                taker.job = None
                break
            item = queue.dequeue()
            if item is None:
                taker.job = None  # the record stays registered: it must not hold TAKING
                break
            try:
                claimed = item._claim()
            except AttributeError:  # not a job handle: what the locked take would do
                taker.job = None
                job = source.runnable(item)
                if job is None:
                    continue
            else:
                if not claimed:
                    taker.job = None
                    continue  # cancelled while it waited
                taker.job = job = item
            if tally is None:
                tally = [0, 0, 0, 0]
            tally[finished[1]] += 1
            if dispatch.idle and dispatch.waking == 0 and len(queue):
                with dispatch.lock:
                    dispatch.wake_locked()
                    spawns = dispatch.take_spawns_locked()
                if spawns:
                    self.spawn(spawns)
            finished = source, self._run(source, job)
            fast = dispatch.fast
        return finished, tally

    def _taker(self) -> Taker:
        taker: Taker | None = getattr(self._takers, "taker", None)
        if taker is None:
            self._takers.taker = taker = Taker()
        return taker

    def _forget_taker(self) -> None:
        """The thread ends: its record leaves every queue it took from."""
        taker: Taker | None = getattr(self._takers, "taker", None)
        if taker is not None:
            for taken in taker.registered:
                taken.takers.discard(taker)

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
        if timeout is not None:
            watch = self._timer().watch(source, job, timeout)
        elif cancellable:
            self._timer().track(job)
        # Cancelled before it started (watched first, so a cancel now is not missed): settled
        # as cancelled without running.
        if cancellable and job._cancel_requested() and self.cancel(source, job):
            return None
        dispatch = self._dispatch
        started = dispatch.run_started(source, job) if dispatch.metrics.observing else 0.0
        try:
            value = self._fn(job)
            error = None
        except BaseException as exc:
            value, error = None, exc
        if started:
            dispatch.run_ended(source, job, started)
        if watch is not None:
            if not self._timer().unwatch(watch):
                return None  # its timeout passed, or a cancel came, first: settled
        elif cancellable and not self._timer().untrack(job):
            return None  # a cancel came first: settled
        try:
            return source.settle(job, value, error)
        except Exception:
            return self._settle_failed(source, job)

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


class AsyncRunner:
    """Runs an ``async def`` job function on one event loop: its own thread's, or the loop of
    the caller of ``Worker.serve()`` (:meth:`host_on`), for one run of the worker.

    One dispatch coroutine takes jobs while slots are free and starts a task per job; storage
    calls (takes, acknowledgements) go to a small thread pool so they never block the loop.
    """

    # The one dispatch coroutine, whatever the concurrency.
    thread_limit: int | None = 1
    # Its dispatch coroutine steps for every job: no job is handed to it with a wake-up.
    takes_handed = False

    def __init__(
        self,
        dispatch: Dispatcher,
        name: str,
        fn: Callable[[Any], Awaitable[Any]],
        timeout: float | None,
    ) -> None:
        self._dispatch = dispatch
        self._name = name
        self._fn = fn
        self._timeout = timeout
        self._slot = Slot()
        # The loop that runs jobs now, and the caller's loop for the next start (serve()).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._host: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._io: ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # The tasks running the functions of jobs that may be cancelled by id, by id of the job;
        # touched only on the loop.
        self._cancellable: dict[int, asyncio.Future[Any]] = {}

    def host_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the jobs of the worker's next start on ``loop`` (the caller's), not a thread."""
        self._host = loop

    def start_locked(self) -> None:
        self._dispatch.thread_added_locked(None)
        host, self._host = self._host, None
        if host is not None:  # serve(): on the caller's loop, which is running this call
            self._prepare(host)
            host.create_task(self._hosted_dispatch())
            return
        ready = threading.Event()
        thread = threading.Thread(
            target=self._thread_main, args=(ready,), name=f"varmq:{self._name}:loop", daemon=True
        )
        thread.start()
        ready.wait()

    def _prepare(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wakeup = asyncio.Event()
        self._io = ThreadPoolExecutor(4, thread_name_prefix=f"varmq:{self._name}:io")

    async def _hosted_dispatch(self) -> None:
        LOOP_THREAD.dispatch = self._dispatch
        ident = threading.get_ident()
        LOOP_IDENTS.add(ident)
        try:
            await self._dispatch_loop()
        finally:
            LOOP_THREAD.dispatch = None
            LOOP_IDENTS.discard(ident)
            assert self._io is not None
            self._io.shutdown(wait=False)  # the loop is the caller's: never block it

    def spawn(self, n: int) -> None:
        return None  # the one loop thread is started with the worker

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._prepare(loop)
        LOOP_THREAD.dispatch = self._dispatch
        LOOP_IDENTS.add(threading.get_ident())
        ready.set()
        try:
            loop.run_until_complete(self._dispatch_loop())
        finally:
            LOOP_IDENTS.discard(threading.get_ident())
            assert self._io is not None
            self._io.shutdown(wait=True)
            loop.close()

    def cancel(self, source: Source, job: Job[Any]) -> bool:
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(self._cancel_on_loop, job)
        except RuntimeError:  # the loop is closed: nothing runs there any more
            return False
        return True

    def _cancel_on_loop(self, job: Job[Any]) -> None:
        task = self._cancellable.get(id(job))
        if task is not None:
            task.cancel()

    def wake(self, slot: Slot) -> None:
        loop, wakeup = self._loop, self._wakeup
        if loop is None or wakeup is None:
            return
        if _running_loop() is loop:
            wakeup.set()
        else:
            loop.call_soon_threadsafe(wakeup.set)

    async def _dispatch_loop(self) -> None:
        dispatch = self._dispatch
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None and self._io is not None
        while True:
            with dispatch.lock:
                if self._wakeup.is_set():
                    self._wakeup.clear()
                    dispatch.woken_locked()
                step, source, arg = dispatch.step_locked(False)
                if step is _RETIRE:
                    if dispatch.in_flight == 0:
                        dispatch.retire_locked()
                        return
                    step = _PARK
                if step is _PARK:
                    dispatch.parked_locked(self._slot)
            if step is _RUN:
                assert source is not None
                self._start(source, arg)
            elif step is _TAKE:
                assert source is not None
                delivered, jobs = await loop.run_in_executor(self._io, source.take, arg)
                with dispatch.lock:
                    job = dispatch.taken_locked(source, arg, delivered, jobs)
                if job is not None:
                    self._start(source, job)
            else:
                await self._wakeup.wait()

    def _start(self, source: Source, job: Job[Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(source, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, source: Source, job: Job[Any]) -> None:
        dispatch = self._dispatch
        extra = job._extra
        timeout = self._timeout if extra is None or extra.timeout is None else extra.timeout
        timed_out = cancelled = False
        started = dispatch.run_started(source, job)
        try:
            if timeout is None and not source.cancellable:
                value = await self._fn(job)
            else:
                value, timed_out, cancelled = await self._run_within(source, job, timeout)
            error: BaseException | None = None
            if timed_out:
                error = JobTimeoutError(job.id, source.label, timeout)  # type: ignore[arg-type]
            elif cancelled:
                error = JobCancelledError(job.id, running=True)
        except BaseException as exc:
            value, error = None, exc
        if started:
            dispatch.run_ended(source, job, started)
        try:
            outcome = await source.settle_async(job, value, error, self._io)
        except Exception:
            log.exception(
                "varmq: worker %s could not settle job %r of queue %r; its slot is given back "
                "and the storage's lease decides what happens to the job",
                self._name,
                job.id,
                source.label,
            )
            outcome = Outcome.FAILED
        with dispatch.lock:
            dispatch.finish_locked(source, outcome, timed_out=timed_out)
            if dispatch.in_flight == 0 and dispatch.state is _STOPPING:
                self._wake_dispatcher_locked()

    async def _run_within(
        self, source: Source, job: Job[Any], timeout: float | None
    ) -> tuple[Any, bool, bool]:
        """Run ``job`` for at most ``timeout`` seconds (``None``: no limit) in a task of its
        own: ``(value, timed out, cancelled by id)``. At its timeout, or when it is cancelled by
        id (:meth:`cancel`), the task is cancelled (the job sees ``CancelledError``)."""
        task = asyncio.ensure_future(self._fn(job))
        if source.cancellable:
            self._cancellable[id(job)] = task
            if job._cancel_requested():
                task.cancel()  # cancelled before it started: it never runs
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if done:
                if task.cancelled() and job._cancel_requested():
                    return None, False, True
                return task.result(), False, False
            job._request_cancel()
            task.cancel()
            # A job that ignores the cancellation keeps its slot until it ends on its own.
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is None:
                return task.result(), False, False  # it finished as it was cancelled
            return None, True, False
        finally:
            self._cancellable.pop(id(job), None)

    def _wake_dispatcher_locked(self) -> None:
        self._dispatch.unpark_locked(self._slot)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
