"""The worker with storage-backed queues: takes, acks, polls, back-off, leases, counters.

Runs on the reference storage of varmq.testing, whose failure switches make storage errors
happen on demand. The adapters' own suites run the same worker paths on SQLite and Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import varmq
from varmq.testing import MemoryStorage

WAIT = 5.0


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for worker in made:
        if worker.status is not varmq.Status.INITIATED:
            worker.stop_and_wait(timeout=WAIT)


def errors_of(worker: Any) -> list[BaseException]:
    return list(worker.errs().queue)


def test_add_stores_a_json_envelope_and_the_worker_runs_it(storage, workers) -> None:
    q = storage.new_queue("jobs")
    seen: list[tuple[str, Any, int]] = []
    worker = varmq.new_worker(
        lambda job: seen.append((job.id, job.data, job.attempt)), 1, auto_run=False
    )
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    assert handle.add({"to": "a@example.com"}, job_id="j-1")
    assert q.values() == [b'{"id":"j-1","status":"Created","data":{"to":"a@example.com"}}']
    worker.start()
    assert worker.wait(WAIT)
    assert seen == [("j-1", {"to": "a@example.com"}, 1)]
    assert len(q) == 0


_NOT_JSON = [
    ({1, 2}, "set"),
    (object(), "object"),
    (datetime.datetime(2026, 1, 1), "datetime"),
    (decimal.Decimal("1.5"), "Decimal"),
    (uuid.UUID(int=7), "UUID"),
    (b"raw", "bytes"),
    (lambda: 1, "function"),
]


def _storage_handles(storage: Any, worker: Any) -> dict[str, Any]:
    """One handle of every storage kind, each on a queue of its own."""
    return {
        "persistent": worker.with_persistent_queue(storage.new_queue("p")),
        "persistent priority": worker.with_persistent_priority_queue(
            storage.new_priority_queue("pp")
        ),
        "distributed": worker.with_distributed_queue(storage.new_distributed_queue("d")),
        "distributed priority": worker.with_distributed_priority_queue(
            storage.new_distributed_priority_queue("dp")
        ),
        "producer-only": varmq.new_distributed_queue(storage.new_distributed_queue("po")),
    }


@pytest.mark.parametrize(("data", "type_name"), _NOT_JSON, ids=[t for _, t in _NOT_JSON])
def test_add_of_data_that_is_not_json_raises_type_error_naming_type_queue_and_job(
    storage, workers, data, type_name
) -> None:
    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    for kind, handle in _storage_handles(storage, worker).items():
        with pytest.raises(TypeError, match=rf"queue '\w+': job 'j-1': .*{type_name}") as raised:
            handle.add(data, job_id="j-1")
        assert len(handle) == 0, kind
        assert "JSON" in str(raised.value), kind
    assert worker.metrics.submitted == 0


@pytest.mark.parametrize("data", [float("nan"), "lone \ud800 surrogate"], ids=["nan", "surrogate"])
def test_add_of_a_value_json_cannot_hold_raises_value_error_naming_the_queue(
    storage, workers, data
) -> None:
    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    for handle in _storage_handles(storage, worker).values():
        with pytest.raises(ValueError, match=r"queue '\w+': job '': "):
            handle.add(data)
        assert len(handle) == 0


def test_a_payload_encoder_that_raises_fails_the_add_with_type_error(storage, workers) -> None:
    def encoder(data: Any) -> Any:
        raise KeyError("no such field")

    worker = varmq.new_worker(lambda job: None, payload_encoder=encoder)
    workers.append(worker)
    handle = worker.with_persistent_queue(storage.new_queue("jobs"))
    with pytest.raises(TypeError, match="payload_encoder raised KeyError") as raised:
        handle.add({"a": 1})
    assert isinstance(raised.value.__cause__, TypeError)
    assert len(handle) == 0


def test_add_returns_false_when_the_storage_refuses(storage, workers) -> None:
    q = storage.new_queue("jobs")
    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    q.faults.refuse_enqueue = True
    assert handle.add("x") is False
    q.faults.clear()
    q.close()
    assert handle.add("x") is False
    assert worker.metrics.submitted == 0


def test_adding_the_same_job_id_twice_stores_it_once(storage, workers) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    workers.append(worker)
    handle = worker.with_persistent_queue(storage.new_queue("jobs"))
    assert handle.add("a", job_id="order-7")
    assert handle.add("a", job_id="order-7")
    assert len(handle) == 1


def test_payload_decoder_gives_the_job_function_a_users_type(storage, workers) -> None:
    @dataclasses.dataclass
    class Email:
        to: str
        subject: str

    got: list[Email] = []
    worker = varmq.new_worker(
        lambda job: got.append(job.data), payload_decoder=lambda raw: Email(**raw)
    )
    workers.append(worker)
    handle = worker.with_persistent_queue(storage.new_queue("mail"))
    assert handle.add(Email("a@example.com", "hi"))  # dataclasses encode as objects
    assert worker.wait(WAIT)
    assert got == [Email("a@example.com", "hi")]


def test_jobs_stored_before_the_worker_existed_run_whatever_the_bind_order(
    storage, workers
) -> None:
    # Producer first, in "another process".
    assert varmq.new_distributed_queue(storage.new_distributed_queue("q")).add("old")
    ran = threading.Event()
    worker = varmq.new_worker(lambda job: ran.set(), poll_interval=60.0)  # auto-started
    workers.append(worker)
    worker.with_persistent_queue(storage.new_queue("q"))
    assert ran.wait(WAIT)


def test_jobs_added_by_another_process_are_found_by_polling(storage, workers) -> None:
    ran = threading.Event()
    worker = varmq.new_worker(lambda job: ran.set(), poll_interval=0.05)
    workers.append(worker)
    worker.bind_queue()  # another, in-memory source bound too: polling still happens
    worker.with_persistent_queue(storage.new_queue("q"))
    assert worker.wait(WAIT)
    # Added behind the worker's back: no signal reaches it.
    assert storage.new_queue("q").enqueue(b'{"id":"","status":"Created","data":1}')
    assert ran.wait(WAIT)


def test_distributed_notification_wakes_the_worker_without_waiting_for_a_poll(
    storage, workers
) -> None:
    ran = threading.Event()
    worker = varmq.new_worker(lambda job: ran.set(), poll_interval=60.0)
    workers.append(worker)
    worker.with_distributed_queue(storage.new_distributed_queue("q"))
    assert worker.wait(WAIT)
    assert varmq.new_distributed_queue(storage.new_distributed_queue("q")).add("x")
    assert ran.wait(WAIT)


def test_failed_acknowledgement_is_reported_with_job_and_ack_id(storage, workers) -> None:
    q = storage.new_queue("q")
    q.faults.refuse_ack = True
    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    assert worker.with_persistent_queue(q).add("x", job_id="job-9")
    assert worker.wait(WAIT)
    [error] = errors_of(worker)
    assert isinstance(error, varmq.AcknowledgeJobError)
    assert error.job_id == "job-9" and error.ack_id
    assert "job-9" in str(error) and error.ack_id in str(error)
    assert worker.metrics.completed == 1


def test_failed_acknowledgement_is_counted_and_logged_as_a_warning_naming_the_queue(
    storage, workers, caplog: pytest.LogCaptureFixture
) -> None:
    q = storage.new_queue("mail")
    q.faults.refuse_ack = True
    worker = varmq.new_worker(lambda job: None, name="mailer")
    workers.append(worker)
    with caplog.at_level(logging.WARNING, logger="varmq.worker"):
        assert worker.with_persistent_queue(q).add("x", job_id="job-9")
        assert worker.wait(WAIT)
    assert worker.metrics.unacknowledged == 1
    [line] = [r.getMessage() for r in caplog.records if "job-9" in r.getMessage()]
    assert "worker mailer" in line and "queue 'mail'" in line
    assert "failed to acknowledge job 'job-9'" in line and "runs again" in line


def test_job_that_raised_is_acknowledged_counted_failed_and_reported(storage, workers) -> None:
    q = storage.new_queue("q")

    def boom(job: varmq.Job[str]) -> None:
        raise RuntimeError("boom")

    worker = varmq.new_worker(boom)
    workers.append(worker)
    assert worker.with_persistent_queue(q).add("x")
    assert worker.wait(WAIT)
    [error] = errors_of(worker)
    assert isinstance(error, RuntimeError)
    assert worker.metrics.failed == 1 and worker.metrics.completed == 1
    assert len(q) == 0 and q.dequeue_with_ack_id() is None


def test_undecodable_bytes_are_reported_and_not_acknowledged(workers) -> None:
    storage = MemoryStorage()
    q = storage.new_queue("q", visibility_timeout=60)
    assert q.enqueue(b"\xff not json")
    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    worker.with_persistent_queue(q)
    assert worker.wait(WAIT)
    [error] = errors_of(worker)
    assert isinstance(error, varmq.ParseJobError) and error.ack_id
    # Still leased: not acknowledged, so the storage decides when it comes back.
    assert q.acknowledge(error.ack_id) is True


def test_take_errors_back_off_and_each_outage_is_reported_once(storage, workers) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b'{"id":"","status":"Created","data":1}')
    q.faults.take_error = ConnectionError("injected")
    ran = threading.Event()
    worker = varmq.new_worker(lambda job: ran.set(), 4, poll_interval=0.2)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and not ran.is_set():
        # len() says a job waits while every take fails: the worker keeps trying, backing off.
        assert worker.num_pending == 1
        time.sleep(0.05)
    [reported] = errors_of(worker)  # one outage, one report, however many retries
    worker.errs().get_nowait()
    assert isinstance(reported, varmq.FailedToDequeueError)
    assert isinstance(reported.__cause__, ConnectionError)
    q.faults.clear()
    assert ran.wait(WAIT), "the worker did not recover once the storage worked again"
    q.faults.take_error = ConnectionError("again")
    assert handle.add(2)
    [second] = [worker.errs().get(timeout=WAIT)]
    assert "again" in str(second)


def test_running_job_keeps_its_lease_past_the_visibility_timeout(workers) -> None:
    storage = MemoryStorage()
    q = storage.new_queue("q", visibility_timeout=0.3)
    rival = storage.new_queue("q", visibility_timeout=0.3)
    started, release = threading.Event(), threading.Event()

    def long_job(job: varmq.Job[str]) -> None:
        started.set()
        release.wait(WAIT)

    worker = varmq.new_worker(long_job)
    workers.append(worker)
    assert worker.with_persistent_queue(q).add("x")
    assert started.wait(WAIT)
    end = time.monotonic() + 1.0  # more than three lease lengths
    while time.monotonic() < end:
        assert rival.dequeue_with_ack_id() is None, "the lease ran out while the job ran"
        time.sleep(0.05)
    release.set()
    assert worker.wait(WAIT)
    assert errors_of(worker) == []


def test_lost_lease_is_reported_and_the_job_still_runs_to_its_end(workers) -> None:
    storage = MemoryStorage()
    q = storage.new_queue("q", visibility_timeout=0.3)
    q.faults.refuse_extend = True
    release = threading.Event()
    finished = threading.Event()

    def long_job(job: varmq.Job[str]) -> None:
        release.wait(WAIT)
        finished.set()

    lost = threading.Event()
    worker = varmq.new_worker(
        long_job,
        error_handler=lambda w, e: lost.set() if isinstance(e, varmq.LeaseLostError) else None,
    )
    workers.append(worker)
    assert worker.with_persistent_queue(q).add("x", job_id="slow")
    assert lost.wait(WAIT)
    rival = storage.new_queue("q", visibility_timeout=60)
    deadline = time.monotonic() + WAIT
    while (taken := rival.dequeue_with_ack_id()) is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the lease runs out on its own time
    assert taken is not None, "the job never became available to another consumer"
    release.set()
    assert worker.wait(WAIT)
    assert finished.is_set()
    kinds = [type(e) for e in errors_of(worker)]
    assert varmq.LeaseLostError in kinds
    # Its late ack is fenced off: the storage already considered the lease gone.
    assert varmq.AcknowledgeJobError in kinds


def test_num_pending_counts_stored_jobs_and_jobs_taken_but_not_started(storage, workers) -> None:
    q = storage.new_queue("q")
    for i in range(5):
        assert q.enqueue(f'{{"id":"{i}","status":"Created","data":{i}}}'.encode())
    gate = threading.Event()
    started = threading.Semaphore(0)

    def held(job: varmq.Job[int]) -> None:
        started.release()
        gate.wait(WAIT)

    worker = varmq.new_worker(held, 2)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    assert started.acquire(timeout=WAIT) and started.acquire(timeout=WAIT)
    assert worker.num_processing == 2
    # Two run; the take also prefetched two (concurrency 2), which wait leased, not started.
    assert worker.num_pending == 3
    assert len(handle) == 1
    gate.set()
    assert worker.wait(WAIT)
    assert worker.num_pending == 0


def test_metrics_count_this_process_and_completed_can_exceed_submitted(storage, workers) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b'{"id":"","status":"Created","data":0}')  # another process's job
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    assert handle.add(1)
    worker.start()
    assert worker.wait(WAIT)
    assert worker.metrics.submitted == 1
    assert worker.metrics.completed == 2


@pytest.mark.parametrize("prefetch", [0, None])
def test_pause_right_after_a_batch_take_still_runs_every_taken_job(
    storage, workers, prefetch
) -> None:
    q = storage.new_queue("q")
    gate = threading.Event()
    ran: list[int] = []
    lock = threading.Lock()

    def held(job: varmq.Job[int]) -> None:
        gate.wait(WAIT)
        with lock:
            ran.append(job.data)

    worker = varmq.new_worker(held, 4, auto_run=False, prefetch=prefetch)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    for i in range(10):
        assert handle.add(i)
    worker.start()
    deadline = time.monotonic() + WAIT
    while worker.num_processing < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.pause()
    gate.set()
    assert worker.wait_until_paused(WAIT)
    # Every job taken from storage ran and was acknowledged; the rest wait in storage.
    taken = 4 if prefetch == 0 else 8  # with the default prefetch, as many again
    assert len(ran) == taken
    assert len(q) == 10 - taken
    assert storage.new_queue("q").dequeue_with_ack_id() is not None  # the rest is takeable


def test_every_job_of_one_batch_take_runs_at_the_same_time_up_to_the_concurrency(
    storage, workers
) -> None:
    # One take hands out the whole batch; each slot that starts one of its jobs wakes the
    # next. Jobs that wait for each other therefore all run at once: none waits for a slot.
    q = storage.new_queue("q")
    together = threading.Barrier(6, timeout=WAIT)
    met: list[int] = []

    def meet(job: varmq.Job[int]) -> None:
        together.wait()
        met.append(job.data)

    worker = varmq.new_worker(meet, 6, auto_run=False)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    for i in range(12):
        assert handle.add(i)
    worker.start()
    assert worker.wait(WAIT)
    assert sorted(met) == list(range(12))
    assert not together.broken
    assert worker.metrics.completed == 12


def test_stop_and_wait_lets_running_jobs_acknowledge_before_the_adapter_closes(
    storage, workers
) -> None:
    q = storage.new_queue("q")
    started, release = threading.Event(), threading.Event()
    worker = varmq.new_worker(lambda job: (started.set(), release.wait(WAIT)))
    assert worker.with_persistent_queue(q).add("x")
    assert started.wait(WAIT)
    stopper = threading.Thread(target=worker.stop_and_wait, args=(WAIT,))
    stopper.start()
    release.set()
    stopper.join(WAIT)
    assert worker.is_stopped
    q.close()
    assert errors_of(worker) == []
    assert storage.new_queue("q").dequeue_with_ack_id() is None


def test_async_job_function_on_a_storage_queue(storage, workers) -> None:
    seen: list[int] = []

    async def record(job: varmq.Job[int]) -> None:
        await asyncio.sleep(0)
        seen.append(job.data)

    worker = varmq.new_worker(record, 4)
    workers.append(worker)
    handle = worker.with_persistent_priority_queue(storage.new_priority_queue("q"))
    for i in range(50):
        assert handle.add(i, i % 3)
    assert worker.wait(WAIT)
    assert sorted(seen) == list(range(50))
    assert errors_of(worker) == []
    # The loop hands acknowledgements to its I/O threads; a stopped worker has sent them all.
    assert worker.stop_and_wait(WAIT)
    assert storage.new_priority_queue("q").stats()["in_flight"] == 0


def test_producer_only_handle_stores_jobs_without_subscribing(storage) -> None:
    q = storage.new_distributed_queue("q")
    subscribed: list[Any] = []
    q.subscribe = subscribed.append  # type: ignore[method-assign]
    handle = varmq.new_distributed_queue(q)
    assert handle.add("x") and len(handle) == 1
    assert subscribed == []
    assert not hasattr(handle, "worker")


def test_binding_the_wrong_kind_of_storage_raises_type_error(storage) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    with pytest.raises(TypeError, match="IPersistentQueue"):
        worker.with_persistent_queue(varmq.MemoryQueue())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="IDistributedQueue"):
        worker.with_distributed_queue(storage.new_queue("plain"))  # type: ignore[arg-type]
