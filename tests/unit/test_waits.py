"""The wait family: wait, wait_until_idle/paused/stopped and the combined pause/stop waits."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import varmq
from varmq import Status

WAIT = 10.0
SHORT = 0.1  # a wait that is expected to time out


def in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` in a thread; its return value lands in the list."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)))
    thread.start()
    return thread, out


def test_wait_returns_at_once_on_an_initiated_worker() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    worker.bind_queue().add(1)
    assert worker.wait(timeout=0) is True


def test_wait_returns_at_once_on_an_idle_worker_without_work() -> None:
    worker = varmq.new_worker(lambda job: None)
    worker.bind_queue()
    assert worker.wait(timeout=0) is True


def test_wait_blocks_until_queued_and_running_jobs_finish(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 2)
    queue = worker.bind_queue()
    for i in range(5):
        queue.add(i)
    assert g.wait_started(2)
    assert worker.wait(timeout=SHORT) is False
    g.open()
    assert worker.wait(timeout=WAIT) is True
    assert sorted(g.ended) == [0, 1, 2, 3, 4]
    assert len(queue) == 0
    assert worker.num_processing == 0


def test_wait_returns_when_paused_with_nothing_in_flight_even_with_jobs_queued() -> None:
    worker = varmq.new_worker(lambda job: None)
    queue = worker.bind_queue()
    worker.pause()
    queue.add(1)
    assert worker.wait(timeout=WAIT) is True
    assert len(queue) == 1


def test_wait_returns_on_a_stopped_worker_with_jobs_queued() -> None:
    worker = varmq.new_worker(lambda job: None)
    queue = worker.bind_queue()
    assert worker.stop_and_wait(WAIT)
    queue.add(1)
    assert worker.wait(timeout=WAIT) is True


def test_wait_on_a_pausing_worker_returns_once_its_job_ended_and_it_is_paused(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    queue = worker.bind_queue()
    queue.add(1)
    queue.add(2)
    assert g.wait_started(1)
    worker.pause()
    assert worker.wait(timeout=SHORT) is False
    g.open()
    assert worker.wait(timeout=WAIT) is True
    assert worker.status is Status.PAUSED
    assert g.ended == [1]
    assert len(queue) == 1


def test_wait_until_idle_returns_at_once_when_idle() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.wait_until_idle(timeout=0) is True


def test_wait_until_idle_returns_after_running_becomes_idle(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert worker.wait_until_idle(timeout=SHORT) is False
    g.open()
    assert worker.wait_until_idle(timeout=WAIT) is True
    assert worker.status is Status.IDLE


def test_wait_until_idle_blocks_while_paused_until_resume() -> None:
    worker = varmq.new_worker(lambda job: None)
    worker.pause()
    assert worker.wait(timeout=WAIT) is True
    assert worker.wait_until_idle(timeout=SHORT) is False
    thread, out = in_thread(worker.wait_until_idle, WAIT)
    worker.resume()
    thread.join()
    assert out == [True]


def test_wait_until_idle_blocks_while_stopped_until_restart() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.stop_and_wait(WAIT)
    assert worker.wait_until_idle(timeout=SHORT) is False
    thread, out = in_thread(worker.wait_until_idle, WAIT)
    worker.restart()
    thread.join()
    assert out == [True]


def test_wait_until_idle_requires_the_queues_to_be_empty() -> None:
    worker = varmq.new_worker(lambda job: None)
    queue = worker.bind_queue()
    worker.pause()
    queue.add(1)
    worker.resume()
    assert worker.wait_until_idle(timeout=WAIT) is True
    assert len(queue) == 0


def test_wait_until_paused_returns_at_once_when_paused() -> None:
    worker = varmq.new_worker(lambda job: None)
    worker.pause()
    assert worker.wait_until_paused(timeout=0) is True


def test_wait_until_paused_waits_for_pausing_to_become_paused(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    worker.pause()
    assert worker.wait_until_paused(timeout=SHORT) is False
    g.open()
    assert worker.wait_until_paused(timeout=WAIT) is True


def test_wait_until_paused_blocks_until_a_pause_happens() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.wait_until_paused(timeout=SHORT) is False
    thread, out = in_thread(worker.wait_until_paused, WAIT)
    worker.pause()
    thread.join()
    assert out == [True]


def test_wait_until_stopped_returns_at_once_when_stopped() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.stop_and_wait(WAIT)
    assert worker.wait_until_stopped(timeout=0) is True


def test_wait_until_stopped_waits_for_stopping_to_become_stopped(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    worker.stop()
    assert worker.wait_until_stopped(timeout=SHORT) is False
    g.open()
    assert worker.wait_until_stopped(timeout=WAIT) is True


def test_wait_until_stopped_blocks_until_a_stop_happens() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.wait_until_stopped(timeout=SHORT) is False
    thread, out = in_thread(worker.wait_until_stopped, WAIT)
    worker.stop()
    thread.join()
    assert out == [True]


def test_pause_and_wait_returns_after_the_job_in_flight_finished(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    thread, out = in_thread(worker.pause_and_wait, WAIT)
    thread.join(SHORT)
    assert thread.is_alive(), "pause_and_wait returned while a job was running"
    g.open()
    thread.join()
    assert out == [True]
    assert worker.status is Status.PAUSED
    assert g.ended == [1]


def test_pause_and_wait_without_jobs_is_paused_at_once() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.pause_and_wait(timeout=WAIT) is True
    assert worker.status is Status.PAUSED


def test_pause_and_wait_times_out_with_false_while_a_job_runs(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert worker.pause_and_wait(timeout=SHORT) is False
    assert worker.status is Status.PAUSING


def test_pause_and_wait_on_an_initiated_worker_raises_not_running() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    with pytest.raises(varmq.NotRunningWorkerError):
        worker.pause_and_wait()


def test_wait_and_pause_drains_the_queue_then_pauses(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    queue = worker.bind_queue()
    for i in range(20):
        queue.add(i)
    worker.start()
    assert worker.wait_and_pause(timeout=WAIT) is True
    assert worker.status in (Status.PAUSED, Status.PAUSING)
    assert worker.wait_until_paused(WAIT)
    assert recorder.ran == list(range(20))
    assert len(queue) == 0


def test_wait_and_pause_without_work_pauses_at_once() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.wait_and_pause(timeout=WAIT) is True
    assert worker.status is Status.PAUSED


def test_wait_and_pause_times_out_with_false_and_does_not_pause(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert worker.wait_and_pause(timeout=SHORT) is False
    assert worker.status is Status.RUNNING


def test_stop_and_wait_returns_after_the_job_in_flight_finished(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    thread, out = in_thread(worker.stop_and_wait, WAIT)
    thread.join(SHORT)
    assert thread.is_alive(), "stop_and_wait returned while a job was running"
    g.open()
    thread.join()
    assert out == [True]
    assert worker.status is Status.STOPPED
    assert g.ended == [1]


def test_stop_and_wait_without_jobs_is_stopped() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.stop_and_wait(timeout=WAIT) is True
    assert worker.status is Status.STOPPED


def test_stop_and_wait_on_an_initiated_worker_raises_not_running() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    with pytest.raises(varmq.NotRunningWorkerError):
        worker.stop_and_wait()


def test_wait_and_stop_returns_after_the_work_and_the_worker_reaches_stopped(
    recorder: Any,
) -> None:
    worker = varmq.new_worker(recorder.fn, 3)
    queue = worker.bind_queue()
    for i in range(30):
        queue.add(i)
    assert worker.wait_and_stop(timeout=WAIT) is True
    assert worker.wait_until_stopped(WAIT)
    assert sorted(recorder.ran) == list(range(30))


def test_wait_and_stop_without_work_stops() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.wait_and_stop(timeout=WAIT) is True
    assert worker.wait_until_stopped(WAIT)


def test_wait_and_stop_times_out_with_false_and_does_not_stop(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert worker.wait_and_stop(timeout=SHORT) is False
    assert worker.is_active


def test_paused_worker_wait_returns_but_wait_until_idle_blocks_until_resume() -> None:
    worker = varmq.new_worker(lambda job: None)
    worker.pause()
    assert worker.wait(timeout=WAIT) is True
    assert worker.wait_until_idle(timeout=SHORT) is False
    worker.resume()
    assert worker.wait_until_idle(timeout=WAIT) is True


def test_every_job_handle_is_closed_when_worker_wait_returns() -> None:
    # worker.wait() is the barrier after which every job is done: its handle is closed and
    # its outcome counted.
    for _ in range(20):
        worker = varmq.new_result_worker(lambda job: job.data * 2, 4)
        queue = worker.bind_queue()
        jobs = [queue.add(i) for i in range(50)]
        assert worker.wait(WAIT)
        open_jobs = [job.data for job in jobs if not job.is_closed()]
        assert open_jobs == []
        assert worker.metrics.completed == 50
        assert worker.stop_and_wait(WAIT)


def test_every_job_handle_is_closed_when_stop_and_wait_returns(gate: Any) -> None:
    for _ in range(20):
        g = gate()
        worker = varmq.new_worker(g.fn, 4)
        queue = worker.bind_queue()
        jobs = [queue.add(i) for i in range(4)]
        assert g.wait_started(4)
        worker.stop()
        g.open()
        assert worker.wait_until_stopped(WAIT)
        assert [job.data for job in jobs if not job.is_closed()] == []
