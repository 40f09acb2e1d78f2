"""In-memory queue handles on every worker kind: add, add_all, len, capacity, purge, close."""

from __future__ import annotations

import time
from typing import Any

import pytest

import varmq
from varmq.sources.memory_queues import Restored

WAIT = 10.0

KINDS = {
    "worker": (varmq.new_worker, varmq.EnqueuedJob, varmq.EnqueuedGroupJob),
    "err": (varmq.new_err_worker, varmq.EnqueuedErrJob, varmq.EnqueuedErrGroupJob),
    "result": (varmq.new_result_worker, varmq.EnqueuedResultJob, varmq.EnqueuedResultGroupJob),
}
QUEUES = ["fifo", "priority"]

every_handle = pytest.mark.parametrize(
    ("kind", "queue_kind"),
    [(k, q) for k in KINDS for q in QUEUES],
    ids=[f"{k}-{q}" for k in KINDS for q in QUEUES],
)


def bind(worker: Any, queue_kind: str, **options: Any) -> Any:
    if queue_kind == "fifo":
        return worker.bind_queue(**options)
    return worker.bind_priority_queue(**options)


def add(queue: Any, data: Any, priority: int = 0) -> Any:
    if isinstance(queue, varmq.PriorityQueue):
        return queue.add(data, priority)
    return queue.add(data)


def make(kind: str, fn: Any = None, **options: Any) -> Any:
    constructor = KINDS[kind][0]
    return constructor(fn or (lambda job: job.data), **options)


@every_handle
def test_add_returns_a_job_handle_and_the_worker_runs_it(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind)
    assert isinstance(queue, varmq.Queue if queue_kind == "fifo" else varmq.PriorityQueue)
    job = add(queue, "x")
    assert isinstance(job, KINDS[kind][1])
    assert job.status is varmq.JobStatus.QUEUED
    assert len(queue) == 1
    assert worker.num_pending == 1
    worker.start()
    assert job.wait(WAIT)
    assert job.is_closed()
    assert job.status is varmq.JobStatus.CLOSED
    assert worker.wait(WAIT)
    assert len(queue) == 0
    assert worker.num_pending == 0


