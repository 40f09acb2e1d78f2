"""``async def`` job functions, and awaiting job handles from asyncio code."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import varmq
from varmq import Status

WAIT = 10.0
SHORT = 0.1
KINDS = ["new_worker", "new_err_worker", "new_result_worker"]


class AsyncHold:
    """An async job function whose jobs wait on an asyncio.Event of the worker's loop.

    ``inside`` and ``peak`` are counted under a lock: ``peak`` is the most jobs that were
    inside the function at the same time.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()  # guards everything below
        self.loop: asyncio.AbstractEventLoop | None = None
        self.event: asyncio.Event | None = None
        self.inside = 0
        self.peak = 0
        self.started = 0
        self.finished = 0

    async def fn(self, job: varmq.Job[Any]) -> Any:
        with self._cond:
            if self.event is None:
                self.loop = asyncio.get_running_loop()
                self.event = asyncio.Event()
            event = self.event
            self.inside += 1
            self.started += 1
            self.peak = max(self.peak, self.inside)
            self._cond.notify_all()
        try:
            await asyncio.wait_for(event.wait(), WAIT)
        finally:
            with self._cond:
                self.inside -= 1
                self.finished += 1
                self._cond.notify_all()
        if job.data == "bad":
            raise ValueError("bad job")
        return job.data

    def wait_started(self, n: int, timeout: float = WAIT) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.started >= n, timeout)

    def release(self) -> None:
        with self._cond:
            loop, event = self.loop, self.event
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)


@pytest.fixture
def hold() -> Any:
    made: list[AsyncHold] = []

    def make() -> AsyncHold:
        h = AsyncHold()
        made.append(h)
        return h

    yield make
    for h in made:
        h.release()


@pytest.mark.parametrize("kind", KINDS)
def test_async_job_function_obeys_the_concurrency_limit(kind: str, hold: Any) -> None:
    h = hold()
    worker = getattr(varmq, kind)(h.fn, 3)
    queue = worker.bind_queue()
    jobs = [queue.add(i) for i in range(12)]
    assert h.wait_started(3)
    assert not h.wait_started(4, timeout=SHORT), "a fourth job started with concurrency 3"
    assert worker.num_processing == 3
    assert worker.status is Status.RUNNING
    h.release()
    assert all(job.wait(WAIT) for job in jobs)
    assert worker.wait(WAIT)
    assert h.peak == 3
    assert h.finished == 12
    assert worker.metrics.completed == 12


@pytest.mark.parametrize("kind", KINDS)
def test_async_job_function_runs_many_jobs_at_once_up_to_the_limit(kind: str, hold: Any) -> None:
    h = hold()
    worker = getattr(varmq, kind)(h.fn, 20)
    queue = worker.bind_queue()
    for i in range(20):
        queue.add(i)
    assert h.wait_started(20), "async jobs did not overlap up to the concurrency"
    h.release()
    assert worker.wait(WAIT)
    assert h.peak == 20


def test_async_result_and_err_workers_give_values_and_exceptions() -> None:
    async def double(job: varmq.Job[int]) -> int:
        await asyncio.sleep(0)
        if job.data < 0:
            raise ValueError("negative")
        return job.data * 2

    results = varmq.new_result_worker(double, 2)
    rq = results.bind_queue()
    good, bad = rq.add(21), rq.add(-1)
    assert good.result(WAIT) == 42
    with pytest.raises(ValueError, match="negative"):
        bad.result(WAIT)

    errs = varmq.new_err_worker(double, 2)
    eq = errs.bind_priority_queue()
    ok, failed = eq.add(1, 1), eq.add(-1, 0)
    assert ok.err(WAIT) is None
    assert isinstance(failed.err(WAIT), ValueError)
    assert errs.wait(WAIT)
    assert (errs.metrics.successful, errs.metrics.failed) == (1, 1)
    assert isinstance(errs.errs().get(timeout=WAIT), ValueError)


