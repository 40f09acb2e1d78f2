"""What operators read off a worker: counters, job durations, the oldest running job, and
queues whose storage cannot answer (never shown as empty)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import varmq
from varmq.testing import MemoryStorage

WAIT = 5.0


def test_durations_are_not_measured_until_asked_for() -> None:
    worker = varmq.new_worker(lambda job: None)
    job = worker.bind_queue().add(1)
    assert job is not None and job.wait(WAIT)
    assert worker.metrics.duration_histogram() is None
    assert "oldest_running_age" not in worker.queue_stats()[0]


def test_observed_durations_fill_the_histogram_buckets() -> None:
    def run(job: varmq.Job[float]) -> None:
        time.sleep(job.data)  # the duration being measured

    worker = varmq.new_worker(run, 2)
    worker.metrics.observe_durations([0.05, 0.5])
    queue = worker.bind_queue()
    for seconds in (0.0, 0.0, 0.1, 0.6):
        queue.add(seconds)
    assert worker.wait(WAIT)
    histogram = worker.metrics.duration_histogram()
    assert histogram is not None
    assert histogram.bounds == (0.05, 0.5)
    assert histogram.counts == (2, 1, 1)
    assert histogram.count == 4
    assert 0.7 <= histogram.sum < 0.7 + 0.5
    worker.metrics.reset()
    emptied = worker.metrics.duration_histogram()
    assert emptied is not None and emptied.count == 0 and emptied.bounds == (0.05, 0.5)


def test_buckets_must_increase() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    with pytest.raises(ValueError, match="must increase"):
        worker.metrics.observe_durations([1.0, 0.5])


def test_the_age_of_the_oldest_running_job_is_reported_per_queue() -> None:
    release = threading.Event()
    started = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    worker = varmq.new_worker(run)
    worker.metrics.observe_durations()
    worker.bind_queue(name="stuck").add(1)
    assert started.wait(WAIT)
    time.sleep(0.2)  # let the job grow old on purpose
    [row] = worker.queue_stats()
    assert row["oldest_running_age"] >= 0.2
    release.set()
    assert worker.wait(WAIT)
    assert worker.queue_stats()[0]["oldest_running_age"] == 0.0


class _Unreachable:
    """A reference queue whose storage stops answering."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        if self.down:
            raise ConnectionError("connection refused")
        return len(self._inner)

    def enqueue(self, item: Any) -> bool:
        return bool(self._inner.enqueue(item))

    def stats(self) -> Any:
        if self.down:
            raise ConnectionError("connection refused")
        return self._inner.stats()


def test_a_storage_that_cannot_answer_is_reported_unreachable_not_empty() -> None:
    q = _Unreachable(MemoryStorage().new_queue("orders"))
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    worker.with_persistent_queue(q)
    [row] = worker.queue_stats()
    assert row["reachable"] is True and row["waiting"] == 0 and row["error"] is None
    q.down = True
    [row] = worker.queue_stats()
    assert row["reachable"] is False
    assert row["error"] == "ConnectionError: connection refused"
    assert row["waiting"] is None and row["in_flight"] is None and row["oldest_age"] is None
    worker.start()
    assert worker.wait(timeout=0.3) is False  # an unreachable queue is not a drained one
    q.down = False
    assert worker.wait(WAIT)
