"""A job cancelled by id while it runs is settled exactly once: by the cancel, or by its return.

Jobs without a timeout on a queue with job records are tracked by the worker's timer without a
lock (see :meth:`varmq.engine.timer.Timer.track`); these tests pin who settles such a job when the
cancel and the function's return meet.
"""

from __future__ import annotations

import threading
from typing import Any

from varmq.engine.timer import Timer
from varmq.errors import JobCancelledError
from varmq.model.jobs import Job
from varmq.model.retry import Outcome


class _Dispatch:
    """What the timer asks of the dispatcher when it settles a running job."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stopped_early = 0

    def timed_out_locked(self, outcome: Outcome, timed_out: bool = True) -> None:
        assert not timed_out  # a cancel, not a timeout
        self.stopped_early += 1


class _Source:
    label = "jobs"

    def __init__(self) -> None:
        self.settled: list[tuple[Job[Any], BaseException | None]] = []

    def settle(self, job: Job[Any], value: Any, error: BaseException | None) -> Outcome:
        self.settled.append((job, error))
        return Outcome.FAILED


def _timer() -> tuple[Timer, Any, Any]:
    dispatch: Any = _Dispatch()
    return Timer(dispatch, "test"), dispatch, _Source()


def test_a_cancel_settles_a_tracked_job_and_its_return_then_settles_nothing() -> None:
    timer, dispatch, source = _timer()
    job: Job[str] = Job("job-1", "x")
    timer.track(job)
    assert timer.cancel(source, job) is True
    assert job.cancelled.is_set()
    assert len(source.settled) == 1 and isinstance(source.settled[0][1], JobCancelledError)
    assert dispatch.stopped_early == 1
    assert timer.untrack(job) is False  # the runner must not settle it again
    assert timer.cancel(source, job) is False
    assert len(source.settled) == 1


def test_a_job_that_returned_first_is_not_settled_by_a_later_cancel() -> None:
    timer, dispatch, source = _timer()
    job: Job[str] = Job("job-1", "x")
    timer.track(job)
    assert timer.untrack(job) is True
    assert timer.cancel(source, job) is False
    assert source.settled == [] and dispatch.stopped_early == 0
    assert not job.cancelled.is_set()


def test_a_cancel_and_a_return_that_meet_settle_each_job_once() -> None:
    timer, dispatch, source = _timer()
    rounds = 2000
    returned_first = 0
    for i in range(rounds):
        job: Job[int] = Job(f"job-{i}", i)
        timer.track(job)
        start = threading.Barrier(2)
        won: list[bool] = []

        def cancel(
            job: Job[int] = job, start: threading.Barrier = start, won: list[bool] = won
        ) -> None:
            start.wait()
            won.append(timer.cancel(source, job))

        canceller = threading.Thread(target=cancel)
        canceller.start()
        start.wait()
        untracked = timer.untrack(job)
        canceller.join()
        assert won == [not untracked], f"round {i}: both or neither settled the job"
        returned_first += untracked
    # Every job was settled once: by its cancel, or by the runner after its return.
    assert len(source.settled) + returned_first == rounds
    assert dispatch.stopped_early == len(source.settled)
