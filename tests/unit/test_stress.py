"""Concurrency under load: many producers, cancelling while the worker takes, pause/stop with
jobs in flight, and the priority order as a property."""

from __future__ import annotations

import collections
import random
import threading
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import varmq
from varmq import Status

WAIT = 30.0


def test_eight_producers_adding_ten_thousand_each_run_every_job_exactly_once() -> None:
    counts: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def fn(job: varmq.Job[int]) -> None:
        with lock:
            counts[job.data] += 1

    worker = varmq.new_worker(fn, 4)
    queue = worker.bind_queue()
    barrier = threading.Barrier(8)
    refused: list[int] = []

    def produce(p: int) -> None:
        barrier.wait()
        for i in range(10_000):
            if queue.add(p * 10_000 + i) is None:
                refused.append(p * 10_000 + i)

    producers = [threading.Thread(target=produce, args=(p,)) for p in range(8)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    assert refused == []
    assert worker.wait(WAIT)
    assert len(counts) == 80_000
    assert set(counts.values()) == {1}
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful, m.failed) == (80_000, 80_000, 80_000, 0)


def test_priority_queue_with_concurrent_producers_runs_every_job_exactly_once() -> None:
    counts: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def fn(job: varmq.Job[int]) -> None:
        with lock:
            counts[job.data] += 1

    worker = varmq.new_worker(fn, 3)
    queue = worker.bind_priority_queue()

    def produce(p: int) -> None:
        for i in range(2_000):
            queue.add(p * 2_000 + i, i % 7)

    producers = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    assert worker.wait(WAIT)
    assert len(counts) == 8_000
    assert set(counts.values()) == {1}


def test_cancelling_jobs_while_the_worker_takes_them_is_atomic() -> None:
    # Each job either was cancelled (and never ran) or ran (and could not be cancelled). The
    # canceller follows the worker's frontier: it closes every fourth job as soon as the worker
    # took one of the three jobs before it, so each close races with the worker's threads
    # taking that very job.
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def fn(job: varmq.Job[int]) -> int:
        with lock:
            ran[job.data] += 1
        time.sleep(0)  # let the canceller run between jobs
        return job.data

    worker = varmq.new_result_worker(fn, 4)
    queue = worker.bind_queue()
    worker.pause()
    jobs = [queue.add(i) for i in range(5_000)]
    outcomes: dict[int, str] = {}

    def cancel_at_the_frontier() -> None:
        deadline = time.monotonic() + WAIT
        lag = random.Random(7)
        for i in range(3, len(jobs), 4):
            ahead = jobs[i - lag.randint(1, 3)]
            while ahead.status is varmq.JobStatus.QUEUED:
                assert time.monotonic() < deadline, "the worker stopped taking jobs"
                time.sleep(0)  # yield to the worker's threads
            job = jobs[i]
            try:
                job.close()
                outcomes[job.data] = "cancelled"
            except varmq.JobProcessingError:
                outcomes[job.data] = "processing"
            except varmq.JobAlreadyClosedError:
                outcomes[job.data] = "closed"
            except BaseException as exc:  # reported by the assertion below
                outcomes[job.data] = f"unexpected {exc!r}"

    canceller = threading.Thread(target=cancel_at_the_frontier)
    worker.resume()
    canceller.start()
    canceller.join()
    assert worker.wait(WAIT)
    assert [o for o in outcomes.values() if o.startswith("unexpected")] == []
    assert len(outcomes) == 1_250
    cancelled = {i for i, o in outcomes.items() if o == "cancelled"}
    assert set(ran.values()) <= {1}, "a job ran twice"
    assert cancelled.isdisjoint(ran), "a cancelled job ran"
    assert set(ran) | cancelled == set(range(5_000)), "a job neither ran nor was cancelled"
    assert cancelled, "the canceller never won a race with the worker"
    for job in jobs:
        assert job.is_closed()
        if job.data in cancelled:
            assert isinstance(job.err(0), varmq.JobCancelledError)
        else:
            assert job.result(0) == job.data
    assert worker.errs().qsize() == 0
    m = worker.metrics
    assert m.completed == len(ran)
    assert m.successful == len(ran)
    assert m.submitted == 5_000


