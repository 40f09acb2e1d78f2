"""Recurring jobs: ``worker.schedule(name, every= | cron=, data=, queue=)``.

Several workers on one reference storage stand for several consumer processes (the same test
across real processes runs on the adapters); the missed-occurrence policy is checked on the
schedule's own clock arithmetic, with times given.
"""

from __future__ import annotations

import datetime
import itertools
import threading
import time
from collections import Counter
from typing import Any

import pytest

import varmq
from varmq.api.schedules import Schedule, occurrence_id
from varmq.testing import MemoryStorage

WAIT = 10.0
UTC = datetime.timezone.utc


def _schedule(every: float | None = None, cron: str | None = None) -> Schedule:
    return Schedule(
        "s",
        every=every,
        cron=cron,
        data=None,
        queue=None,
        add=lambda job_id, when: None,
        report=lambda exc: None,
        on_cancel=lambda s: None,
    )


def _at(text: str) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class _Counter:
    """A job function counting the runs of every job id; ``wait_for(n)`` distinct ids."""

    def __init__(self) -> None:
        self._cond = threading.Condition()  # guards runs
        self.runs: Counter[str] = Counter()

    def fn(self, job: varmq.Job[Any]) -> None:
        with self._cond:
            self.runs[job.id] += 1
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = WAIT) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.runs) >= n, timeout)


def test_three_workers_on_one_storage_run_each_occurrence_once(storage: MemoryStorage) -> None:
    counter = _Counter()
    workers = []
    for i in range(3):
        worker = varmq.new_worker(counter.fn, 2)
        handle = worker.with_distributed_queue(
            storage.new_distributed_queue("ticks", keep_results=60)
        )
        worker.schedule("tick", every=0.2, data={"consumer": i}, queue=handle)
        workers.append(worker)
    assert counter.wait_for(10), counter.runs
    for worker in workers:
        worker.stop_and_wait(WAIT)
    assert set(counter.runs.values()) == {1}, counter.runs
    times = sorted(
        datetime.datetime.fromisoformat(job_id.removeprefix("tick:").rstrip("Z"))
        for job_id in counter.runs
    )
    gaps = {round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(times)}
    assert gaps == {0.2}, f"an occurrence was skipped or doubled: {sorted(counter.runs)}"


def test_the_occurrences_of_every_are_multiples_of_it_since_the_epoch() -> None:
    hourly = _schedule(every=3600)
    assert hourly.due(_at("2025-06-01T10:59:59")) == _at("2025-06-01T10:00:00")
    assert hourly.next_after(_at("2025-06-01T10:59:59")) == _at("2025-06-01T11:00:00")
    assert hourly.next_after(_at("2025-06-01T11:00:00")) == _at("2025-06-01T12:00:00")
    assert occurrence_id("report", _at("2025-06-01T10:05:00")) == "report:2025-06-01T10:05:00Z"
    assert occurrence_id("tick", _at("2025-06-01T10:05:00") + 0.25, True) == (
        "tick:2025-06-01T10:05:00.250Z"
    )


def test_missed_occurrences_fire_only_the_latest_once() -> None:
    every_minute = _schedule(every=60)
    start = _at("2025-06-01T10:00:30")
    assert every_minute.due(start) == _at("2025-06-01T10:00:00")  # the latest, at once
    assert every_minute.due(start + 10) is None  # fired already
    assert every_minute.due(_at("2025-06-01T10:01:00")) == _at("2025-06-01T10:01:00")
    # Down for an hour: one run for the latest occurrence, not sixty.
    later = _at("2025-06-01T11:01:40")
    assert every_minute.due(later) == _at("2025-06-01T11:01:00")
    assert every_minute.due(later + 1) is None
    assert every_minute.last_fired == _at("2025-06-01T11:01:00")


def test_cron_occurrences_are_the_matches_of_the_expression_in_utc() -> None:
    pytest.importorskip("cronsim")
    five = _schedule(cron="*/5 * * * *")
    assert five.due(_at("2025-06-01T10:07:30")) == _at("2025-06-01T10:05:00")
    assert five.next_after(_at("2025-06-01T10:07:30")) == _at("2025-06-01T10:10:00")
    assert five.due(_at("2025-06-01T10:10:00")) == _at("2025-06-01T10:10:00")
    assert five.period(_at("2025-06-01T10:07:30")) == 300
    with pytest.raises(ValueError, match="not a cron expression"):
        _schedule(cron="61 * * * *")


def test_six_cron_fields_are_seconds_first_and_seconds_written_last_are_refused() -> None:
    pytest.importorskip("cronsim")
    two = _schedule(cron="*/2 * * * * *")
    assert two.next_after(_at("2025-06-01T10:07:30")) == _at("2025-06-01T10:07:32")
    with pytest.raises(ValueError, match=r"seconds first.*cron='\*/2 \* \* \* \* \*'"):
        _schedule(cron="* * * * * */2")  # read as every second: refused, the fix named