def test_async_plain_worker_counts_failures_and_reports_them() -> None:
    handled: list[BaseException] = []

    async def fn(job: varmq.Job[str]) -> None:
        if job.data == "bad":
            raise KeyError(job.data)

    worker = varmq.new_worker(fn, error_handler=lambda w, e: handled.append(e))
    queue = worker.bind_queue()
    queue.add("ok")
    queue.add("bad")
    assert worker.wait(WAIT)
    assert (worker.metrics.successful, worker.metrics.failed) == (1, 1)
    assert len(handled) == 1 and isinstance(handled[0], KeyError)


def test_async_worker_pauses_only_after_its_job_in_flight_finished(hold: Any) -> None:
    h = hold()
    worker = varmq.new_worker(h.fn, 2)
    queue = worker.bind_queue()
    for i in range(4):
        queue.add(i)
    assert h.wait_started(2)
    worker.pause()
    assert worker.status is Status.PAUSING
    h.release()
    assert worker.wait_until_paused(WAIT)
    assert h.finished == 2
    assert len(queue) == 2
    worker.resume()
    assert worker.wait(WAIT)
    assert h.finished == 4


def test_async_worker_stops_only_after_its_jobs_in_flight_finished(hold: Any) -> None:
    h = hold()
    worker = varmq.new_result_worker(h.fn, 2)
    queue = worker.bind_queue()
    jobs = [queue.add(i) for i in range(4)]
    assert h.wait_started(2)
    worker.stop()
    assert worker.status is Status.STOPPING
    assert not worker.wait_until_stopped(SHORT)
    h.release()
    assert worker.wait_until_stopped(WAIT)
    assert [job.result(0) for job in jobs[:2]] == [0, 1]
    assert len(queue) == 2
    worker.start()
    assert [job.result(WAIT) for job in jobs[2:]] == [2, 3]


def test_async_worker_tune_pool_up_lets_more_jobs_run(hold: Any) -> None:
    h = hold()
    worker = varmq.new_worker(h.fn, 1)
    queue = worker.bind_queue()
    for i in range(5):
        queue.add(i)
    assert h.wait_started(1)
    worker.tune_pool(4)
    assert h.wait_started(4)
    assert not h.wait_started(5, timeout=SHORT)
    h.release()
    assert worker.wait(WAIT)
    assert h.peak == 4


@pytest.mark.parametrize("kind", KINDS)
def test_async_worker_with_concurrency_one_runs_a_whole_backlog(kind: str) -> None:
    ran: list[int] = []

    async def fn(job: varmq.Job[int]) -> int:
        ran.append(job.data)
        return job.data

    worker = getattr(varmq, kind)(fn, 1, auto_run=False)
    queue = worker.bind_queue()
    jobs = [queue.add(i) for i in range(5)]
    worker.start()
    assert all(job.wait(WAIT) for job in jobs), f"only {ran} ran"
    assert ran == [0, 1, 2, 3, 4]


def test_async_worker_runs_jobs_added_one_after_another_while_busy() -> None:
    ran: list[str] = []

    async def fn(job: varmq.Job[str]) -> None:
        ran.append(job.data)

    worker = varmq.new_worker(fn)
    queue = worker.bind_queue()
    queue.add("ok")
    queue.add("bad")
    assert worker.wait(WAIT), f"only {ran} ran"


def test_async_worker_restart_keeps_pending_jobs() -> None:
    ran: list[int] = []

    async def fn(job: varmq.Job[int]) -> None:
        ran.append(job.data)

    worker = varmq.new_worker(fn)
    queue = worker.bind_queue()
    worker.pause()
    for i in range(3):
        queue.add(i)
    worker.restart()
    assert worker.wait(WAIT)
    assert ran == [0, 1, 2]


# -- awaiting job handles -----------------------------------------------------------------


