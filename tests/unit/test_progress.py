"""Job progress: ``current_job()``, ``job.set_progress`` and ``JobRecord.progress`` through the
worker, on the reference storage, in-memory queues with records, sqliteq and redisq.

What every storage must do with a progress write is pinned by the conformance suite
(``varmq.testing.conformance_progress``); here: the worker's side of it (the context, the checks,
the throttle, the write before the end, errors that never reach the job).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import redisq
import sqliteq
import varmq
from varmq.model.jobs import current_job
from varmq.model.progress import MESSAGE_LIMIT, check_progress
from varmq.model.records import JobProgress, decode_progress
from varmq.sources.progress import MIN_INTERVAL
from varmq.testing import MemoryStorage

WAIT = 10.0


class Writes:
    """Wraps the ``set_progress`` of a storage queue object: counts the calls, keeps the values
    written (decoded) and wakes whoever waits for one; raises ``fail`` instead when given."""

    def __init__(self, q: Any, fail: BaseException | None = None) -> None:
        self._cond = threading.Condition()  # guards values; notified after every call
        self.values: list[dict[str, Any]] = []
        original = q.set_progress

        def set_progress(ack_id: str, progress: bytes) -> bool:
            stored = False
            try:
                if fail is not None:
                    raise fail
                stored = bool(original(ack_id, progress))
                return stored
            finally:
                with self._cond:
                    self.values.append(json.loads(progress))
                    self._cond.notify_all()

        target: Any = q
        target.set_progress = set_progress

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool]) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.values), WAIT)

    def made(self, count: int) -> bool:
        """Wait until ``count`` calls were made."""
        return self.wait_for(lambda values: len(values) >= count)

    def saw(self, fraction: float) -> bool:
        """Wait until a write of ``fraction`` was made."""
        return self.wait_for(lambda values: any(v["fraction"] == fraction for v in values))


def _result(job: Any) -> Any:
    """What the job ``add`` returned (not refused) gave."""
    assert job is not None, "the add was refused"
    return job.result(WAIT)


def _progress(record: varmq.JobRecord | None) -> JobProgress | None:
    assert record is not None
    return record.progress


# -- current_job() ----------------------------------------------------------------------------


def test_current_job_outside_a_running_job_raises() -> None:
    with pytest.raises(RuntimeError, match="outside a running job"):
        current_job()
    after: list[str] = []

    def when_closed() -> None:  # on the worker's thread, once the function returned
        try:
            after.append(f"left set: {current_job()!r}")
        except RuntimeError:
            after.append("reset")

    worker = varmq.new_result_worker(lambda job: current_job() is job, 1, auto_run=False)
    job = worker.bind_queue().add(None)
    assert job is not None and job._add_callback(when_closed)
    worker.start()
    assert _result(job) is True
    assert after == ["reset"]
    with pytest.raises(RuntimeError, match="outside a running job"):
        current_job()


def test_current_job_is_each_running_job_plain_and_async() -> None:
    worker = varmq.new_result_worker(lambda job: current_job() is job, 4)
    plain = [worker.bind_queue().add(i) for i in range(20)]
    assert all(_result(job) for job in plain)

    all_started = asyncio.Event()
    started: list[int] = []

    async def concurrent(job: varmq.Job[int]) -> bool:
        started.append(job.data)
        if len(started) == 3:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), WAIT)  # the three run interleaved here
        return current_job() is job

    fn: Any = concurrent
    async_worker = varmq.new_result_worker(fn, 3)
    jobs = [async_worker.bind_queue().add(i) for i in range(3)]
    assert [_result(job) for job in jobs] == [True, True, True]


# -- the checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [True, "0.5", None, [0.5], 1j])
def test_a_fraction_that_is_not_a_real_number_raises_type_error_naming_it(bad: Any) -> None:
    with pytest.raises(TypeError, match=f"fraction must be a real number.*{bad!r}"):
        varmq.Job("x", None).set_progress(bad)


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), float("inf"), 2])
def test_a_fraction_out_of_range_or_nan_raises_value_error_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match=f"from 0 to 1, got {float(bad)!r}"):
        varmq.Job("x", None).set_progress(bad)


def test_a_message_is_a_str_or_none_cut_to_a_kibibyte_at_a_character() -> None:
    with pytest.raises(TypeError, match="message must be a str or None, got 5"):
        varmq.Job("x", None).set_progress(0.5, 5)  # type: ignore[arg-type]
    assert check_progress(0, None) == (0.0, None)
    assert check_progress(1, "done") == (1.0, "done")
    assert check_progress(Fraction(1, 4), "") == (0.25, "")
    cut = check_progress(0.5, "\u00e9" * 1000)[1]  # two bytes each
    assert cut == "\u00e9" * (MESSAGE_LIMIT // 2)
    assert check_progress(0.5, "a" + "\u20ac" * 400)[1] == "a" + "\u20ac" * 341  # no half
    assert check_progress(0.5, "lone \ud800")[1] == "lone ?"  # stored as UTF-8


def test_progress_bytes_written_by_something_else_read_as_none() -> None:
    assert decode_progress(b'{"fraction":0.5,"message":"half"}') == JobProgress(0.5, "half")
    assert decode_progress(b'{"fraction":1}') == JobProgress(1.0, None)
    for foreign in (b"", b"\xff", b"[]", b'"x"', b'{"fraction":true}', b'{"fraction":2}'):
        assert decode_progress(foreign) is None
    assert decode_progress(b'{"fraction":0.5,"message":7}') is None


def test_set_progress_on_a_job_that_is_not_running_does_nothing() -> None:
    job = varmq.Job("made-by-hand", None)
    job.set_progress(0.5, "nowhere")
    assert job._extra is None  # nothing kept: it may run later and look again
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    queue = worker.bind_queue(keep_results=60)
    waiting = queue.add("x", job_id="waiting")
    assert waiting is not None
    waiting.set_progress(0.5)  # queued, not running
    assert _progress(queue.job("waiting")) is None


# -- the reference storage -------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["plain", "async"])
def test_a_running_job_s_progress_is_read_by_id_from_another_object(
    storage: MemoryStorage, flavour: str
) -> None:
    q = storage.new_distributed_queue("jobs", keep_results=60)
    writes = Writes(q)
    release = threading.Event()

    def plain(job: varmq.Job[str]) -> str:
        current_job().set_progress(0.5, "half way")
        assert release.wait(WAIT)
        return job.data

    async def coroutine(job: varmq.Job[str]) -> str:
        current_job().set_progress(0.5, "half way")
        await asyncio.get_running_loop().run_in_executor(None, release.wait, WAIT)
        return job.data

    fn: Any = plain if flavour == "plain" else coroutine
    worker = varmq.new_result_worker(fn, 1)
    worker.with_distributed_queue(q)
    reader = varmq.new_distributed_queue(storage.new_distributed_queue("jobs"))
    assert reader.add("x", job_id="job-1")
    assert writes.saw(0.5)
    running = reader.job("job-1")
    assert running is not None and running.state == "running"
    assert running.progress == JobProgress(0.5, "half way")
    release.set()
    assert reader.result_of("job-1", timeout=WAIT) == "x"
    assert _progress(reader.job("job-1")) == JobProgress(0.5, "half way")  # kept at the end
    assert worker.errs().empty()


def test_a_tight_loop_makes_a_handful_of_storage_writes_and_the_last_is_stored_soon(
    storage: MemoryStorage,
) -> None:
    q = storage.new_queue("jobs", keep_results=60)
    writes = Writes(q)
    looped, release = threading.Event(), threading.Event()
    took: list[float] = []

    def busy(job: varmq.Job[None]) -> None:
        began = time.monotonic()
        for i in range(1, 10_001):
            job.set_progress(i / 20_000, f"item {i}")
        for i in range(1, 51):  # then slower, so that the renewal thread gets its turns
            job.set_progress(0.5 + i / 100, f"step {i}")
            time.sleep(0.01)  # time passing on purpose: the throttle is about time
        took.append(time.monotonic() - began)
        looped.set()
        assert release.wait(WAIT)  # still running: the last value comes with no end

    worker = varmq.new_worker(busy, 1)
    handle = worker.with_persistent_queue(q)
    assert handle.add(None, job_id="job-1")
    assert looped.wait(WAIT)
    assert writes.saw(1.0), "the last value was never written while the job ran"
    # One write at once, then one per MIN_INTERVAL at most while it ran, and the trailing one.
    assert len(writes.values) <= 2 + took[0] / MIN_INTERVAL, (took, writes.values)
    assert len(writes.values) <= 8, writes.values
    assert _progress(handle.job("job-1")) == JobProgress(1.0, "step 50")
    release.set()
    assert handle.result_of("job-1", timeout=WAIT) is None
    assert len(writes.values) <= 8, writes.values  # nothing left to write at the end


def test_the_last_value_set_just_before_the_end_is_in_the_ended_record(
    storage: MemoryStorage,
) -> None:
    q = storage.new_queue("jobs", keep_results=60)
    writes = Writes(q)

    async def quick(job: varmq.Job[None]) -> None:
        job.set_progress(0.1, "started")
        job.set_progress(1.0, "finished")  # throttled, so not written yet: written before the end

    worker = varmq.new_worker(quick, 1)
    handle = worker.with_persistent_queue(q)
    assert handle.add(None, job_id="job-1")
    assert handle.result_of("job-1", timeout=WAIT) is None
    assert _progress(handle.job("job-1")) == JobProgress(1.0, "finished")
    assert len(writes.values) <= 2


def test_a_storage_error_on_a_progress_write_is_logged_once_and_never_fails_the_job(
    storage: MemoryStorage, caplog: pytest.LogCaptureFixture
) -> None:
    q = storage.new_queue("flaky", keep_results=60)
    writes = Writes(q, fail=ConnectionError("storage down"))

    def work(job: varmq.Job[None]) -> str:
        for n in (1, 2, 3):
            job.set_progress(n / 4)
            assert writes.made(n)  # each one tried
        return "fine"

    worker = varmq.new_result_worker(work, 1)
    handle = worker.with_persistent_queue(q)
    with caplog.at_level(logging.WARNING, logger="varmq"):
        assert handle.add(None, job_id="job-1")
        assert handle.result_of("job-1", timeout=WAIT) == "fine"
    warnings = [r for r in caplog.records if "progress" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "'job-1'" in warnings[0].getMessage() and "'flaky'" in warnings[0].getMessage()
    assert "storage down" in warnings[0].getMessage()
    assert worker.errs().empty() and worker.metrics.successful == 1


def test_jobs_without_records_make_no_progress_write_after_the_first_answer(
    storage: MemoryStorage,
) -> None:
    plain = storage.new_queue("plain")
    unrecorded = Writes(plain)
    kept = storage.new_queue("kept", keep_results=60)
    anonymous = Writes(kept)

    def work(job: varmq.Job[str]) -> None:
        for i in range(1000):
            job.set_progress(i / 1000)
        if job.data == "kept":
            assert anonymous.made(1)  # the storage answered False: no record
        job.set_progress(1.0)  # neither written later nor before the end

    worker = varmq.new_worker(work, 2)
    worker.with_persistent_queue(plain).add("plain", job_id="no-records")
    worker.with_persistent_queue(kept).add("kept")  # no id: no record
    assert worker.wait(WAIT)
    worker.stop_and_wait(WAIT)
    assert unrecorded.values == []  # a queue without records: never asked
    assert len(anonymous.values) == 1, anonymous.values  # asked once: no record, no more


# -- in-memory queues with records -----------------------------------------------------------


@pytest.mark.parametrize("flavour", ["plain", "async"])
def test_an_in_memory_job_s_progress_is_in_its_record_and_a_retry_starts_without(
    flavour: str,
) -> None:
    seen_at_start: list[JobProgress | None] = []
    halfway, release = threading.Event(), threading.Event()
    queue: Any = None

    def step(job: varmq.Job[str]) -> str:
        seen_at_start.append(_progress(queue.job(job.id)))
        current_job().set_progress(0.5 * job.attempt, f"attempt {job.attempt}")
        if job.attempt == 1:
            raise ValueError("first attempt fails")
        halfway.set()
        assert release.wait(WAIT)
        return "ok"

    async def coroutine(job: varmq.Job[str]) -> str:
        return step(job)

    fn: Any = step if flavour == "plain" else coroutine
    worker = varmq.new_result_worker(fn, 1, retry=varmq.Retry(max_attempts=2, backoff=0.0))
    queue = worker.bind_queue(keep_results=60)
    queue.add("x", job_id="job-1")
    assert halfway.wait(WAIT)
    assert _progress(queue.job("job-1")) == JobProgress(1.0, "attempt 2")
    release.set()
    assert queue.result_of("job-1", timeout=WAIT) == "ok"
    assert seen_at_start == [None, None]  # each attempt starts without progress
    ended = queue.job("job-1")
    assert ended is not None and ended.state == "succeeded"
    assert ended.progress == JobProgress(1.0, "attempt 2")


def test_an_in_memory_queue_without_records_takes_progress_and_keeps_none() -> None:
    worker = varmq.new_result_worker(lambda job: job.set_progress(0.5) or "ran", 1)
    assert _result(worker.bind_queue().add(None)) == "ran"


# -- sqliteq and redisq, through the worker -----------------------------------------------------


@pytest.fixture
def sqliteq_queues(tmp_path: Path) -> Iterator[Callable[[], Any]]:
    opened: list[Any] = []

    def new() -> Any:
        opened.append(sqliteq.new(tmp_path / "jobs.db"))
        return opened[-1]

    yield new
    for queues in opened:
        queues.close()


@pytest.fixture
def redisq_queues(redis_url: str) -> Iterator[Callable[[], Any]]:
    opened: list[Any] = []

    def new() -> Any:
        opened.append(redisq.new(redis_url))
        return opened[-1]

    yield new
    for queues in opened:
        queues.close()


@pytest.mark.parametrize("adapter", ["sqliteq", "redisq"])
def test_an_adapter_keeps_a_running_job_s_progress_for_any_process(
    adapter: str, request: pytest.FixtureRequest
) -> None:
    open_store: Callable[[], Any] = request.getfixturevalue(f"{adapter}_queues")
    name = f"progress-{uuid.uuid4().hex}"
    consumer = open_store().new_distributed_queue(name, keep_results=60)
    writes = Writes(consumer)
    release = threading.Event()

    def work(job: varmq.Job[int]) -> int:
        for i in range(1, 5001):
            job.set_progress(i / 10_000, f"row {i}")
        assert release.wait(WAIT)
        job.set_progress(1.0, "all rows")
        return job.data

    worker = varmq.new_result_worker(work, 1)
    worker.with_distributed_queue(consumer)
    reader = varmq.new_distributed_queue(open_store().new_distributed_queue(name))
    assert reader.add(7, job_id="job-1")
    assert writes.saw(0.5)
    running = reader.job("job-1")
    assert running is not None and running.state == "running"
    assert running.progress == JobProgress(0.5, "row 5000")
    release.set()
    assert reader.result_of("job-1", timeout=WAIT) == 7
    assert _progress(reader.job("job-1")) == JobProgress(1.0, "all rows")
    assert len(writes.values) <= 5, writes.values
    worker.stop_and_wait(WAIT)
    assert worker.errs().empty(), list(worker.errs().queue)