def test_a_schedule_fires_on_an_in_memory_queue_and_stops_when_cancelled() -> None:
    counter = _Counter()
    worker = varmq.new_worker(counter.fn, 1)
    worker.bind_queue()
    schedule = worker.schedule("tick", every=0.1)  # the worker's one queue
    assert counter.wait_for(2)
    schedule.cancel()
    fired = schedule.last_fired
    time.sleep(0.3)  # occurrences pass: none fires
    assert schedule.last_fired == fired
    assert worker.wait(WAIT)
    assert set(counter.runs.values()) == {1}


def test_a_paused_worker_fires_nothing_and_fires_the_latest_once_when_resumed() -> None:
    counter = _Counter()
    worker = varmq.new_worker(counter.fn, 1)
    queue = worker.bind_queue()
    schedule = worker.schedule("tick", every=0.1, queue=queue)
    assert counter.wait_for(1)
    assert worker.pause_and_wait(WAIT)
    fired = schedule.last_fired
    time.sleep(0.5)  # five occurrences pass while paused
    assert schedule.last_fired == fired
    before = set(counter.runs)
    resumed_at = time.time()
    worker.resume()
    assert counter.wait_for(len(before) + 1)
    seen_at = time.time()
    first_after = min(_id_time(job_id) for job_id in counter.runs if job_id not in before)
    # The latest occurrence at the resume, not the first one missed (a loaded machine may let a
    # later one come due before the schedule looks, never an earlier one).
    assert resumed_at - 0.1 - 0.005 <= first_after <= seen_at


def _id_time(job_id: str) -> float:
    stamp = job_id.split(":", 1)[1].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def test_a_schedule_declared_before_start_fires_once_the_worker_runs() -> None:
    counter = _Counter()
    worker = varmq.new_worker(counter.fn, 1, auto_run=False)
    worker.bind_queue()
    worker.schedule("tick", every=0.1, data="x")
    time.sleep(0.2)  # not started: nothing fires
    assert not counter.runs
    worker.start()
    assert counter.wait_for(1)


def test_schedule_refuses_what_could_not_fire_once(storage: MemoryStorage) -> None:
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    with pytest.raises(ValueError, match="0 bound queues"):
        worker.schedule("s", every=1)
    plain = worker.with_persistent_queue(storage.new_queue("plain"))
    kept = worker.with_persistent_queue(storage.new_queue("kept", keep_results=3600))
    with pytest.raises(ValueError, match="2 bound queues"):
        worker.schedule("s", every=1)
    with pytest.raises(TypeError, match="every=SECONDS or cron"):
        worker.schedule("s", queue=kept)
    with pytest.raises(TypeError, match="every=SECONDS or cron"):
        worker.schedule("s", every=1, cron="* * * * *", queue=kept)
    with pytest.raises(ValueError, match="every"):
        worker.schedule("s", every=0, queue=kept)
    with pytest.raises(ValueError, match="keeps no job records"):
        worker.schedule("s", every=1, queue=plain)
    with pytest.raises(TypeError, match="JSON"):
        worker.schedule("s", every=1, data={1, 2}, queue=kept)
    with pytest.raises(TypeError, match="queue handle"):
        worker.schedule("s", every=1, queue=storage.new_queue("raw"))
    worker.schedule("s", every=1, queue=kept)
    with pytest.raises(ValueError, match="already has a schedule 's'"):
        worker.schedule("s", every=2, queue=kept)


def test_a_schedule_warns_when_records_are_kept_shorter_than_its_period(
    storage: MemoryStorage, caplog: pytest.LogCaptureFixture
) -> None:
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    handle = worker.with_persistent_queue(storage.new_queue("q", keep_results=10))
    with caplog.at_level("WARNING", logger="varmq"):
        worker.schedule("hourly", every=3600, queue=handle)
    assert "keep_results >= 3600" in caplog.text


def test_a_failing_add_is_reported_and_the_schedule_goes_on(storage: MemoryStorage) -> None:
    q = storage.new_distributed_queue("q", keep_results=60)
    reported: list[BaseException] = []
    worker = varmq.new_worker(lambda job: None, 1, error_handler=lambda w, e: reported.append(e))
    handle = worker.with_distributed_queue(q)
    q.faults.refuse_enqueue = True
    schedule = worker.schedule("tick", every=0.1, queue=handle)
    deadline = time.monotonic() + WAIT
    while not reported and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reported and isinstance(reported[0], varmq.EnqueueError)
    q.faults.refuse_enqueue = False
    fired = schedule.last_fired
    deadline = time.monotonic() + WAIT
    while schedule.last_fired == fired and time.monotonic() < deadline:
        time.sleep(0.01)
    assert schedule.last_fired != fired