def test_cancelling_from_several_threads_while_the_worker_takes_is_atomic() -> None:
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def fn(job: varmq.Job[int]) -> None:
        with lock:
            ran[job.data] += 1

    worker = varmq.new_err_worker(fn, 2, auto_run=False)
    queue = worker.bind_priority_queue()
    jobs = [queue.add(i, i % 5) for i in range(3_000)]
    barrier = threading.Barrier(3)
    won: collections.Counter[int] = collections.Counter()
    won_lock = threading.Lock()

    def cancel(offset: int) -> None:
        barrier.wait()
        for job in jobs[offset::2] + jobs[1 - offset :: 2]:
            try:
                job.close()
            except (varmq.JobProcessingError, varmq.JobAlreadyClosedError):
                continue
            with won_lock:
                won[job.data] += 1

    threads = [threading.Thread(target=cancel, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    barrier.wait()
    worker.start()
    for t in threads:
        t.join()
    assert worker.wait(WAIT)
    assert set(won.values()) <= {1}, "two threads both cancelled the same job"
    assert set(won).isdisjoint(ran)
    assert set(won) | set(ran) == set(range(3_000))
    assert all(job.is_closed() for job in jobs)
    assert worker.metrics.completed == len(ran)


class Tally:
    """A job function counting jobs started and finished (each does a little work)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards started and finished
        self.started = 0
        self.finished = 0

    def fn(self, job: varmq.Job[int]) -> None:
        with self.lock:
            self.started += 1
        time.sleep(0.0005)  # the job's work
        with self.lock:
            self.finished += 1


def test_pause_with_jobs_in_flight_reaches_paused_only_after_they_finished() -> None:
    tally = Tally()
    worker = varmq.new_worker(tally.fn, 4)
    queue = worker.bind_queue()
    jobs = [queue.add(i) for i in range(3_000)]
    for _ in range(10):
        worker.pause()
        assert worker.wait_until_paused(WAIT)
        with tally.lock:
            started, finished = tally.started, tally.finished
        assert started == finished, "paused with a job still running"
        assert worker.num_processing == 0
        assert worker.metrics.completed == finished
        assert sum(job.is_closed() for job in jobs) == finished
        assert len(queue) == 3_000 - finished
        worker.resume()
    assert worker.wait(WAIT)
    assert tally.finished == 3_000


def test_stop_with_jobs_in_flight_reaches_stopped_only_after_they_finished() -> None:
    tally = Tally()
    worker = varmq.new_worker(tally.fn, 4)
    queue = worker.bind_queue()
    jobs = [queue.add(i) for i in range(3_000)]
    for _ in range(10):
        worker.stop()
        assert worker.wait_until_stopped(WAIT)
        with tally.lock:
            started, finished = tally.started, tally.finished
        assert started == finished, "stopped with a job still running"
        assert worker.num_processing == 0
        assert worker.metrics.completed == finished
        assert sum(job.is_closed() for job in jobs) == finished
        assert len(queue) == 3_000 - finished, "a taken job was dropped"
        worker.start()
    assert worker.wait(WAIT)
    assert tally.finished == 3_000
    assert worker.metrics.completed == 3_000


def test_async_stop_and_pause_with_jobs_in_flight_never_strand_a_taken_job() -> None:
    import asyncio

    lock = threading.Lock()  # guards counts
    counts = {"started": 0, "finished": 0}

    async def fn(job: varmq.Job[int]) -> None:
        with lock:
            counts["started"] += 1
        await asyncio.sleep(0.0005)
        with lock:
            counts["finished"] += 1

    worker = varmq.new_worker(fn, 8)
    queue = worker.bind_queue()
    for i in range(2_000):
        queue.add(i)
    for round_ in range(10):
        if round_ % 2:
            worker.stop()
            assert worker.wait_until_stopped(WAIT)
        else:
            worker.pause()
            assert worker.wait_until_paused(WAIT)
        with lock:
            assert counts["started"] == counts["finished"]
            assert worker.metrics.completed == counts["finished"]
            assert len(queue) == 2_000 - counts["finished"]
        if round_ % 2:
            worker.start()
        else:
            worker.resume()
    assert worker.wait(WAIT)
    assert counts["finished"] == 2_000


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.integers(min_value=-5, max_value=5), min_size=1, max_size=40))
def test_priority_queue_hands_out_jobs_in_priority_then_insertion_order(
    priorities: list[int],
) -> None:
    ran: list[int] = []
    worker = varmq.new_worker(lambda job: ran.append(job.data), 1, auto_run=False)
    try:
        queue = worker.bind_priority_queue()
        for index, priority in enumerate(priorities):
            queue.add(index, priority)
        worker.start()
        assert worker.wait(WAIT)
        assert ran == sorted(range(len(priorities)), key=lambda i: (priorities[i], i))
    finally:
        if worker.status is not Status.INITIATED:
            assert worker.stop_and_wait(WAIT)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(st.integers(min_value=-3, max_value=3), st.booleans()), min_size=1, max_size=30
    )
)
def test_priority_add_all_items_hand_out_in_priority_then_insertion_order(
    items: list[tuple[int, bool]],
) -> None:
    # Jobs added one by one and through add_all share one order: (priority, insertion).
    ran: list[int] = []
    worker = varmq.new_worker(lambda job: ran.append(job.data), 1, auto_run=False)
    try:
        queue = worker.bind_priority_queue()
        batch: list[varmq.Item[int]] = []
        for index, (priority, grouped) in enumerate(items):
            if grouped:
                batch.append(varmq.Item(index, priority=priority))
            else:
                if batch:
                    queue.add_all(batch)
                    batch = []
                queue.add(index, priority)
        if batch:
            queue.add_all(batch)
        worker.start()
        assert worker.wait(WAIT)
        assert ran == sorted(range(len(items)), key=lambda i: (items[i][0], i))
    finally:
        if worker.status is not Status.INITIATED:
            assert worker.stop_and_wait(WAIT)


def test_many_workers_started_and_stopped_leave_no_threads(poll: Any) -> None:
    for i in range(30):
        worker = varmq.new_worker(lambda job: None, 3, idle_worker_expiry=0.01 * (i % 3))
        queue = worker.bind_queue()
        for j in range(20):
            queue.add(j)
        assert worker.stop_and_wait(WAIT)
    assert poll(
        lambda: (
            not [
                t
                for t in threading.enumerate()
                if t.name.startswith("varmq:") and not t.name.startswith("varmq:producer")
            ]
        ),
        timeout=WAIT,
    )
