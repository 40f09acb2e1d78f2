"""Per-job timeouts: a job that runs too long fails with JobTimeoutError, follows the retry
policy, and never keeps the worker from running other jobs or from stopping."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import varmq
from varmq.testing import MemoryStorage

WAIT = 5.0


@pytest.fixture
def hang() -> Iterator[threading.Event]:
    """Jobs that wait on this hang until the test ends (then their threads return)."""
    released = threading.Event()
    yield released
    released.set()


def test_a_hanging_job_times_out_is_retried_and_ends_in_dead_letters_while_others_run(
    hang: threading.Event,
) -> None:
    ran: list[Any] = []

    def run(job: varmq.Job[str]) -> None:
        ran.append((job.data, job.attempt))
        if job.data == "hangs":
            hang.wait()

    worker = varmq.new_worker(
        run,
        4,
        timeout=0.3,
        retry=varmq.Retry(max_attempts=2, backoff=0.05, jitter=False),
        log_failures=False,
    )
    queue = worker.bind_queue()
    hung = queue.add("hangs")
    quick = [queue.add(f"quick-{n}") for n in range(5)]
    assert all(job is not None and job.wait(WAIT) for job in quick)
    assert hung is not None and hung.wait(WAIT)
    [letter] = queue.dead_letters()
    assert letter.error.startswith("JobTimeoutError: job")
    assert letter.attempts == 2
    assert ("hangs", 1) in ran and ("hangs", 2) in ran
    assert worker.metrics.timed_out == 2
    errors = [worker.errs().get_nowait() for _ in range(worker.errs().qsize())]
    assert [type(e) for e in errors] == [varmq.JobTimeoutError, varmq.JobTimeoutError]
    start = time.monotonic()
    assert worker.stop_and_wait(WAIT)  # the two hung threads do not hold the stop
    assert time.monotonic() - start < 1.0


def test_a_timed_out_job_has_its_cancelled_event_set(hang: threading.Event) -> None:
    seen: list[bool] = []
    returned = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        seen.append(job.cancelled.wait(WAIT))  # a well-behaved long job watches this
        returned.set()

    worker = varmq.new_worker(run, timeout=0.2, log_failures=False)
    job = worker.bind_queue().add(1)
    assert job is not None and job.wait(WAIT)  # closed at its timeout, as the function runs on
    assert returned.wait(WAIT)
    assert seen == [True]
    assert worker.metrics.timed_out == 1
    assert worker.metrics.successful == 0  # the function returned after its timeout: failed


def test_a_timeout_given_to_add_overrides_the_workers(hang: threading.Event) -> None:
    def run(job: varmq.Job[Any]) -> None:
        hang.wait(job.data)

    worker = varmq.new_result_worker(run, 2, timeout=10.0, log_failures=False)
    queue = worker.bind_queue()
    short = queue.add(WAIT, timeout=0.2)
    assert short is not None
    with pytest.raises(varmq.JobTimeoutError, match=r"ran longer than its 0\.2 s"):
        short.result(WAIT)


def test_a_producer_sets_the_timeout_of_a_storage_job_for_its_consumer(
    hang: threading.Event,
) -> None:
    storage = MemoryStorage()
    producer = varmq.new_distributed_queue(storage.new_distributed_queue("jobs"))
    assert producer.add("slow", timeout=0.2)
    worker = varmq.new_worker(
        lambda job: hang.wait(), retry=varmq.Retry(max_attempts=1), log_failures=False
    )
    handle = worker.with_distributed_queue(storage.new_distributed_queue("jobs"))
    deadline = time.monotonic() + WAIT
    while not handle.dead_letters() and time.monotonic() < deadline:
        time.sleep(0.02)  # the dead letter is in storage: nothing to wait on but the storage
    [letter] = handle.dead_letters()
    assert "JobTimeoutError" in letter.error
    assert worker.metrics.timed_out == 1
    assert worker.stop_and_wait(WAIT)


def test_an_async_job_that_awaits_forever_is_cancelled_at_its_timeout() -> None:
    cancelled = threading.Event()

    async def run(job: varmq.Job[Any]) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = varmq.new_err_worker(run, timeout=0.2, log_failures=False)
    job = worker.bind_queue().add(1)
    assert job is not None
    assert isinstance(job.err(WAIT), varmq.JobTimeoutError)
    assert cancelled.is_set()
    assert worker.metrics.timed_out == 1
    assert worker.stop_and_wait(WAIT)


def test_a_bad_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="timeout must be > 0"):
        varmq.new_worker(lambda job: None, timeout=0)
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    with pytest.raises(TypeError, match="timeout must be a number"):
        worker.bind_queue().add(1, timeout="5")  # type: ignore[arg-type]


def test_the_next_attempt_after_a_timeout_starts_with_cancelled_cleared() -> None:
    seen: list[tuple[int, bool]] = []
    returned = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        if job.attempt == 1:
            job.cancelled.wait(WAIT)  # runs into its timeout, then returns
            return
        seen.append((job.attempt, job.cancelled.is_set()))
        returned.set()

    worker = varmq.new_worker(
        run,
        2,
        timeout=0.2,
        retry=varmq.Retry(max_attempts=2, backoff=0.0, jitter=False),
        log_failures=False,
    )
    worker.bind_queue().add(1)
    assert returned.wait(WAIT)
    assert seen == [(2, False)]
    assert worker.stop_and_wait(WAIT)
