"""Worker lifecycle: states, the table of control calls per state, restart, context manager."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

import varmq
from varmq import Status

WAIT = 10.0

STATES = ["Initiated", "Idle", "Running", "Pausing", "Paused", "Stopping", "Stopped"]


def reach(state: str, gate: Any) -> tuple[Any, Any]:
    """A worker (concurrency 2) in ``state``; returns it and the gate its running job waits on."""
    g = gate()
    worker = varmq.new_worker(g.fn, 2, auto_run=False)
    queue = worker.bind_queue()
    if state == "Initiated":
        return worker, g
    worker.start()
    if state in ("Running", "Pausing", "Stopping"):
        queue.add("held")
        assert g.wait_started(1)
        if state == "Pausing":
            worker.pause()
        elif state == "Stopping":
            worker.stop()
    elif state == "Paused":
        worker.pause()
    elif state == "Stopped":
        assert worker.stop_and_wait(WAIT)
    assert worker.status == state
    return worker, g


# The lifecycle table of upstream (1.10): what each call does in each state. A class is the
# exception raised; a tuple of statuses is where the worker is right after the call returned.
ACTIVE = (Status.IDLE, Status.RUNNING)
TABLE: dict[tuple[str, str], Any] = {
    ("Initiated", "start"): (Status.IDLE,),
    ("Initiated", "pause"): varmq.NotRunningWorkerError,
    ("Initiated", "resume"): varmq.NotRunningWorkerError,
    ("Initiated", "stop"): varmq.NotRunningWorkerError,
    ("Initiated", "restart"): varmq.NotRunningWorkerError,
    ("Initiated", "tune_pool"): varmq.NotRunningWorkerError,
    ("Idle", "start"): varmq.RunningWorkerError,
    ("Idle", "pause"): (Status.PAUSED,),
    ("Idle", "resume"): (Status.IDLE,),
    ("Idle", "stop"): (Status.STOPPING, Status.STOPPED),
    ("Idle", "restart"): ACTIVE,
    ("Idle", "tune_pool"): (Status.IDLE,),
    ("Running", "start"): varmq.RunningWorkerError,
    ("Running", "pause"): (Status.PAUSING,),
    ("Running", "resume"): (Status.RUNNING,),
    ("Running", "stop"): (Status.STOPPING,),
    ("Running", "restart"): "blocks",
    ("Running", "tune_pool"): (Status.RUNNING,),
    ("Pausing", "start"): varmq.WorkerPausingError,
    ("Pausing", "pause"): (Status.PAUSING,),
    ("Pausing", "resume"): varmq.WorkerPausingError,
    ("Pausing", "stop"): (Status.STOPPING,),
    ("Pausing", "restart"): "blocks",
    ("Pausing", "tune_pool"): varmq.WorkerPausingError,
    ("Paused", "start"): varmq.WorkerPausedError,
    ("Paused", "pause"): (Status.PAUSED,),
    ("Paused", "resume"): (Status.IDLE,),
    ("Paused", "stop"): (Status.STOPPING, Status.STOPPED),
    ("Paused", "restart"): ACTIVE,
    ("Paused", "tune_pool"): varmq.WorkerPausedError,
    ("Stopping", "start"): varmq.WorkerStoppingError,
    ("Stopping", "pause"): varmq.WorkerStoppingError,
    ("Stopping", "resume"): varmq.WorkerStoppingError,
    ("Stopping", "stop"): (Status.STOPPING,),
    ("Stopping", "restart"): "blocks",
    ("Stopping", "tune_pool"): varmq.WorkerStoppingError,
    ("Stopped", "start"): (Status.IDLE,),
    ("Stopped", "pause"): varmq.WorkerStoppedError,
    ("Stopped", "resume"): varmq.WorkerStoppedError,
    ("Stopped", "stop"): (Status.STOPPED,),
    ("Stopped", "restart"): ACTIVE,
    ("Stopped", "tune_pool"): varmq.WorkerStoppedError,
}


def call(worker: Any, name: str) -> Any:
    if name == "tune_pool":
        return worker.tune_pool(5)
    return getattr(worker, name)()


@pytest.mark.parametrize(("state", "name"), list(TABLE), ids=[f"{s}-{c}" for s, c in TABLE])
def test_control_call_in_each_state_follows_the_lifecycle_table(
    state: str, name: str, gate: Any
) -> None:
    worker, g = reach(state, gate)
    expected = TABLE[(state, name)]
    if isinstance(expected, type):
        with pytest.raises(expected):
            call(worker, name)
        assert worker.status == state, "a refused call must not change the state"
    elif expected == "blocks":
        # restart waits for the job in flight, then starts the worker again.
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def restart() -> None:
            try:
                worker.restart()
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)
            done.set()

        thread = threading.Thread(target=restart)
        thread.start()
        assert not done.wait(0.1), "restart returned while a job was still running"
        g.open()
        assert done.wait(WAIT)
        thread.join()
        assert outcome == [None]
        assert worker.status in ACTIVE
        assert g.ended == ["held"]
    else:
        assert call(worker, name) is None
        assert worker.status in expected


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_new_worker_with_auto_run_off_is_initiated_with_concurrency_one(kind: str) -> None:
    worker = getattr(varmq, kind)(lambda job: None, auto_run=False)
    assert worker.status is Status.INITIATED
    assert not worker.is_active
    assert not worker.is_paused
    assert not worker.is_stopped
    assert not worker.is_running
    assert not worker.is_idle
    assert worker.num_concurrency == 1
    assert worker.num_processing == 0


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_auto_run_starts_the_worker_idle(kind: str) -> None:
    worker = getattr(varmq, kind)(lambda job: None)
    assert worker.status is Status.IDLE
    assert worker.is_idle
    assert worker.is_active


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_concurrency_of_zero_means_the_cpu_count(kind: str) -> None:
    worker = getattr(varmq, kind)(lambda job: None, 0, auto_run=False)
    assert worker.num_concurrency == (os.cpu_count() or 1)


@pytest.mark.parametrize("concurrency", [-1, -5])
@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_negative_concurrency_is_refused_naming_the_option(kind: str, concurrency: int) -> None:
    with pytest.raises(ValueError, match=rf"concurrency must be >= 0, got {concurrency}"):
        getattr(varmq, kind)(lambda job: None, concurrency, auto_run=False)


def test_status_is_a_str_enum_with_the_upstream_values() -> None:
    assert [s.value for s in Status] == [
        "Initiated",
        "Idle",
        "Running",
        "Pausing",
        "Paused",
        "Stopping",
        "Stopped",
        "Unknown",
    ]
    assert Status.IDLE == "Idle"
    assert isinstance(Status.RUNNING, str)


def test_worker_is_running_while_a_job_is_in_flight_and_idle_after(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    job = worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert worker.status is Status.RUNNING
    assert worker.is_running and worker.is_active and not worker.is_idle
    g.open()
    assert job.wait(WAIT)
    assert worker.wait_until_idle(WAIT)
    assert worker.status is Status.IDLE


def test_full_walk_through_the_states(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, auto_run=False)
    queue = worker.bind_queue()
    assert worker.status is Status.INITIATED
    worker.start()
    assert worker.status is Status.IDLE
    with pytest.raises(varmq.RunningWorkerError):
        worker.start()
    worker.pause()
    assert worker.status is Status.PAUSED
    assert worker.is_paused and not worker.is_active
    worker.resume()
    assert worker.status is Status.IDLE
    assert worker.resume() is None
    queue.add("held")
    assert g.wait_started(1)
    worker.stop()
    assert worker.status is Status.STOPPING
    assert not worker.is_stopped and not worker.is_active
    g.open()
    assert worker.wait_until_stopped(WAIT)
    assert worker.status is Status.STOPPED
    assert worker.is_stopped and not worker.is_active and not worker.is_paused


def test_pause_with_nothing_in_flight_goes_straight_to_paused() -> None:
    worker = varmq.new_worker(lambda job: None)
    worker.pause()
    assert worker.status is Status.PAUSED


def test_pause_with_a_job_in_flight_is_pausing_until_the_job_ends(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    worker.bind_queue().add(1)
    assert g.wait_started(1)
    worker.pause()
    assert worker.status is Status.PAUSING
    g.open()
    assert worker.wait_until_paused(WAIT)
    assert g.ended == [1]


def test_paused_worker_takes_no_new_jobs_until_resumed(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn)
    queue = worker.bind_queue()
    worker.pause()
    jobs = [queue.add(i) for i in range(3)]
    assert not jobs[0].wait(0.1)
    assert recorder.ran == []
    assert len(queue) == 3
    worker.resume()
    assert all(job.wait(WAIT) for job in jobs)
    assert recorder.ran == [0, 1, 2]


def test_stop_keeps_queued_jobs_and_start_runs_them(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    queue = worker.bind_queue()
    first = queue.add(0)
    assert g.wait_started(1)
    rest = [queue.add(i) for i in range(1, 6)]
    worker.stop()
    g.open()
    assert worker.wait_until_stopped(WAIT)
    assert first.is_closed()
    assert len(queue) == 5
    assert not any(job.is_closed() for job in rest)
    worker.start()
    assert all(job.wait(WAIT) for job in rest)
    assert g.ended == [0, 1, 2, 3, 4, 5]


def test_jobs_added_while_stopped_are_accepted_and_run_after_start(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn)
    queue = worker.bind_queue()
    assert worker.stop_and_wait(WAIT)
    job = queue.add("late")
    assert job is not None
    assert not job.wait(0.1)
    worker.start()
    assert job.wait(WAIT)
    assert recorder.ran == ["late"]


def test_restart_keeps_pending_jobs(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn)
    queue = worker.bind_queue()
    worker.pause()
    jobs = [queue.add(i) for i in range(5)]
    worker.restart()
    assert worker.is_active
    assert all(job.wait(WAIT) for job in jobs)
    assert recorder.ran == [0, 1, 2, 3, 4]


def test_restart_after_fifty_jobs_processes_fifty_more(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, 4)
    queue = worker.bind_queue()
    for i in range(50):
        queue.add(i)
    assert worker.wait(WAIT)
    worker.restart()
    assert worker.is_active
    for i in range(50, 100):
        queue.add(i)
    assert worker.wait(WAIT)
    assert sorted(recorder.ran) == list(range(100))
    assert worker.metrics.completed == 100


def test_restart_of_a_stopped_worker_makes_it_active() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.stop_and_wait(WAIT)
    worker.restart()
    assert worker.is_active


def test_concurrent_starts_one_wins_the_others_get_running_worker_error() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    barrier = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def start() -> None:
        barrier.wait()
        try:
            worker.start()
            result = "ok"
        except varmq.RunningWorkerError:
            result = "running"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=start) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["running"] * 19
    assert worker.is_active


def test_concurrent_resumes_all_succeed_and_leave_the_worker_idle() -> None:
    worker = varmq.new_worker(lambda job: None)
    worker.pause()
    barrier = threading.Barrier(10)
    errors: list[BaseException] = []

    def resume() -> None:
        barrier.wait()
        try:
            worker.resume()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=resume) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert worker.status is Status.IDLE


def test_concurrent_restarts_leave_the_worker_active(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn)
    queue = worker.bind_queue()
    barrier = threading.Barrier(5)
    unexpected: list[BaseException] = []

    def restart() -> None:
        barrier.wait()
        try:
            worker.restart()
        except varmq.RunningWorkerError:
            pass  # another caller restarted it first
        except BaseException as exc:
            unexpected.append(exc)

    threads = [threading.Thread(target=restart) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert unexpected == []
    assert worker.is_active
    job = queue.add("after")
    assert job.wait(WAIT)


def test_context_manager_drains_the_queues_and_stops(gate: Any) -> None:
    g = gate()
    leaving = threading.Event()

    def open_when_leaving() -> None:
        leaving.wait(WAIT)
        g.open()

    opener = threading.Thread(target=open_when_leaving)
    opener.start()
    with varmq.new_worker(g.fn, 2) as worker:
        queue = worker.bind_queue()
        jobs = [queue.add(i) for i in range(10)]
        assert g.wait_started(2)
        leaving.set()
    opener.join()
    assert worker.status is Status.STOPPED
    assert all(job.is_closed() for job in jobs)
    assert sorted(g.ended) == list(range(10))
    assert len(queue) == 0


def test_context_manager_stops_without_draining_when_the_block_raises(gate: Any, poll: Any) -> None:
    g = gate()

    def open_when_stopping() -> None:
        poll(lambda: worker.status is Status.STOPPING)
        g.open()

    with pytest.raises(RuntimeError, match="boom"), varmq.new_worker(g.fn) as worker:
        queue = worker.bind_queue()
        first = queue.add(0)
        rest = [queue.add(i) for i in range(1, 10)]
        assert g.wait_started(1)
        threading.Thread(target=open_when_stopping).start()
        raise RuntimeError("boom")
    assert worker.status is Status.STOPPED
    assert first.is_closed()
    assert g.ended == [0]
    assert len(queue) == 9
    assert not any(job.is_closed() for job in rest)


def test_context_manager_on_a_worker_never_started_leaves_it_initiated() -> None:
    with varmq.new_worker(lambda job: None, auto_run=False) as worker:
        pass
    assert worker.status is Status.INITIATED


def test_state_errors_are_varmq_errors_with_upstream_messages() -> None:
    cases = {
        varmq.RunningWorkerError: "worker is already running",
        varmq.NotRunningWorkerError: "worker is not running",
        varmq.WorkerPausedError: "worker is paused",
        varmq.WorkerPausingError: "worker is pausing",
        varmq.WorkerStoppedError: "worker is stopped",
        varmq.WorkerStoppingError: "worker is stopping",
    }
    for cls, message in cases.items():
        assert issubclass(cls, varmq.VarMQError)
        assert str(cls()) == message
    assert issubclass(varmq.SameConcurrencyError, varmq.VarMQError)
