"""``hard_timeout``: how long a plain function may run past its job's timeout before
``varmq.run`` ends the process (exit status 4), and the measure it reads
(``worker._oldest_overrun``). Real processes: tests/acceptance/test_hard_timeout_processes.py."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import varmq
from varmq.contract import envelope
from varmq.ops import hard_limit, service
from varmq.testing import MemoryStorage

WAIT = 10.0


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of the test: the functions left running past their timeout return."""
    event = threading.Event()
    yield event
    event.set()


def _until(predicate: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def main_thread() -> Iterator[None]:
    """varmq.run installs signal handlers: the main thread only. A SIGTERM the test sends
    that arrives after run restored the handlers finds a harmless one, not the default."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("varmq.run installs signal handlers: the main thread only")
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    yield
    signal.signal(signal.SIGTERM, previous)


# -- the option --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, -1, math.nan, math.inf])
def test_hard_timeout_must_be_a_positive_finite_number_of_seconds(value: float) -> None:
    with pytest.raises(ValueError, match="hard_timeout"):
        varmq.new_worker(lambda job: None, auto_run=False, hard_timeout=value)


@pytest.mark.parametrize("value", ["1", True, [1]])
def test_hard_timeout_of_another_type_is_a_type_error_naming_it(value: Any) -> None:
    with pytest.raises(TypeError, match="hard_timeout"):
        varmq.new_worker(lambda job: None, auto_run=False, hard_timeout=value)


def test_hard_timeout_takes_seconds_or_none() -> None:
    assert varmq.new_worker(lambda job: None, auto_run=False)._hard_timeout is None
    worker = varmq.new_worker(lambda job: None, auto_run=False, hard_timeout=2)
    assert worker._hard_timeout == 2.0 and isinstance(worker._hard_timeout, float)


def test_apply_hard_timeout_sets_it_on_the_workers_that_have_none() -> None:
    own = varmq.new_worker(lambda job: None, auto_run=False, hard_timeout=1.0)
    bare = varmq.new_worker(lambda job: None, auto_run=False)
    service.apply_hard_timeout([own, bare], 5)
    assert (own._hard_timeout, bare._hard_timeout) == (1.0, 5.0)
    other = varmq.new_worker(lambda job: None, auto_run=False)
    service.apply_hard_timeout([other], None)
    assert other._hard_timeout is None
    with pytest.raises(ValueError, match="--hard-timeout must be > 0 seconds"):
        service.apply_hard_timeout([other], 0, option="--hard-timeout")
    assert other._hard_timeout is None


# -- the measure ---------------------------------------------------------------------------


def test_a_function_past_its_timeout_is_measured_from_the_timeout_until_it_returns(
    release: threading.Event,
) -> None:
    started = threading.Event()

    def stuck(job: varmq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    worker = varmq.new_worker(stuck, 1, timeout=0.05, job_id_generator=lambda: "j1")
    try:
        assert worker._oldest_overrun() is None and worker._longest_overrun() == 0.0
        worker.bind_queue(name="q").add(None)
        assert started.wait(WAIT)
        _until(lambda: worker.num_running_past_timeout == 1, "the timeout")
        first = worker._longest_overrun()
        time.sleep(0.05)
        oldest = worker._oldest_overrun()
        assert oldest is not None
        job_id, queue, timeout, seconds = oldest
        assert (job_id, queue, timeout) == ("j1", "q", 0.05)
        assert seconds > first >= 0.0
        release.set()
        _until(lambda: worker.num_running_past_timeout == 0, "the function to return")
        assert worker._oldest_overrun() is None and worker._longest_overrun() == 0.0
    finally:
        release.set()
        worker.stop_and_wait(WAIT)


def test_a_function_cancelled_by_id_is_measured_from_the_cancel(
    release: threading.Event,
) -> None:
    started = threading.Event()

    def stuck(job: varmq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    worker = varmq.new_worker(stuck, 1)
    try:
        queue = worker.bind_queue(name="q", keep_results=60)
        queue.add(None, job_id="c1")
        assert started.wait(WAIT)
        assert worker._oldest_overrun() is None  # running, not past anything
        assert queue.cancel("c1")
        _until(lambda: worker._oldest_overrun() is not None, "the cancel")
        oldest = worker._oldest_overrun()
        assert oldest is not None and oldest[:3] == ("c1", "q", None)
        release.set()
        _until(lambda: worker._oldest_overrun() is None, "the function to return")
    finally:
        release.set()
        worker.stop_and_wait(WAIT)


def test_a_function_that_returns_within_its_timeout_is_never_measured() -> None:
    worker = varmq.new_worker(lambda job: time.sleep(0.01), 4, timeout=5)
    try:
        queue = worker.bind_queue()
        for _ in range(50):
            queue.add(None)
        assert worker.wait(WAIT)
        assert worker._oldest_overrun() is None
        assert worker._timer._overruns == {}
    finally:
        worker.stop_and_wait(WAIT)


# -- varmq.run --------------------------------------------------------------------------------


def _holding(release: threading.Event) -> Any:
    """A job function that runs until ``release`` is set."""

    def hold(job: varmq.Job[Any]) -> None:
        release.wait(WAIT)

    return hold


def test_without_hard_timeout_an_overrun_ends_nothing(release: threading.Event) -> None:
    worker = varmq.new_worker(_holding(release), 1, timeout=0.05)
    try:
        worker.bind_queue().add(None)
        _until(lambda: worker._longest_overrun() > 0.3, "a long overrun")
        limit = hard_limit.HardLimit([worker])
        assert limit.period is None
        assert not limit.tripped() and limit.overrun is None
    finally:
        release.set()
        worker.stop_and_wait(WAIT)


@pytest.mark.usefixtures("main_thread")
def test_without_hard_timeout_run_waits_for_the_signal(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """An overrunning function under varmq.run with no hard_timeout: the service runs on until
    its SIGTERM (sent 1 s after the start, well past the overrun), then exits 1 as before."""
    worker = varmq.new_worker(_holding(release), 1, timeout=0.05, auto_run=False)
    worker.bind_queue().add(None)
    sender = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    began = time.monotonic()
    with caplog.at_level(logging.INFO, logger="varmq.service"):
        status = varmq.run(worker, grace=0.1, on_startup=sender.start)
    sender.cancel()
    assert status == service.ABANDONED
    assert time.monotonic() - began >= 0.9
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "after SIGTERM" in caplog.text


def _storage_worker(
    release: threading.Event, *, retry: varmq.Retry | None = None, hard: float = 0.3
) -> tuple[varmq.Worker[Any], Any, threading.Event]:
    """A worker on a reference storage queue (lease 60 s): job ``stuck`` ignores its 0.1 s
    timeout, job ``slow`` is well-behaved but runs a while; hard_timeout ``hard``."""
    storage = MemoryStorage()
    queue = storage.new_distributed_queue("jobs", visibility_timeout=60)
    slow_started = threading.Event()

    def work(job: varmq.Job[Any]) -> None:
        if job.id == "slow":
            slow_started.set()
        release.wait(WAIT if job.id == "stuck" else 3.0)

    worker = varmq.new_worker(work, 2, auto_run=False, hard_timeout=hard, retry=retry)
    handle = worker.with_distributed_queue(queue)
    assert handle.add("s", job_id="slow")
    assert handle.add("x", job_id="stuck", timeout=0.1)
    return worker, queue, slow_started


def _taken(queue: Any) -> dict[str, int]:
    """Take what waits in ``queue``: job id -> attempt."""
    return {
        envelope.decode(item)[0]: attempt
        for item, _, attempt in queue.dequeue_batch_with_attempts(10)
    }


@pytest.mark.usefixtures("main_thread")
def test_run_ends_with_status_4_and_hands_the_other_running_job_back(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    worker, queue, slow_started = _storage_worker(release, retry=varmq.Retry(max_attempts=1))
    began = time.monotonic()
    with caplog.at_level(logging.INFO, logger="varmq.service"):
        status = varmq.run(worker, grace=30)
    took = time.monotonic() - began
    assert status == service.HARD_TIMEOUT == 4
    assert slow_started.is_set()
    assert took < 3.0  # not the grace, nor the slow job's 3 s
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "ending this process: a job function ran" in error
    assert "past its timeout, beyond hard_timeout=0.3" in error
    assert "job 'stuck' of queue 'jobs', timeout 0.1 s" in error
    assert "1 running job handed back to storage" in caplog.text
    # The stuck job failed as timed out at its timeout: its last attempt, so a dead letter.
    [dead] = queue.dead_letters()
    assert "JobTimeoutError" in dead["error"]
    # The slow one was handed back at once (not left to its 60 s lease), its run counted.
    assert _taken(queue) == {"slow": 2}


@pytest.mark.usefixtures("main_thread")
def test_run_async_ends_with_status_4_too(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    worker, queue, _ = _storage_worker(release, retry=varmq.Retry(max_attempts=3, backoff=60))
    with caplog.at_level(logging.INFO, logger="varmq.service"):
        status = asyncio.run(varmq.run_async(worker, grace=30))
    assert status == service.HARD_TIMEOUT
    assert "beyond hard_timeout=0.3" in caplog.text
    # The stuck job's timeout was retried by its policy (delayed 60 s); the slow one is back.
    assert queue.stats()["delayed"] == 1
    assert _taken(queue) == {"slow": 2}


@pytest.mark.usefixtures("main_thread")
def test_a_hard_timeout_during_the_grace_of_a_signal_ends_it_early(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM first (once the jobs run, 1 s before the limit): the stuck function would get
    the 30 s grace; its hard_timeout ends the wait instead."""
    worker, queue, slow_started = _storage_worker(release, hard=1.0)

    def signal_once_running() -> None:
        slow_started.wait(WAIT)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=signal_once_running, daemon=True)
    began = time.monotonic()
    with caplog.at_level(logging.INFO, logger="varmq.service"):
        status = varmq.run(worker, grace=30, on_startup=sender.start)
    assert status == service.HARD_TIMEOUT
    assert time.monotonic() - began < 4.0
    lines = [r.getMessage() for r in caplog.records]
    signalled = lines.index("varmq: SIGTERM: stopping 1 worker")
    [ended] = [n for n, line in enumerate(lines) if "ending this process" in line]
    assert signalled < ended, lines  # the limit came during the grace
    assert "beyond hard_timeout=1 " in lines[ended]
    assert "after SIGTERM" not in caplog.text and "after hard_timeout" in caplog.text
    # No retry policy: the stuck job failed for good (acknowledged); the slow one is back.
    assert _taken(queue) == {"slow": 2}
