"""The fast path: how an in-memory job skips the dispatcher's step, in one place.

A worker whose only queue is a built-in in-memory one (the common case in a service: one
``bind_queue()``) runs most jobs without the general step of :mod:`varmq.engine.dispatch`:

- **hand-over** (:func:`hand_over`): a producer adding to an idle worker gives the job to a
  parked thread with its wake-up, under the dispatcher's lock, instead of putting it in the
  queue for the thread to take back out; the thread runs it without taking the lock;
- **park after a run** (:func:`parked_after_locked`): a thread whose job returned and that has
  nothing else to start counts the run and parks in one short step under the lock;
- **backlog** (:func:`run_backlog`): while jobs wait, a thread keeps its slot and takes the next
  job straight from the queue, without the lock (the queue's own take is atomic, a job's claim
  is under the job's lock), tallying outcomes to count at its next step.

The lock-free take is safe only under the GIL, and a snapshot must still see every job once:
each taking thread records what it took in its :class:`~varmq.sources.taken.Taker` (made once
per thread, :func:`thread_taker`), registered with the queue's
:class:`~varmq.sources.taken.TakenJobs`, whose docstring states the protocol. Whether a worker
takes this path is decided when its queues change
(:meth:`~varmq.engine.dispatch.Dispatcher.add_source`: ``fast``, ``handing``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.jobs import EnqueuedJob, Job
from ..model.retry import Outcome
from ..model.states import State
from ..sources.base import Source
from ..sources.taken import TAKING, Taker

if TYPE_CHECKING:
    from .dispatch import Dispatcher, Slot

__all__ = ["forget_thread_taker", "hand_over", "parked_after_locked", "run_backlog", "thread_taker"]

# Enum members as module globals: read for every job (see thread_runner.py).
_ACTIVE = State.ACTIVE

Finished = tuple[Source, "Outcome | None"]
"""A run that just ended: its source, and its outcome (``None``: settled at its timeout)."""

# Each thread's record of what it takes lock-free, made once per thread.
_TAKERS = threading.local()


def hand_over(dispatch: Dispatcher, source: Source, job: EnqueuedJob[Any]) -> bool:
    """Give ``job``, just made by a producer, straight to a parked thread, without putting
    it in ``source``'s storage: when nobody is on the way to take it and nothing waits in
    the storage (which is open), the thread's step would take this very job. Whether it
    was handed over; if not, the caller adds it the usual way. A hand-over counts as an
    add (``submitted``); the woken thread runs the job without taking the lock.

    The producer calls it while the worker has an idle thread (``dispatch.idle``); what it
    reads before taking the lock is a hint, checked again under it, so that a busy worker
    costs its producers no lock.
    """
    if dispatch.waking or dispatch.handing is not source or len(source.storage):
        return False
    with dispatch.lock:
        if (
            dispatch.waking
            or not dispatch.idle
            or source is not dispatch.handing
            or dispatch.state is not _ACTIVE
            or dispatch.in_flight >= dispatch.concurrency
            or dispatch.buffer
            or not source.storage.is_empty_and_open()
            or not job._claim()
        ):
            return False
        dispatch.metrics.submitted += 1
        source.started_locked(job)
        dispatch.in_flight += 1
        slot = dispatch.idle.pop()
        slot.handed = source, job
    slot.park.release()  # ThreadRunner.wake, the producer's last step in add
    return True


def parked_after_locked(dispatch: Dispatcher, source: Source, slot: Slot) -> bool:
    """The common end of a run: a job of ``source`` (the worker's only queue, in memory)
    returned, the worker is active and has nothing else to start. Count it, give its slot
    back and park ``slot``, as the dispatcher's ``finish_locked``, ``step_locked`` and
    ``parked_locked`` would, and return True; False, having done nothing, when anything
    else applies. The caller holds the dispatcher's lock."""
    if (
        source is not dispatch.handing
        or dispatch.state is not _ACTIVE
        or dispatch.buffer
        or dispatch.threads > dispatch.concurrency
        or len(source.storage)
    ):
        return False
    metrics = dispatch.metrics
    metrics.successful += 1
    metrics.completed += 1
    source.running -= 1
    dispatch.in_flight -= 1
    if dispatch.in_flight == dispatch.abandoned and dispatch.waiters:
        dispatch.notify_locked()  # settled: callers of wait() look again
    dispatch.idle.append(slot)
    return True


def run_backlog(
    dispatch: Dispatcher,
    finished: Finished,
    taker: Taker,
    run: Callable[[Source, Job[Any]], Outcome | None],
    spawn: Callable[[int], None],
) -> tuple[Finished, list[int] | None]:
    """Keep the slot and run the next jobs of the worker's one lock-free in-memory queue:
    ``finished`` is the source and outcome of the run that just ended, ``run(source, job)``
    runs the next one, ``spawn(n)`` starts threads; the last run's ``finished`` and the
    tally of the outcomes, for :meth:`~varmq.engine.dispatch.Dispatcher.count_locked`.

    The common case (one built-in in-memory queue, active worker, a backlog) then costs
    no dispatcher lock per job: the queue's own take is atomic, the job's claim is under
    the job's lock, and the slot simply passes from one job to the next. The outcomes
    are tallied here and counted when the thread next takes the lock. Reading the state
    without the lock is safe: the slot is still held, so a pause or stop waits for it.
    The handle taken is kept in this thread's :class:`~varmq.sources.taken.Taker`, where a
    snapshot finds it (see :class:`~varmq.sources.taken.TakenJobs`).
    """
    fast = dispatch.fast
    tally: list[int] | None = None
    taken = finished[0].taken
    if fast is None or taken is None:
        return finished, None
    if taker not in taken.takers:  # registered once per thread and queue
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
                spawn(spawns)
        finished = source, run(source, job)
        fast = dispatch.fast
    return finished, tally


def thread_taker() -> Taker:
    """The calling thread's record of what it takes lock-free."""
    taker: Taker | None = getattr(_TAKERS, "taker", None)
    if taker is None:
        _TAKERS.taker = taker = Taker()
    return taker


def forget_thread_taker() -> None:
    """The calling thread ends: its record leaves every queue it took from."""
    taker: Taker | None = getattr(_TAKERS, "taker", None)
    if taker is not None:
        for taken in taker.registered:
            taken.takers.discard(taker)
