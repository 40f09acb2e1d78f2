"""Adding a job and waiting for it, one at a time: the path where a parked thread is handed
the job with its wake-up, runs it and parks again in one short step."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import varmq
from tests.unit.conftest import WAIT, Gate


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("kind", ["fifo", "priority"])
def test_round_trips_one_at_a_time_each_return_their_own_value(concurrency: int, kind: str) -> None:
    worker = varmq.new_result_worker(lambda job: job.data * 2, concurrency)
    queue: Any = worker.bind_queue() if kind == "fifo" else worker.bind_priority_queue()
    for i in range(300):
        job = queue.add(i)
        assert job is not None
        assert job.result(WAIT) == 2 * i
        assert job.is_closed()
    assert worker.wait(WAIT)
    assert worker.metrics.submitted == worker.metrics.completed == 300
    assert worker.metrics.successful == 300
    assert worker.stop_and_wait(WAIT)


def fail_on_even(job: varmq.Job[int]) -> None:
    if job.data % 2 == 0:
        raise ZeroDivisionError(job.data)


def test_err_and_plain_workers_release_their_waiters() -> None:
    failing = varmq.new_err_worker(fail_on_even)
    errs = failing.bind_queue()
    plain = varmq.new_worker(lambda job: None)
    jobs = plain.bind_queue()
    for i in range(50):
        err_job = errs.add(i)
        assert err_job is not None
        error = err_job.err(WAIT)
        assert (error is None) if i % 2 else isinstance(error, ZeroDivisionError)
        job = jobs.add(i)
        assert job is not None and job.wait(WAIT)
    assert failing.wait(WAIT) and plain.wait(WAIT)
    assert failing.metrics.failed == 25 and failing.metrics.successful == 25
    assert plain.metrics.completed == 50


def test_a_job_added_to_an_idle_worker_runs_before_those_added_while_it_runs(
    gate: Any,
) -> None:
    g: Gate = gate()
    worker = varmq.new_worker(g.fn, 1)
    queue = worker.bind_queue()
    queue.add("first")  # the worker's one thread is parked: this one goes straight to it
    assert g.wait_started(1)
    for name in ("second", "third", "fourth"):
        queue.add(name)
    assert len(queue) == 3
    g.open()
    assert worker.wait(WAIT)
    assert g.started == ["first", "second", "third", "fourth"]


def test_pausing_while_a_job_runs_keeps_later_jobs_queued_until_resume(gate: Any) -> None:
    g: Gate = gate()
    worker = varmq.new_result_worker(g.fn, 1)
    queue = worker.bind_queue()
    job = queue.add(7)
    assert job is not None
    assert g.wait_started(1)
    worker.pause()
    later = queue.add(8)
    assert later is not None
    assert worker.status is varmq.Status.PAUSING
    g.open()
    assert job.result(WAIT) == 7
    assert worker.wait_until_paused(WAIT)
    assert later.status is varmq.JobStatus.QUEUED and len(queue) == 1
    worker.resume()
    assert later.result(WAIT) == 8
    assert g.started == [7, 8]


def test_a_coroutine_awaiting_a_thread_workers_jobs_is_woken_for_each() -> None:
    worker = varmq.new_result_worker(lambda job: job.data + 1, 2)
    queue = worker.bind_queue()

    async def main() -> list[Any]:
        values = []
        for i in range(100):
            job = queue.add(i)
            assert job is not None
            values.append(await job)
        return values

    assert asyncio.run(main()) == [i + 1 for i in range(100)]
    assert worker.stop_and_wait(WAIT)


def test_round_trips_from_several_threads_all_return() -> None:
    worker = varmq.new_result_worker(lambda job: job.data, 2)
    queue = worker.bind_queue()
    results: dict[int, list[int]] = {}

    def producer(n: int) -> None:
        got = []
        for i in range(200):
            job = queue.add(n * 1000 + i)
            assert job is not None
            got.append(job.result(WAIT))
        results[n] = got

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert {n: results[n] for n in range(4)} == {
        n: [n * 1000 + i for i in range(200)] for n in range(4)
    }
    assert worker.wait(WAIT)
    assert worker.metrics.completed == 800
