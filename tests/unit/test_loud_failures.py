"""Mistakes and failures are loud: bad options are refused where they are given, a failing job
is logged with its traceback, and nothing in the worker's own path can wedge it."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import varmq
from varmq.testing import MemoryStorage

WAIT = 5.0


def noop(job: varmq.Job[Any]) -> None:
    return None


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"retry": 3}, TypeError, "retry must be a Retry, got 3"),
        ({"retry": "yes"}, TypeError, "retry must be a Retry"),
        ({"poll_interval": "1"}, TypeError, "poll_interval must be a number"),
        ({"poll_interval": 0}, ValueError, "poll_interval must be > 0"),
        ({"poll_interval": float("nan")}, ValueError, "poll_interval must be a finite"),
        ({"idle_worker_expiry": -1}, ValueError, "idle_worker_expiry must be >= 0"),
        ({"max_errors": 0}, ValueError, "max_errors must be >= 1"),
        ({"poison_limit": 0}, ValueError, "poison_limit must be >= 1"),
        ({"prefetch": -1}, ValueError, "prefetch must be >= 0"),
        ({"prefetch": 2.5}, TypeError, "prefetch must be an int"),
        ({"strategy": "fastest"}, ValueError, "strategy must be one of"),
        ({"name": 7}, TypeError, "name must be a str"),
        ({"auto_run": "no"}, TypeError, "auto_run must be a bool"),
        ({"error_handler": "print"}, TypeError, "error_handler must be callable"),
        ({"job_id_generator": 5}, TypeError, "job_id_generator must be callable"),
        ({"min_idle_worker_ratio": 1.5}, TypeError, "min_idle_worker_ratio must be an int"),
        ({"log_failures": 1}, TypeError, "log_failures must be a bool"),
    ],
    ids=lambda v: str(v) if not isinstance(v, dict) else next(iter(v)),
)
def test_a_bad_worker_option_is_refused_at_construction_naming_it(
    options: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        varmq.new_worker(noop, 1, **options)


@pytest.mark.parametrize(
    ("concurrency", "error"),
    [("4", TypeError), (1.5, TypeError), (True, TypeError), (-2, ValueError)],
)
def test_a_bad_concurrency_is_refused_naming_it(
    concurrency: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="concurrency"):
        varmq.new_worker(noop, concurrency)  # type: ignore[arg-type]


def test_a_job_function_that_takes_no_argument_is_refused_at_construction() -> None:
    def no_arguments() -> None:
        return None

    with pytest.raises(TypeError, match="must take one argument, the job"):
        varmq.new_worker(no_arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"delay": "5"}, TypeError, "delay must be a number of seconds"),
        ({"delay": float("nan")}, ValueError, "delay must be a finite"),
        ({"delay": -1}, ValueError, "delay must be >= 0"),
        ({"run_at": 1_900_000_000.0}, TypeError, "run_at must be a datetime"),
        ({"job_id": 42}, TypeError, "job_id must be a str"),
        ({"delay": 1, "run_at": datetime.now(timezone.utc)}, ValueError, "not both"),
    ],
    ids=lambda v: str(v) if not isinstance(v, dict) else ",".join(v),
)
def test_a_bad_add_argument_is_refused_on_every_queue_kind(
    arguments: dict[str, Any], error: type[Exception], named: str
) -> None:
    storage = MemoryStorage()
    worker = varmq.new_worker(noop, auto_run=False)
    handles = [
        worker.bind_queue(),
        worker.with_persistent_queue(storage.new_queue("p")),
        varmq.new_distributed_queue(storage.new_distributed_queue("d")),
    ]
    for handle in handles:
        with pytest.raises(error, match=named):
            handle.add({"n": 1}, **arguments)
        assert len(handle) == 0


def test_a_priority_that_is_not_an_int_is_refused() -> None:
    worker = varmq.new_worker(noop, auto_run=False)
    with pytest.raises(TypeError, match="priority must be an int"):
        worker.bind_priority_queue().add("x", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an int"):
        worker.with_persistent_priority_queue(MemoryStorage().new_priority_queue("p")).add(
            "x",
            1.0,  # type: ignore[arg-type]
        )


def test_strict_add_raises_enqueue_error_naming_the_queue_instead_of_a_refusal() -> None:
    storage = MemoryStorage()
    q = storage.new_queue("emails")
    worker = varmq.new_worker(noop, auto_run=False)
    handle = worker.with_persistent_queue(q)
    q.faults.refuse_enqueue = True
    assert handle.add("a") is False
    with pytest.raises(varmq.EnqueueError, match="queue 'emails' did not store job 'j-1'"):
        handle.add("a", job_id="j-1", strict=True)
    memory = worker.bind_queue(capacity=1)
    memory.add("first")
    assert memory.add("second") is None
    with pytest.raises(varmq.EnqueueError, match="closed or full"):
        memory.add("third", strict=True)


class _BrokenQueue:
    """A caller's IQueue whose dequeue fails after the first job."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.broken = False

    def __len__(self) -> int:
        return len(self.items)

    def enqueue(self, item: Any) -> bool:
        self.items.append(item)
        return True

    def dequeue(self) -> Any:
        if self.broken:
            raise OSError("disk gone")
        return self.items.pop(0) if self.items else None

    def values(self) -> list[Any]:
        return list(self.items)

    def purge(self) -> None:
        self.items.clear()

    def close(self) -> None:
        return None


