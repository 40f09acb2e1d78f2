"""Retries with backoff, delayed jobs and dead letters, on in-memory and storage queues."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
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


class Flaky:
    """A job function that raises for the first ``failures`` runs of each job."""

    def __init__(self, failures: int, error: type[Exception] = RuntimeError) -> None:
        self.failures = failures
        self.error = error
        self.runs: list[tuple[Any, int, float]] = []
        self.lock = threading.Lock()

    def __call__(self, job: varmq.Job[Any]) -> str:
        with self.lock:
            self.runs.append((job.data, job.attempt, time.monotonic()))
            count = sum(1 for data, _, _ in self.runs if data == job.data)
        if count <= self.failures:
            raise self.error(f"run {count} of {job.data!r} failed")
        return f"done {job.data}"


FAST = varmq.Retry(max_attempts=3, backoff=0.1, multiplier=2.0, jitter=False)


def test_job_failing_twice_then_succeeding_completes_on_attempt_three_after_the_delays(
    workers,
) -> None:
    flaky = Flaky(failures=2)
    worker = varmq.new_result_worker(flaky, retry=FAST)
    workers.append(worker)
    job = worker.bind_queue().add("a")
    assert job is not None
    assert job.result(WAIT) == "done a"
    assert [attempt for _, attempt, _ in flaky.runs] == [1, 2, 3]
    times = [t for _, _, t in flaky.runs]
    assert times[1] - times[0] >= 0.1  # backoff
    assert times[2] - times[1] >= 0.2  # backoff * multiplier
    assert times[2] - times[0] < 2.0
    assert worker.wait(WAIT)
    m = worker.metrics
    assert (m.successful, m.failed, m.retried, m.completed, m.dead_lettered) == (1, 2, 2, 1, 0)
    assert job.attempt == 3


def test_job_out_of_attempts_goes_to_the_dead_letters_with_its_last_error(workers) -> None:
    flaky = Flaky(failures=10)
    worker = varmq.new_err_worker(flaky, retry=FAST)
    workers.append(worker)
    queue = worker.bind_queue()
    job = queue.add({"order": 7}, job_id="order-7")
    assert job is not None
    error = job.err(WAIT)
    assert isinstance(error, RuntimeError) and "run 3" in str(error)
    assert worker.wait(WAIT)
    [letter] = queue.dead_letters()
    assert (letter.id, letter.data, letter.attempts) == ("order-7", {"order": 7}, 3)
    assert "RuntimeError: run 3" in letter.error and letter.dead_at <= time.time()
    assert worker.metrics.dead_lettered == 1 and worker.metrics.retried == 2


@pytest.mark.parametrize("raised", [ValueError, varmq.NoRetry])
def test_not_retryable_exception_dead_letters_at_once(workers, raised) -> None:
    flaky = Flaky(failures=1, error=raised)
    policy = varmq.Retry(max_attempts=5, backoff=0.01, non_retryable=(ValueError,))
    worker = varmq.new_worker(flaky, retry=policy)
    workers.append(worker)
    queue = worker.bind_priority_queue()
    assert queue.add("x", 3) is not None
    assert worker.wait(WAIT)
    assert len(flaky.runs) == 1
    assert [letter.data for letter in queue.dead_letters()] == ["x"]


def test_requeued_dead_letter_runs_again_and_purge_dead_forgets_them(workers) -> None:
    flaky = Flaky(failures=1)
    worker = varmq.new_worker(flaky, retry=varmq.Retry(max_attempts=1))
    workers.append(worker)
    queue = worker.bind_queue()
    queue.add("a")
    queue.add("b")
    assert worker.wait(WAIT)
    letters = queue.dead_letters()
    assert sorted(letter.data for letter in letters) == ["a", "b"]
    first = next(letter for letter in letters if letter.data == "a")
    assert queue.requeue_dead([first.key]) == 1
    assert worker.wait(WAIT)
    assert [data for data, _, _ in flaky.runs].count("a") == 2  # ran again, and succeeded
    assert [letter.data for letter in queue.dead_letters()] == ["b"]
    assert queue.purge_dead() == 1 and queue.dead_letters() == []


def test_without_a_policy_a_failed_job_is_not_retried(workers) -> None:
    flaky = Flaky(failures=1)
    worker = varmq.new_worker(flaky)
    workers.append(worker)
    queue = worker.bind_queue()
    queue.add("a")
    assert worker.wait(WAIT)
    assert len(flaky.runs) == 1 and queue.dead_letters() == []
    assert worker.metrics.failed == 1 and worker.metrics.retried == 0


def test_delayed_in_memory_job_waits_for_its_time(workers) -> None:
    ran = threading.Event()
    worker = varmq.new_worker(lambda job: ran.set())
    workers.append(worker)
    queue = worker.bind_queue()
    added = time.monotonic()
    assert queue.add("later", delay=0.3) is not None
    assert worker.num_pending == 1
    assert not ran.wait(0.15), "a delayed job ran early"
    assert ran.wait(WAIT)
    assert time.monotonic() - added >= 0.3
    assert worker.wait(WAIT)


def test_run_at_takes_a_datetime_and_wait_covers_delayed_jobs(workers) -> None:
    runs: list[float] = []
    worker = varmq.new_worker(lambda job: runs.append(time.time()))
    workers.append(worker)
    queue = worker.bind_priority_queue()
    when = datetime.now(timezone.utc) + timedelta(seconds=0.2)
    assert queue.add("x", 1, run_at=when) is not None
    assert worker.wait(WAIT)  # returns only after the delayed job ran
    assert len(runs) == 1 and runs[0] >= when.timestamp()


def test_delay_and_run_at_together_are_refused(workers) -> None:
    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    with pytest.raises(ValueError, match="not both"):
        worker.bind_queue().add("x", delay=1, run_at=datetime.now(timezone.utc))
    with pytest.raises(ValueError, match="delay"):
        worker.bind_queue().add("x", delay=-1)


# -- storage queues (the reference storage; the adapters run the same paths) -------------------


def test_stored_job_retried_with_its_attempt_count_then_succeeds(workers) -> None:
    storage = MemoryStorage()
    flaky = Flaky(failures=2)
    worker = varmq.new_worker(flaky, retry=FAST, poll_interval=60.0)
    workers.append(worker)
    handle = worker.with_persistent_queue(storage.new_queue("q"))
    assert handle.add("a")
    deadline = time.monotonic() + WAIT
    while len(flaky.runs) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.wait(WAIT)
    assert [attempt for _, attempt, _ in flaky.runs] == [1, 2, 3]
    times = [t for _, _, t in flaky.runs]
    assert times[1] - times[0] >= 0.1 and times[2] - times[1] >= 0.2
    assert times[2] - times[0] < 2.0, "retries waited for a poll instead of their due time"
    assert storage.new_queue("q").stats()["dead"] == 0


def test_stored_job_out_of_attempts_is_dead_lettered_in_storage(workers) -> None:
    storage = MemoryStorage()
    flaky = Flaky(failures=10, error=KeyError)
    worker = varmq.new_worker(flaky, retry=varmq.Retry(max_attempts=2, backoff=0.01))
    workers.append(worker)
    handle = worker.with_persistent_priority_queue(storage.new_priority_queue("q"))
    assert handle.add({"n": 1}, 5, job_id="j1")
    deadline = time.monotonic() + WAIT
    while not handle.dead_letters() and time.monotonic() < deadline:
        time.sleep(0.01)
    [letter] = handle.dead_letters()
    assert (letter.id, letter.data, letter.attempts) == ("j1", {"n": 1}, 2)
    assert "KeyError" in letter.error
    assert handle.requeue_dead() == 1
    # Requeued with its attempts reset: it runs twice more, then is dead again.
    deadline = time.monotonic() + WAIT
    while len(flaky.runs) < 4 or not handle.dead_letters():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert [attempt for _, attempt, _ in flaky.runs] == [1, 2, 1, 2]
    assert handle.purge_dead() == 1 and handle.dead_letters() == []


def test_poison_bytes_are_dead_lettered_after_the_poison_limit(workers) -> None:
    storage = MemoryStorage()
    q = storage.new_queue("q", visibility_timeout=0.2)
    assert q.enqueue(b"\x00 never json")
    worker = varmq.new_worker(lambda job: None, poison_limit=2, poll_interval=0.05)
    workers.append(worker)
    handle = worker.with_persistent_queue(q)
    deadline = time.monotonic() + WAIT
    while not handle.dead_letters() and time.monotonic() < deadline:
        time.sleep(0.02)
    [letter] = handle.dead_letters()
    assert letter.data == b"\x00 never json" and letter.attempts == 2
    assert "undecodable" in letter.error
    parse_errors = [e for e in worker.errs().queue if isinstance(e, varmq.ParseJobError)]
    assert len(parse_errors) == 2


def test_delayed_stored_job_runs_promptly_when_due_without_a_poll(workers) -> None:
    storage = MemoryStorage()
    ran = threading.Event()
    worker = varmq.new_worker(lambda job: ran.set(), poll_interval=60.0)
    workers.append(worker)
    handle = worker.with_distributed_queue(storage.new_distributed_queue("q"))
    started = time.monotonic()
    assert handle.add("x", delay=0.3)
    assert len(handle) == 0
    assert not ran.wait(0.15)
    assert ran.wait(WAIT)
    assert 0.3 <= time.monotonic() - started < 2.0


def test_delays_need_storage_that_can_delay(workers) -> None:
    class NoDelays:
        """A persistent queue without enqueue_delayed."""

        def __init__(self) -> None:
            self.items: list[Any] = []

        def __len__(self) -> int:
            return len(self.items)

        def dequeue(self) -> Any:
            return None

        def values(self) -> list[Any]:
            return list(self.items)

        def purge(self) -> None:
            self.items.clear()

        def close(self) -> None:
            pass

        def enqueue(self, item: Any) -> bool:
            self.items.append(item)
            return True

        def dequeue_with_ack_id(self) -> Any:
            return None

        def acknowledge(self, ack_id: str) -> bool:
            return True

    worker = varmq.new_worker(lambda job: None)
    workers.append(worker)
    handle = worker.with_persistent_queue(NoDelays())
    with pytest.raises(TypeError, match="cannot delay"):
        handle.add("x", delay=1)
    with pytest.raises(TypeError, match="dead letters"):
        handle.dead_letters()


def test_storage_jobs_falling_due_at_different_times_each_run_at_their_time_not_at_the_poll(
    workers: list[Any],
) -> None:
    # A poll far away: only the worker's knowledge of each due time can start these jobs soon.
    ran: dict[int, float] = {}
    done = threading.Event()

    def record(job: varmq.Job[int]) -> None:
        ran[job.data] = time.monotonic()
        if len(ran) == 4:
            done.set()

    worker = varmq.new_worker(record, 4, poll_interval=30.0)
    workers.append(worker)
    handle = worker.with_persistent_queue(MemoryStorage().new_queue("later"))
    start = time.monotonic()
    delays = {1: 0.2, 2: 0.3, 3: 0.4, 4: 0.5}
    for n, delay in delays.items():
        assert handle.add(n, delay=delay)
    assert done.wait(WAIT), f"ran {sorted(ran)} of 4 within {WAIT} s"
    for n, delay in delays.items():
        assert ran[n] - start >= delay
        assert ran[n] - start < delay + 1.0, f"job {n} ran {ran[n] - start - delay:.2f} s late"


def test_storage_retries_falling_due_together_all_run_without_waiting_for_the_poll(
    workers: list[Any],
) -> None:
    flaky = Flaky(failures=1)
    worker = varmq.new_worker(flaky, 4, poll_interval=30.0, retry=varmq.Retry(backoff=0.2))
    workers.append(worker)
    handle = worker.with_persistent_queue(MemoryStorage().new_queue("flaky"))
    for n in range(4):
        assert handle.add(n)
    deadline = time.monotonic() + WAIT
    while len(flaky.runs) < 8 and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a counter the job function writes: no event to wait on
    assert len(flaky.runs) == 8, flaky.runs


def test_a_queue_bound_with_its_own_retry_policy_uses_it_instead_of_the_workers(
    workers,
) -> None:
    runs: list[tuple[str, int]] = []
    lock = threading.Lock()

    def fail(job: varmq.Job[Any]) -> None:
        with lock:
            runs.append((job.data, job.attempt))
        raise RuntimeError("no")

    worker = varmq.new_worker(fail, retry=varmq.Retry(max_attempts=3, backoff=0.0))
    workers.append(worker)
    own = worker.bind_queue(name="own", retry=varmq.Retry(max_attempts=1, backoff=0.0))
    inherited = worker.with_priority_queue(varmq.MemoryPriorityQueue(), name="inherited")
    own.add("own")
    inherited.add("inherited", 1)
    assert worker.wait(WAIT)
    assert [attempt for data, attempt in runs if data == "own"] == [1]
    assert [attempt for data, attempt in runs if data == "inherited"] == [1, 2, 3]
    assert len(own.dead_letters()) == 1 and len(inherited.dead_letters()) == 1


def test_a_queue_retry_policy_must_be_a_retry() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    with pytest.raises(TypeError, match=r"varmq\.Retry"):
        worker.bind_queue(retry=3)  # type: ignore[arg-type]


def test_a_storage_worker_with_its_own_retry_ahead_is_not_idle(workers) -> None:
    # The retry waits in the storage (a nack with a delay), not in the worker: until it ran,
    # wait_until_idle must not answer, as it does not for an in-memory queue's retry.
    storage = MemoryStorage()  # the real clock
    attempts: list[int] = []

    def fails_once(job: varmq.Job[Any]) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise ValueError("first run fails")

    worker = varmq.new_worker(fails_once, retry=varmq.Retry(max_attempts=2, backoff=0.3))
    workers.append(worker)
    handle = worker.with_persistent_queue(storage.new_queue("retried"))
    assert handle.add("x")
    assert worker.wait_until_idle(WAIT)
    assert attempts == [1, 2]