def test_await_handle_does_not_block_the_event_loop(gate: Any) -> None:
    # The job only ends after a ticker task on the caller's loop opened its gate: if awaiting
    # the handle blocked the loop, the ticker could not run and the job would end by its
    # gate's timeout instead, reporting False.
    opened_by_ticker = threading.Event()
    g = gate()

    def job_fn(job: varmq.Job[Any]) -> bool:
        g.fn(job)
        return opened_by_ticker.is_set()

    worker = varmq.new_result_worker(job_fn)
    queue = worker.bind_queue()

    async def main() -> tuple[bool, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while ticks < 5:
                await asyncio.sleep(0.01)
                ticks += 1
            opened_by_ticker.set()
            g.open()

        job = queue.add("x")
        task = asyncio.create_task(ticker())
        value = await job
        await task
        return value, ticks

    value, ticks = asyncio.run(main())
    assert value is True
    assert ticks == 5


def test_await_result_handle_gives_the_value_or_raises_the_exception() -> None:
    async def fn(job: varmq.Job[int]) -> int:
        if job.data < 0:
            raise ValueError("negative")
        return job.data + 1

    worker = varmq.new_result_worker(fn)
    queue = worker.bind_queue()

    async def main() -> None:
        assert await queue.add(1) == 2
        with pytest.raises(ValueError, match="negative"):
            await queue.add(-1)

    asyncio.run(main())


def test_await_err_handle_gives_the_exception_or_none() -> None:
    worker = varmq.new_err_worker(lambda job: 1 / job.data)
    queue = worker.bind_queue()

    async def main() -> tuple[Any, Any]:
        return await queue.add(1), await queue.add(0)

    ok, failed = asyncio.run(main())
    assert ok is None
    assert isinstance(failed, ZeroDivisionError)


def test_await_plain_handle_gives_none_after_the_job_ran(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn)
    queue = worker.bind_queue()

    async def main() -> Any:
        return await queue.add("x")

    assert asyncio.run(main()) is None
    assert recorder.ran == ["x"]


def test_await_a_finished_or_cancelled_handle_returns_at_once() -> None:
    worker = varmq.new_result_worker(lambda job: job.data, auto_run=False)
    queue = worker.bind_queue()
    cancelled = queue.add("cancelled")
    cancelled.close()
    done = queue.add("done")
    worker.start()
    assert done.wait(WAIT)

    async def main() -> Any:
        with pytest.raises(varmq.JobCancelledError):
            await cancelled
        return await done

    assert asyncio.run(main()) == "done"


def test_many_handles_awaited_together_with_gather() -> None:
    async def fn(job: varmq.Job[int]) -> int:
        await asyncio.sleep(0.001)
        return job.data * job.data

    worker = varmq.new_result_worker(fn, 8)
    queue = worker.bind_queue()

    async def main() -> list[int]:
        return await asyncio.gather(*(queue.add(i) for i in range(50)))

    assert asyncio.run(main()) == [i * i for i in range(50)]


def test_await_that_timed_out_on_a_loop_that_has_since_closed_harms_nothing(gate: Any) -> None:
    # A caller gives up awaiting (wait_for timed out) and its event loop ends before the job
    # does. The job still finishes normally, other waiters are released, and the worker keeps
    # working and can be stopped.
    g = gate()
    worker = varmq.new_result_worker(g.fn)
    queue = worker.bind_queue()
    job = queue.add("slow")
    assert g.wait_started(1)

    async def give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_awaitable(job), SHORT)

    asyncio.run(give_up())
    waiter = threading.Thread(target=job.wait, args=(WAIT,))
    waiter.start()
    g.open()
    assert job.result(WAIT) == "slow"
    waiter.join(WAIT)
    assert not waiter.is_alive()
    later = queue.add("later")
    assert later.result(WAIT) == "later"
    assert worker.stop_and_wait(WAIT)


def test_group_completes_when_an_await_on_a_member_was_abandoned(gate: Any) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn)
    group = worker.bind_queue().add_all(["a", "b"])
    assert g.wait_started(1)

    async def give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_awaitable(group.jobs[0]), SHORT)

    asyncio.run(give_up())
    g.open()
    assert group.wait(WAIT)
    assert sorted(r.data for r in group.results()) == ["a", "b"]


async def _awaitable(job: Any) -> Any:
    return await job