def test_a_failing_queue_of_the_caller_is_reported_and_never_wedges_the_worker() -> None:
    broken = _BrokenQueue()
    worker = varmq.new_worker(noop, 2)
    handle = worker.with_queue(broken)
    good = worker.bind_queue()
    broken.broken = True
    handle.add("a")
    assert good.add("b") is not None and good.add("c") is not None
    error = worker.errs().get(timeout=WAIT)
    assert isinstance(error, varmq.FailedToDequeueError)
    assert "disk gone" in str(error)
    assert worker.wait_until_idle(timeout=0.2) is False  # the broken queue still holds a job
    assert worker.metrics.successful == 2
    broken.broken = False
    assert worker.wait_until_idle(WAIT)
    assert worker.stop_and_wait(WAIT)


def test_a_failing_job_is_logged_at_warning_with_its_queue_id_attempt_and_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fails(job: varmq.Job[Any]) -> None:
        raise ValueError("bad address")

    worker = varmq.new_worker(fails)
    queue = worker.bind_queue(name="emails")
    with caplog.at_level(logging.WARNING, logger="varmq"):
        job = queue.add({"to": "x"}, job_id="welcome-1")
        assert job is not None and job.wait(WAIT)
    [record] = [r for r in caplog.records if r.name.startswith("varmq")]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "'welcome-1'" in message and "'emails'" in message and "attempt 1" in message
    assert "ValueError: bad address" in message
    assert record.exc_info is not None and record.exc_info[1] is worker.errs().get_nowait()


def test_log_failures_false_keeps_a_failing_job_out_of_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fails(job: varmq.Job[Any]) -> None:
        raise ValueError("bad address")

    worker = varmq.new_worker(fails, log_failures=False)
    with caplog.at_level(logging.DEBUG, logger="varmq"):
        job = worker.bind_queue().add(1)
        assert job is not None and job.wait(WAIT)
    assert not [r for r in caplog.records if r.name.startswith("varmq")]
    assert isinstance(worker.errs().get_nowait(), ValueError)


def test_an_error_handler_with_three_parameters_gets_the_failed_job() -> None:
    got: list[tuple[BaseException, varmq.FailedJob | None]] = []
    done = threading.Event()

    def handler(worker: Any, exc: BaseException, job: varmq.FailedJob | None) -> None:
        got.append((exc, job))
        done.set()

    def fails(job: varmq.Job[Any]) -> None:
        raise KeyError("k")

    worker = varmq.new_worker(fails, error_handler=handler, log_failures=False)
    worker.bind_queue(name="orders").add({"n": 3}, job_id="o-3")
    assert done.wait(WAIT)
    [(exc, job)] = got
    assert isinstance(exc, KeyError)
    assert job == varmq.FailedJob(id="o-3", queue="orders", attempt=1, data={"n": 3})


def test_a_dead_letter_keeps_the_traceback_of_the_failure_bounded_in_size() -> None:
    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise RuntimeError("x" * 50_000)

    def fails(job: varmq.Job[Any]) -> None:
        deep(3)

    storage = MemoryStorage()
    worker = varmq.new_worker(fails, retry=varmq.Retry(max_attempts=1), log_failures=False)
    memory = worker.bind_queue()
    stored = worker.with_persistent_queue(storage.new_queue("jobs"))
    memory.add(1)
    stored.add(2)
    assert worker.wait(WAIT)
    for handle in (memory, stored):
        [letter] = handle.dead_letters()
        assert letter.error.startswith("RuntimeError: xxx")
        assert "Traceback (most recent call last)" in letter.error
        assert "in deep" in letter.error
        assert len(letter.error) <= 16_384 + 100
        assert "[49000 characters cut]" in letter.error


def test_run_at_in_the_past_runs_at_once() -> None:
    done = threading.Event()
    worker = varmq.new_worker(lambda job: done.set())
    worker.bind_queue().add(1, run_at=datetime.now(timezone.utc) - timedelta(hours=1))
    assert done.wait(WAIT)


@pytest.mark.parametrize("how", ["add", "add_async"])
def test_an_add_the_storage_fails_raises_enqueue_error_strict_or_not(how: str) -> None:
    """``False`` means "duplicate" or "full"; an unreachable storage is not that, and a caller
    that ignores the answer must not lose the job without an exception."""
    storage = MemoryStorage()
    q = storage.new_queue("emails")
    handle = varmq.new_worker(noop, auto_run=False).with_persistent_queue(q)
    q.faults.unreachable = ConnectionError("connection refused")
    with pytest.raises(
        varmq.EnqueueError, match=r"queue 'emails'.*'j-1'.*connection refused"
    ) as exc:
        if how == "add":
            handle.add("a", job_id="j-1")
        else:
            asyncio.run(handle.add_async("a", job_id="j-1"))
    assert isinstance(exc.value.__cause__, ConnectionError)
    q.faults.unreachable = None
    assert handle.add("a", job_id="j-1") is True and len(handle) == 1


def test_a_naive_run_at_is_refused_naming_the_rule() -> None:
    worker = varmq.new_worker(noop, auto_run=False)
    naive = datetime.now() + timedelta(hours=1)  # naive: the point of the test
    for handle in (
        worker.bind_queue(),
        worker.with_persistent_queue(MemoryStorage().new_queue("q")),
    ):
        with pytest.raises(ValueError, match="has no time zone; give an aware datetime"):
            handle.add(1, run_at=naive)
        assert len(handle) == 0
