"""Following jobs by id: ``handle.job``, ``result_of``, ``result_of_async`` and ``cancel``.

On the reference storage (``keep_results`` queues, as sqliteq and redisq will have them) and on
in-memory queues bound with ``keep_results``. What every storage must do is pinned by the
conformance suite (``varmq.testing.conformance_records``); here: the worker's side of it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import varmq
from varmq.api.records import StorageRecords
from varmq.contract.protocols import StoredJobRecord
from varmq.testing import FakeClock, MemoryStorage

WAIT = 10.0
Gate = Any  # the conftest's gate: fn (the job function), open(), wait_started(n), started


def _never_async(*args: Any) -> Any:
    raise AssertionError("not used")


# -- storage queues -----------------------------------------------------------------------------


def test_a_producer_only_handle_follows_a_job_from_queued_to_succeeded(
    storage: MemoryStorage, gate: Callable[[], Gate]
) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn, 1, auto_run=False)
    worker.with_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))
    producer = varmq.new_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))
    assert producer.add({"n": 1}, job_id="job-1")
    queued = producer.job("job-1")
    assert queued is not None
    assert (queued.id, queued.state, queued.attempts, queued.ended) == ("job-1", "queued", 0, False)
    assert queued.enqueued_at is not None and queued.started_at is None
    worker.start()
    assert g.wait_started(1)
    running = producer.job("job-1")
    assert running is not None and (running.state, running.attempts) == ("running", 1)
    g.open()
    assert producer.result_of("job-1", timeout=WAIT) == {"n": 1}
    done = producer.job("job-1")
    assert done is not None and done.state == "succeeded" and done.ended
    assert done.result == {"n": 1} and done.error is None
    assert done.enqueued_at is not None and done.started_at is not None
    assert done.finished_at is not None
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert producer.job("no-such-job") is None


def test_the_stored_error_is_json_with_type_message_and_traceback(storage: MemoryStorage) -> None:
    def refuse(job: varmq.Job[str]) -> None:
        raise PermissionError(f"no access to {job.data}")

    q = storage.new_queue("jobs", keep_results=60)
    worker = varmq.new_err_worker(refuse, 1)
    handle = worker.with_persistent_queue(q)
    assert handle.add("/etc/shadow", job_id="job-1")
    with pytest.raises(varmq.JobFailedError) as failed:
        handle.result_of("job-1", timeout=WAIT)
    error = failed.value
    assert (error.job_id, error.state, error.error_type) == ("job-1", "failed", "PermissionError")
    assert error.message == "no access to /etc/shadow"
    assert "raise PermissionError" in error.traceback
    assert str(error) == "job 'job-1' failed: PermissionError: no access to /etc/shadow"
    stored = q.job_record("job-1")
    assert stored is not None and stored["error"] is not None
    assert set(json.loads(stored["error"])) == {"type", "message", "traceback"}
    record = handle.job("job-1")
    assert record is not None and record.error is not None
    assert record.error.type == "PermissionError"


def test_a_plain_worker_on_a_queue_with_records_records_outcomes_without_values(
    storage: MemoryStorage,
) -> None:
    def work(job: varmq.Job[int]) -> None:
        if job.data < 0:
            raise ValueError("negative")

    worker = varmq.new_worker(work, 2)
    handle = worker.with_persistent_queue(storage.new_queue("jobs", keep_results=60))
    assert handle.add(1, job_id="ok") and handle.add(-1, job_id="bad")
    assert handle.result_of("ok", timeout=WAIT) is None
    with pytest.raises(varmq.JobFailedError, match="ValueError: negative"):
        handle.result_of("bad", timeout=WAIT)


def test_a_cancelled_job_is_not_retried_and_a_value_json_cannot_hold_goes_to_the_dead_letters(
    storage: MemoryStorage,
) -> None:
    worker = varmq.new_result_worker(
        lambda job: object(), 1, retry=varmq.Retry(max_attempts=3, backoff=0.0, jitter=False)
    )
    handle = worker.with_persistent_queue(storage.new_queue("jobs", keep_results=60))
    assert handle.add(None, job_id="object")
    with pytest.raises(varmq.JobFailedError, match="ResultNotJSONError") as dead:
        handle.result_of("object", timeout=WAIT)
    assert dead.value.state == "dead"
    record = handle.job("object")
    assert record is not None and record.attempts == 1  # not retried: it would fail again
    [letter] = handle.dead_letters()
    assert letter.id == "object" and "ResultNotJSONError" in letter.error


def test_result_of_raises_for_an_unknown_id_and_when_the_timeout_passes(
    storage: MemoryStorage,
) -> None:
    q = storage.new_distributed_queue("jobs", keep_results=60)
    producer = varmq.new_distributed_queue(q)
    with pytest.raises(varmq.JobNotFoundError, match="no-such-job") as missing:
        producer.result_of("no-such-job", timeout=WAIT)
    assert isinstance(missing.value, LookupError)
    assert producer.add("nobody takes it", job_id="waiting")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="waiting"):
        producer.result_of("waiting", timeout=0.2)
    assert time.monotonic() - started >= 0.2


def test_a_queue_without_records_refuses_to_follow_jobs(storage: MemoryStorage) -> None:
    producer = varmq.new_distributed_queue(storage.new_distributed_queue("jobs"))
    for call in (producer.job, producer.result_of, producer.cancel):
        with pytest.raises(ValueError, match="keep_results=SECONDS"):
            call("job-1")
    with pytest.raises(TypeError, match="job_id"):
        producer.job(5)  # type: ignore[arg-type]
    worker = varmq.new_result_worker(lambda job: job.data, 1, auto_run=False)
    with pytest.raises(ValueError, match="with_persistent_queue: a result worker needs"):
        worker.with_persistent_queue(storage.new_queue("plain"))
    with pytest.raises(TypeError, match="_NoRecords keeps none"):
        worker.with_persistent_queue(_NoRecords())


class _NoRecords:
    """A persistent queue that cannot keep job records."""

    def __len__(self) -> int:
        return 0

    def dequeue(self) -> None:
        return None

    def values(self) -> list[Any]:
        return []

    def purge(self) -> None:
        return None

    def close(self) -> None:
        return None

    def enqueue(self, item: Any) -> bool:
        return True

    def dequeue_with_ack_id(self) -> None:
        return None

    def acknowledge(self, ack_id: str) -> bool:
        return False


def test_result_of_is_woken_by_the_storage_not_by_reading_it_in_a_loop(
    storage: MemoryStorage, gate: Callable[[], Gate]
) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn, 1)
    worker.with_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))
    watched = storage.new_distributed_queue("jobs", keep_results=60)
    reads = 0
    job_record = watched.job_record

    def counting(job_id: str) -> StoredJobRecord | None:
        nonlocal reads
        reads += 1
        return job_record(job_id)

    watched.job_record = counting  # type: ignore[method-assign]
    producer = varmq.new_distributed_queue(watched)
    assert producer.add("x", job_id="job-1")
    assert g.wait_started(1)
    threading.Timer(0.5, g.open).start()
    assert producer.result_of("job-1", timeout=WAIT) == "x"
    assert reads <= 3, f"{reads} reads for one wait"


def test_result_of_on_a_storage_that_cannot_notify_polls_with_a_bounded_interval() -> None:
    class Silent:
        """Records that end after a while, with no way to say so."""

        keep_results = 60.0

        def __init__(self) -> None:
            self.reads: list[float] = []

        def job_record(self, job_id: str) -> StoredJobRecord:
            self.reads.append(time.monotonic())
            state = "succeeded" if len(self.reads) >= 9 else "running"
            return {
                "id": job_id,
                "state": state,
                "attempts": 1,
                "result": b"42",
                "error": None,
                "enqueued_at": 0.0,
                "started_at": 0.0,
                "finished_at": None,
                "cancel_requested": False,
            }

        def cancel(self, job_id: str) -> bool:
            return False

        # The settles of IJobRecords, never called here.
        acknowledge_with_results = fail = dead_letter_with_error = _never_async
        extend_lease_or_cancel = _never_async

    silent = Silent()
    records = StorageRecords(silent, "silent")
    assert records.wait("job-1", WAIT).value() == 42
    gaps = [b - a for a, b in itertools.pairwise(silent.reads)]
    assert len(silent.reads) == 9
    # Backs off, up to half a second: doubling without a limit would make the last gap 1.28 s
    # (and a sleep never ends early); 0.5 s of slack is for a loaded machine.
    assert gaps[0] < gaps[-1] < 1.0


def test_result_of_async_waits_without_blocking_the_loop(
    storage: MemoryStorage, gate: Callable[[], Gate]
) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn, 2)
    worker.with_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))
    producer = varmq.new_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))

    async def main() -> list[Any]:
        assert await producer.add_async("a", job_id="a")
        assert await producer.add_async("b", job_id="b")
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while not g.is_open:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        asyncio.get_running_loop().call_later(0.3, g.open)
        results = await asyncio.gather(
            producer.result_of_async("a", timeout=WAIT), producer.result_of_async("b", WAIT)
        )
        await ticker
        assert ticks >= 5  # the loop ran while both waited
        idle = varmq.new_distributed_queue(storage.new_distributed_queue("idle", keep_results=60))
        assert await idle.add_async("nobody takes it", job_id="waiting")
        with pytest.raises(TimeoutError):
            await idle.result_of_async("waiting", timeout=0.1)
        with pytest.raises(varmq.JobNotFoundError):
            await idle.result_of_async("never-added")
        return results

    assert asyncio.run(main()) == ["a", "b"]


def test_a_blocking_result_of_inside_an_async_job_is_refused(storage: MemoryStorage) -> None:
    q = storage.new_queue("jobs", keep_results=60)
    caught: list[BaseException] = []

    async def impatient(job: varmq.Job[str]) -> None:
        try:
            handle.result_of("other", timeout=WAIT)
        except RuntimeError as exc:
            caught.append(exc)

    worker = varmq.new_worker(impatient, 1)
    handle = worker.with_persistent_queue(q)
    assert handle.add("x", job_id="job-1")
    assert worker.wait(WAIT)
    assert caught and "result_of_async" in str(caught[0])


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_removes_a_queued_and_a_delayed_job_before_they_run(
    storage: MemoryStorage, recorder: Any
) -> None:
    worker = varmq.new_worker(recorder.fn, 1, auto_run=False)
    handle = worker.with_persistent_queue(storage.new_queue("jobs", keep_results=60))
    assert handle.add("now", job_id="now") and handle.add("later", job_id="later", delay=0.2)
    assert handle.add("kept", job_id="kept")
    assert handle.cancel("now") and handle.cancel("later")
    assert handle.cancel("now") is False
    worker.start()
    assert handle.result_of("kept", timeout=WAIT) is None
    for job_id in ("now", "later"):
        record = handle.job(job_id)
        assert record is not None and record.state == "cancelled" and record.attempts == 0
        with pytest.raises(varmq.JobFailedError, match="cancelled"):
            handle.result_of(job_id, timeout=WAIT)
    time.sleep(0.3)  # the delayed job's time passes: it still does not run
    assert worker.wait(WAIT)
    assert recorder.ran == ["kept"]


def test_a_cancel_through_a_bound_handle_reaches_its_running_job_at_once(
    storage: MemoryStorage,
) -> None:
    started, stopped = threading.Event(), threading.Event()

    def long_job(job: varmq.Job[str]) -> str:
        started.set()
        if job.cancelled.wait(WAIT):
            stopped.set()
        return "late"

    worker = varmq.new_result_worker(long_job, 1)
    # The default lease (30 s) is renewed every 5 s on a queue with records: the cancel does
    # not wait for the next renewal.
    handle = worker.with_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))
    assert handle.add("x", job_id="job-1")
    assert started.wait(WAIT)
    sent = time.monotonic()
    assert handle.cancel("job-1") is True
    assert stopped.wait(WAIT)
    assert time.monotonic() - sent < 2.5
    record = handle.job("job-1")
    assert record is not None and record.state == "cancelled" and record.cancel_requested
    assert worker.wait(WAIT)


def test_a_job_cancelled_while_it_waits_in_the_prefetch_never_runs(
    storage: MemoryStorage, gate: Callable[[], Gate]
) -> None:
    g = gate()
    # A queue with records takes no job ahead unless asked: asked here, and the cancel comes
    # through this worker's own handle, so it is heard at once.
    worker = varmq.new_result_worker(g.fn, 1, auto_run=False, prefetch=1)
    handle = worker.with_persistent_queue(storage.new_queue("jobs", keep_results=60))
    assert handle.add("first", job_id="first") and handle.add("second", job_id="second")
    worker.start()
    assert g.wait_started(1)
    second = handle.job("second")
    assert second is not None and second.state == "running"  # taken ahead, leased, not started
    assert handle.cancel("second") is True
    g.open()
    with pytest.raises(varmq.JobFailedError, match="cancelled"):
        handle.result_of("second", timeout=WAIT)
    assert handle.result_of("first", timeout=WAIT) == "first"
    assert worker.wait(WAIT)
    assert g.started == ["first"]


def test_a_running_job_cancelled_by_id_on_a_worker_with_a_retry_policy_is_not_retried(
    storage: MemoryStorage,
) -> None:
    runs: list[int] = []

    async def long_job(job: varmq.Job[str]) -> None:
        runs.append(job.attempt)
        await asyncio.sleep(WAIT * 4)

    worker = varmq.new_worker(long_job, 1, retry=varmq.Retry(max_attempts=5, backoff=0.0))
    handle = worker.with_persistent_queue(storage.new_queue("jobs", keep_results=60))
    assert handle.add("x", job_id="job-1")
    deadline = time.monotonic() + WAIT
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handle.cancel("job-1")
    with pytest.raises(varmq.JobFailedError, match="cancelled while it ran"):
        handle.result_of("job-1", timeout=WAIT)
    assert worker.wait(WAIT)
    assert runs == [1] and handle.dead_letters() == []


# -- records expire --------------------------------------------------------------------------


def test_a_record_is_dropped_after_keep_results() -> None:
    clock = FakeClock()
    store = MemoryStorage(clock=clock)
    worker = varmq.new_result_worker(lambda job: job.data, 1)
    handle = worker.with_persistent_queue(store.new_queue("jobs", keep_results=30))
    assert handle.add(7, job_id="job-1")
    assert handle.result_of("job-1", timeout=WAIT) == 7
    clock.advance(29)
    assert handle.job("job-1") is not None
    clock.advance(2)
    assert handle.job("job-1") is None
    with pytest.raises(varmq.JobNotFoundError):
        handle.result_of("job-1", timeout=WAIT)


# -- in-memory queues -----------------------------------------------------------------------------


def test_an_in_memory_queue_with_keep_results_follows_jobs_by_id(
    gate: Callable[[], Gate],
) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn, 1)
    queue = worker.bind_queue(keep_results=60)
    assert queue.add({"n": 1}, job_id="one") is not None
    assert queue.add({"n": 2}, job_id="two", delay=WAIT) is not None
    assert g.wait_started(1)
    running = queue.job("one")
    assert running is not None and (running.state, running.attempts) == ("running", 1)
    delayed = queue.job("two")
    assert delayed is not None and (delayed.state, delayed.attempts) == ("delayed", 0)
    g.open()
    assert queue.result_of("one", timeout=WAIT) == {"n": 1}
    done = queue.job("one")
    assert done is not None and done.state == "succeeded" and done.result == {"n": 1}
    assert queue.cancel("two") is True
    with pytest.raises(varmq.JobFailedError, match="cancelled"):
        queue.result_of("two", timeout=WAIT)
    assert queue.job("never") is None
    with pytest.raises(varmq.JobNotFoundError):
        queue.result_of("never")


def test_an_in_memory_result_keeps_the_value_as_it_is_and_errors_as_text() -> None:
    class Point:
        pass

    point = Point()

    def work(job: varmq.Job[str]) -> Any:
        if job.data == "fail":
            raise KeyError("missing")
        return point

    worker = varmq.new_result_worker(work, 1)
    queue = worker.bind_priority_queue(keep_results=60)
    queue.add("ok", 1, job_id="ok")
    queue.add("fail", 2, job_id="fail")
    assert queue.result_of("ok", timeout=WAIT) is point  # nothing leaves the process
    with pytest.raises(varmq.JobFailedError) as failed:
        queue.result_of("fail", timeout=WAIT)
    assert (failed.value.error_type, failed.value.state) == ("KeyError", "failed")


def test_an_in_memory_running_job_is_cancelled_by_id_plain_and_async() -> None:
    saw: list[str] = []
    started = threading.Event()
    # Set once the function saw its cancel: the plain function's thread runs on after the
    # record says "cancelled", so the next round must not start before it got there.
    observed = threading.Event()

    def plain(job: varmq.Job[str]) -> None:
        started.set()
        if job.cancelled.wait(WAIT):
            saw.append("plain")
        observed.set()

    async def coroutine(job: varmq.Job[str]) -> None:
        started.set()
        try:
            await asyncio.sleep(WAIT * 4)
        except asyncio.CancelledError:
            saw.append("async")
            raise
        finally:
            observed.set()

    for fn in (plain, coroutine):
        started.clear()
        observed.clear()
        worker = varmq.new_worker(fn, 1)  # type: ignore[arg-type]
        queue = worker.bind_queue(keep_results=60)
        queue.add("x", job_id="job-1")
        assert started.wait(WAIT)
        assert queue.cancel("job-1") is True
        with pytest.raises(varmq.JobFailedError, match="cancelled while it ran"):
            queue.result_of("job-1", timeout=WAIT)
        record = queue.job("job-1")
        assert record is not None and record.state == "cancelled" and record.cancel_requested
        assert observed.wait(WAIT)
        assert worker.wait(WAIT)
        worker.stop_and_wait(WAIT)
    assert saw == ["plain", "async"]


def test_in_memory_records_expire_and_without_keep_results_there_are_none() -> None:
    worker = varmq.new_result_worker(lambda job: job.data, 1)
    kept = worker.bind_queue(keep_results=0.05)
    kept.add(1, job_id="job-1")
    assert kept.result_of("job-1", timeout=WAIT) == 1
    time.sleep(0.1)  # the record's time passes
    assert kept.job("job-1") is None
    plain = worker.bind_queue()
    with pytest.raises(ValueError, match="keep_results"):
        plain.job("job-1")
    with pytest.raises(ValueError, match="keep_results"):
        worker.bind_queue(keep_results=-1)


def test_in_memory_result_of_async() -> None:
    worker = varmq.new_result_worker(lambda job: job.data * 2, 1)
    queue = worker.bind_queue(keep_results=60)

    async def main() -> Any:
        await queue.add_async(21, job_id="job-1")
        return await queue.result_of_async("job-1", timeout=WAIT)

    assert asyncio.run(main()) == 42


def test_job_async_and_cancel_async_read_and_cancel_without_blocking_the_loop(
    storage: MemoryStorage,
) -> None:
    producer = varmq.new_distributed_queue(storage.new_distributed_queue("jobs", keep_results=60))
    memory = varmq.new_worker(lambda job: None, 1, auto_run=False).bind_queue(keep_results=60)

    async def main() -> None:
        for handle in (producer, memory):
            await handle.add_async("x", job_id="job-1")
            record = await handle.job_async("job-1")
            assert record is not None and record.state == "queued"
            assert await handle.cancel_async("job-1") is True
            assert await handle.cancel_async("job-1") is False
            record = await handle.job_async("job-1")
            assert record is not None and record.state == "cancelled"
            assert await handle.job_async("no-such-job") is None

    asyncio.run(main())