@every_handle
def test_queue_worker_is_the_bound_worker(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    assert bind(worker, queue_kind).worker is worker


@every_handle
def test_binding_leaves_a_started_worker_idle(kind: str, queue_kind: str) -> None:
    worker = make(kind)
    bind(worker, queue_kind)
    assert worker.status is varmq.Status.IDLE


@every_handle
def test_capacity_refuses_adds_once_full(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind, capacity=2)
    assert not queue.is_full()
    assert add(queue, 1) is not None
    assert not queue.is_full()
    assert add(queue, 2) is not None
    assert queue.is_full()
    assert add(queue, 3) is None
    assert len(queue) == 2
    assert worker.metrics.submitted == 2


@every_handle
def test_capacity_frees_up_as_the_worker_takes_jobs(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind, capacity=2)
    jobs = [add(queue, 1), add(queue, 2)]
    worker.start()
    assert all(job.wait(WAIT) for job in jobs)
    assert not queue.is_full()
    assert add(queue, 3) is not None


@every_handle
def test_add_all_beyond_capacity_stores_only_what_fits(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind, capacity=2)
    group = queue.add_all([1, 2, 3, 4])
    assert isinstance(group, KINDS[kind][2])
    assert len(queue) == 2
    assert group.num_pending() == 2
    assert worker.metrics.submitted == 2
    worker.start()
    assert group.wait(WAIT)
    assert group.num_pending() == 0


@every_handle
def test_no_capacity_is_unlimited_and_never_full(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    unlimited = bind(worker, queue_kind)
    zero = bind(worker, queue_kind, capacity=0)
    for i in range(100):
        assert add(unlimited, i) is not None
        assert add(zero, i) is not None
    assert len(unlimited) == len(zero) == 100
    assert not unlimited.is_full()
    assert not zero.is_full()


@every_handle
def test_purge_empties_the_queue_and_cancels_the_purged_jobs(kind: str, queue_kind: str) -> None:
    ran: list[Any] = []
    worker = make(kind, lambda job: ran.append(job.data), auto_run=False)
    queue = bind(worker, queue_kind)
    jobs = [add(queue, i) for i in range(5)]
    queue.purge()
    assert len(queue) == 0
    assert worker.num_pending == 0
    assert all(job.is_closed() for job in jobs)
    assert all(job.wait(0) for job in jobs)
    if kind == "err":
        assert all(isinstance(job.err(), varmq.JobCancelledError) for job in jobs)
    if kind == "result":
        for job in jobs:
            with pytest.raises(varmq.JobCancelledError):
                job.result()
    worker.start()
    later = add(queue, "later")
    assert later.wait(WAIT)
    assert worker.wait(WAIT)
    assert ran == ["later"]
    assert worker.metrics.completed == 1


@every_handle
def test_purge_counts_purged_group_members_as_done(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind)
    group = queue.add_all([1, 2, 3])
    queue.purge()
    assert group.num_pending() == 0
    assert group.wait(0)


@every_handle
def test_close_refuses_new_adds_but_queued_jobs_still_run(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind)
    jobs = [add(queue, i) for i in range(3)]
    queue.close()
    assert add(queue, "refused") is None
    assert len(queue) == 3
    worker.start()
    assert all(job.wait(WAIT) for job in jobs)
    assert worker.wait(WAIT)
    assert len(queue) == 0
    assert worker.is_active, "closing a queue does not stop the worker"
    assert worker.metrics.submitted == 3


@every_handle
def test_add_all_counts_pending_members_and_runs_them(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind)
    group = queue.add_all([varmq.Item("a"), "b", varmq.Item("c", priority=3, id="c-id")])
    assert len(queue) == 3
    assert group.num_pending() == 3
    assert [job.data for job in group.jobs] == ["a", "b", "c"]
    assert group.jobs[2].id == "c-id"
    assert worker.metrics.submitted == 3
    worker.start()
    assert group.wait(WAIT)
    assert group.num_pending() == 0
    assert len(queue) == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_result_of_each_job_on_a_priority_queue(kind: str) -> None:
    def double(job: varmq.Job[int]) -> int:
        if job.data < 0:
            raise ValueError(f"negative: {job.data}")
        return job.data * 2

    worker = make(kind, double)
    queue = worker.bind_priority_queue()
    jobs = {p: queue.add(p, p) for p in (1, 5, 10, -1)}
    assert worker.wait(WAIT)
    if kind == "result":
        assert {p: jobs[p].result() for p in (1, 5, 10)} == {1: 2, 5: 10, 10: 20}
        with pytest.raises(ValueError, match="negative: -1"):
            jobs[-1].result()
    if kind == "err":
        assert [jobs[p].err() for p in (1, 5, 10)] == [None, None, None]
        assert str(jobs[-1].err()) == "negative: -1"


@pytest.mark.parametrize("kind", list(KINDS))
def test_priority_queue_runs_lower_numbers_first_and_fifo_among_equals(
    kind: str, recorder: Any
) -> None:
    worker = make(kind, recorder.fn, auto_run=False)
    queue = worker.bind_priority_queue()
    for data, priority in [("c1", 10), ("a1", 1), ("b1", 5), ("a2", 1), ("c2", 10), ("b2", 5)]:
        queue.add(data, priority)
    worker.start()
    assert worker.wait(WAIT)
    assert recorder.ran == ["a1", "a2", "b1", "b2", "c1", "c2"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_fifo_queue_runs_jobs_in_the_order_added(kind: str, recorder: Any) -> None:
    worker = make(kind, recorder.fn, auto_run=False)
    queue = worker.bind_queue()
    for i in range(50):
        queue.add(i)
    worker.start()
    assert worker.wait(WAIT)
    assert recorder.ran == list(range(50))


def test_add_all_on_a_priority_queue_uses_item_priorities(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    queue = worker.bind_priority_queue()
    queue.add_all([varmq.Item("late", priority=9), varmq.Item("early", priority=-2), "zero"])
    worker.start()
    assert worker.wait(WAIT)
    assert recorder.ran == ["early", "zero", "late"]


def test_add_all_on_a_fifo_queue_ignores_item_priorities(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    queue = worker.bind_queue()
    queue.add_all([varmq.Item("first", priority=9), varmq.Item("second", priority=-2)])
    worker.start()
    assert worker.wait(WAIT)
    assert recorder.ran == ["first", "second"]


@pytest.mark.parametrize("queue_kind", QUEUES)
def test_with_queue_binds_the_callers_storage(queue_kind: str, recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    if queue_kind == "fifo":
        storage: Any = varmq.MemoryQueue()
        queue = worker.with_queue(storage)
    else:
        storage = varmq.MemoryPriorityQueue()
        queue = worker.with_priority_queue(storage)
    add(queue, "mine")
    assert len(storage) == 1
    worker.start()
    assert worker.wait(WAIT)
    assert recorder.ran == ["mine"]
    assert len(storage) == 0


def test_num_pending_sums_every_bound_queue(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    a, b = worker.bind_queue(), worker.bind_priority_queue()
    for i in range(3):
        a.add(i)
    for i in range(4):
        b.add(i, i)
    assert worker.num_pending == 7
    worker.start()
    assert worker.wait(WAIT)
    assert worker.num_pending == 0


@pytest.mark.parametrize("queue_kind", QUEUES)
def test_a_named_storage_labels_the_queue_it_is_bound_as(queue_kind: str) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    if queue_kind == "fifo":
        worker.with_queue(varmq.MemoryQueue(name="orders"))
    else:
        worker.with_priority_queue(varmq.MemoryPriorityQueue(name="orders"))
    assert worker.queue_stats()[0]["name"] == "orders"


def test_delayed_jobs_and_dead_letters_shelved_on_a_queue_are_adopted_once_when_bound() -> None:
    storage = varmq.MemoryQueue(name="restored")
    soon, later = varmq.EnqueuedJob("soon", 1), varmq.EnqueuedJob("later", 2)
    dead = varmq.EnqueuedJob("dead", 3)
    dead.attempt = 4
    now = time.time()
    storage.shelve(
        Restored(delayed=[(now + 0.2, soon), (now + 3600, later)], dead=[(dead, "E: x", now)])
    )
    ran: list[str] = []
    worker = varmq.new_worker(lambda job: ran.append(job.id))
    handle = worker.with_queue(storage)
    [letter] = handle.dead_letters()
    assert (letter.id, letter.data, letter.attempts, letter.error, letter.dead_at) == (
        "dead",
        3,
        4,
        "E: x",
        now,
    )
    deadline = time.monotonic() + WAIT
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)  # letting the delay pass on purpose
    assert ran == ["soon"]
    assert time.time() >= now + 0.2 - 0.05
    assert worker.queue_stats()[0]["delayed"] == 1
    assert storage.take_restored() is None  # handed over: binding it again brings nothing


# -- job ids: one job per id in the queue ---------------------------------------------------------


def add_with_id(queue: Any, data: Any, job_id: str, **options: Any) -> Any:
    if isinstance(queue, varmq.PriorityQueue):
        return queue.add(data, 0, job_id=job_id, **options)
    return queue.add(data, job_id=job_id, **options)


@every_handle
def test_a_second_add_of_an_id_in_the_queue_adds_nothing_and_returns_the_first_jobs_handle(
    kind: str, queue_kind: str
) -> None:
    ran: list[Any] = []
    worker = make(kind, lambda job: ran.append(job.data), auto_run=False)
    queue = bind(worker, queue_kind)
    first = add_with_id(queue, "first", "x")
    assert add_with_id(queue, "second", "x") is first
    assert add_with_id(queue, "delayed", "x", delay=60) is first
    assert add_with_id(queue, "strict", "x", strict=True) is first  # not a refusal: no raise
    assert len(queue) == 1
    assert worker.metrics.submitted == 1
    worker.start()
    assert first.wait(WAIT)
    assert worker.wait(WAIT)
    assert ran == ["first"]
    # Once its job ran, the id is free again.
    again = add_with_id(queue, "again", "x")
    assert again is not None and again is not first
    assert again.wait(WAIT)
    assert ran == ["first", "again"]


@every_handle
def test_a_delayed_job_holds_its_id_until_it_ran(kind: str, queue_kind: str) -> None:
    worker = make(kind, auto_run=False)
    queue = bind(worker, queue_kind)
    later = add_with_id(queue, "later", "x", delay=60)
    assert add_with_id(queue, "now", "x") is later
    assert len(queue) == 0
    assert worker.queue_stats()[0]["delayed"] == 1


@pytest.mark.parametrize("queue_kind", QUEUES)
def test_a_cancelled_job_frees_its_id(queue_kind: str) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = bind(worker, queue_kind)
    first = add_with_id(queue, "first", "x")
    first.close()
    second = add_with_id(queue, "second", "x")
    assert second is not None and second is not first


@pytest.mark.parametrize("queue_kind", QUEUES)
def test_add_all_adds_one_job_per_id(queue_kind: str) -> None:
    ran: list[Any] = []
    worker = varmq.new_worker(lambda job: ran.append(job.data), auto_run=False)
    queue = bind(worker, queue_kind)
    waiting = add_with_id(queue, "waiting", "a")
    group = queue.add_all([varmq.Item("a again", id="a"), varmq.Item("b", id="b"), "no id"])
    group2 = queue.add_all([varmq.Item("b again", id="b")])
    assert [job.data for job in group.jobs] == ["b", "no id"]
    assert group.num_pending() == 2  # the member that was not added is done
    assert group2.jobs == [] and group2.num_pending() == 0 and group2.wait(0)
    assert len(queue) == 3
    worker.start()
    assert group.wait(WAIT) and waiting.wait(WAIT)
    assert sorted(ran) == ["b", "no id", "waiting"]


def test_a_generated_id_is_held_like_a_given_one() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False, job_id_generator=lambda: "same")
    queue = worker.bind_queue()
    first = queue.add(1)
    assert queue.add(2) is first
    assert len(queue) == 1


def test_a_requeued_dead_letter_whose_id_is_taken_stays_a_dead_letter() -> None:
    def fail(job: varmq.Job[Any]) -> None:
        if job.data == "fails":
            raise RuntimeError("no")

    worker = varmq.new_worker(fail, 1, retry=varmq.Retry(max_attempts=1))
    queue = worker.bind_queue()
    assert add_with_id(queue, "fails", "x").wait(WAIT)
    assert worker.wait(WAIT)
    [letter] = queue.dead_letters()
    worker.pause()
    holder = add_with_id(queue, "holder", "x")  # a dead letter does not hold its id
    assert holder is not None
    assert queue.requeue_dead() == 0
    assert [d.key for d in queue.dead_letters()] == [letter.key]  # kept, as it was
    assert len(queue) == 1
    worker.resume()
    assert holder.wait(WAIT) and worker.wait(WAIT)
    assert queue.requeue_dead() == 1  # the id is free again


def test_with_keep_results_a_kept_record_holds_the_id() -> None:
    worker = varmq.new_result_worker(lambda job: job.data, 1)
    queue = worker.bind_queue(keep_results=0.3)
    first = queue.add("first", job_id="x")
    assert first.result(WAIT) == "first"
    again = queue.add("again", job_id="x")
    assert again is first  # its record is kept: the id is still taken
    assert queue.result_of("x", timeout=WAIT) == "first"
    time.sleep(0.4)  # the record's time passes
    later = queue.add("later", job_id="x")
    assert later is not None and later is not first
    assert later.result(WAIT) == "later"


def test_with_keep_results_a_requeued_dead_letter_takes_its_own_id_back() -> None:
    attempts: list[int] = []

    def fail_once(job: varmq.Job[Any]) -> None:
        attempts.append(job.attempt)
        if len(attempts) == 1:
            raise RuntimeError("no")

    worker = varmq.new_worker(fail_once, 1, retry=varmq.Retry(max_attempts=1))
    queue = worker.bind_queue(keep_results=60)
    assert queue.add("x", job_id="x").wait(WAIT)
    assert queue.job("x").state == "dead"  # its record holds the id...
    assert queue.requeue_dead() == 1  # ...but not against its own letter
    assert queue.result_of("x", timeout=WAIT) is None
    assert queue.job("x").state == "succeeded"


def test_jobs_that_closed_without_running_do_not_pile_up_in_the_id_table() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue()
    for n in range(5_000):
        queue.add(n, job_id=f"j{n}").close()  # cancelled: it closes without a settle
    assert len(queue._source.ids) <= 2_048  # swept as it grew
