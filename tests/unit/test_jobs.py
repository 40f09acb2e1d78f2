"""Job handles: ids, status, wait, close (cancel), err() and result()."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import varmq
from varmq import JobStatus

WAIT = 10.0
SHORT = 0.1


def test_job_function_receives_id_data_and_first_attempt() -> None:
    seen: list[tuple[str, Any, int]] = []
    worker = varmq.new_worker(lambda job: seen.append((job.id, job.data, job.attempt)))
    job = worker.bind_queue().add({"to": "a@example.com"}, job_id="j-1")
    assert job.wait(WAIT)
    assert seen == [("j-1", {"to": "a@example.com"}, 1)]


def test_job_id_is_empty_without_a_generator() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    job = worker.bind_queue().add(1)
    assert job.id == ""


def test_job_id_generator_names_every_job_and_an_explicit_id_wins() -> None:
    counter = itertools.count(1)
    calls: list[str] = []

    def next_id() -> str:
        value = f"id-{next(counter)}"
        calls.append(value)
        return value

    seen: list[str] = []
    worker = varmq.new_worker(lambda job: seen.append(job.id), job_id_generator=next_id)
    queue = worker.bind_queue()
    first = queue.add("a")
    second = queue.add("b")
    explicit = queue.add("c", job_id="mine")
    group = queue.add_all(["d", varmq.Item("e", id="item-id")])
    assert worker.wait(WAIT)
    assert (first.id, second.id, explicit.id) == ("id-1", "id-2", "mine")
    assert [job.id for job in group.jobs] == ["id-3", "item-id"]
    assert seen == ["id-1", "id-2", "mine", "id-3", "item-id"]


def test_job_id_generator_applies_to_every_worker_kind() -> None:
    for constructor in (varmq.new_err_worker, varmq.new_result_worker):
        worker = constructor(lambda job: None, auto_run=False, job_id_generator=lambda: "g")
        assert worker.bind_priority_queue().add(1, 1).id == "g"


def test_queued_job_is_not_closed_and_reads_queued() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    job = worker.bind_queue().add(1)
    assert job.status is JobStatus.QUEUED
    assert job.status == "Queued"
    assert not job.is_closed()


def test_running_job_reads_processing(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    job = worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert job.status is JobStatus.PROCESSING
    assert not job.is_closed()
    g.open()
    assert job.wait(WAIT)
    assert job.status is JobStatus.CLOSED


def test_wait_with_timeout_returns_false_while_the_job_runs_and_true_after(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    job = worker.bind_queue().add(1)
    assert g.wait_started(1)
    assert job.wait(timeout=SHORT) is False
    g.open()
    assert job.wait(timeout=WAIT) is True
    assert job.wait() is True


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_close_cancels_a_queued_job_and_it_never_runs(kind: str, recorder: Any) -> None:
    worker = getattr(varmq, kind)(recorder.fn, auto_run=False)
    queue = worker.bind_queue()
    cancelled = queue.add("cancelled")
    kept = queue.add("kept")
    assert cancelled.close() is None
    assert cancelled.is_closed()
    assert cancelled.status is JobStatus.CLOSED
    assert cancelled.wait(0) is True
    worker.start()
    assert kept.wait(WAIT)
    assert worker.wait(WAIT)
    assert recorder.ran == ["kept"]
    assert worker.metrics.completed == 1
    assert worker.metrics.submitted == 2


def test_cancelled_job_gives_job_cancelled_error_from_err_and_result() -> None:
    err_worker = varmq.new_err_worker(lambda job: None, auto_run=False)
    err_job = err_worker.bind_queue().add(1)
    err_job.close()
    assert isinstance(err_job.err(), varmq.JobCancelledError)

    result_worker = varmq.new_result_worker(lambda job: 1, auto_run=False)
    result_job = result_worker.bind_queue().add(1)
    result_job.close()
    with pytest.raises(varmq.JobCancelledError):
        result_job.result()
    assert isinstance(result_job.err(), varmq.JobCancelledError)


def test_close_on_a_running_job_raises_job_processing_error(gate: Any) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn)
    job = worker.bind_queue().add("running")
    assert g.wait_started(1)
    with pytest.raises(varmq.JobProcessingError):
        job.close()
    g.open()
    assert job.result(WAIT) == "running"


def test_close_on_a_finished_job_raises_job_already_closed_error() -> None:
    worker = varmq.new_worker(lambda job: None)
    job = worker.bind_queue().add(1)
    assert job.wait(WAIT)
    with pytest.raises(varmq.JobAlreadyClosedError):
        job.close()


def test_close_twice_raises_job_already_closed_error() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    job = worker.bind_queue().add(1)
    job.close()
    with pytest.raises(varmq.JobAlreadyClosedError):
        job.close()


def test_job_errors_are_varmq_errors() -> None:
    for cls in (varmq.JobProcessingError, varmq.JobAlreadyClosedError, varmq.JobCancelledError):
        assert issubclass(cls, varmq.VarMQError)


def test_err_is_none_for_a_job_that_returned() -> None:
    worker = varmq.new_err_worker(lambda job: None)
    job = worker.bind_queue().add(1)
    assert job.err(WAIT) is None


def test_err_is_the_exact_exception_the_job_raised() -> None:
    raised: list[BaseException] = []

    def fail(job: varmq.Job[str]) -> None:
        exc = ValueError(job.data)
        raised.append(exc)
        raise exc

    worker = varmq.new_err_worker(fail)
    job = worker.bind_queue().add("bad input")
    err = job.err(WAIT)
    assert err is raised[0]
    assert str(err) == "bad input"
    assert job.err() is err, "repeat calls give the same error"


def test_result_is_the_value_the_job_returned() -> None:
    worker = varmq.new_result_worker(lambda job: int(job.data) * 2)
    job = worker.bind_queue().add("42")
    assert job.result(WAIT) == 84
    assert job.result() == 84
    assert job.err() is None


def test_result_raises_the_exception_the_job_raised() -> None:
    worker = varmq.new_result_worker(lambda job: int(job.data) * 2)
    job = worker.bind_queue().add("not a number")
    with pytest.raises(ValueError, match="not a number"):
        job.result(WAIT)
    assert isinstance(job.err(), ValueError)


def test_result_and_err_raise_timeout_error_while_the_job_runs(gate: Any) -> None:
    g = gate()
    worker = varmq.new_result_worker(g.fn)
    job = worker.bind_queue().add("slow")
    assert g.wait_started(1)
    with pytest.raises(TimeoutError):
        job.result(timeout=SHORT)
    with pytest.raises(TimeoutError):
        job.err(timeout=SHORT)
    g.open()
    assert job.result(WAIT) == "slow"


def test_err_worker_err_raises_timeout_error_while_the_job_runs(gate: Any) -> None:
    g = gate()
    worker = varmq.new_err_worker(g.fn)
    job = worker.bind_queue().add("slow")
    assert g.wait_started(1)
    with pytest.raises(TimeoutError):
        job.err(timeout=SHORT)
    g.open()
    assert job.err(WAIT) is None


def test_a_job_exception_on_a_plain_worker_counts_failed_and_reaches_errs() -> None:
    worker = varmq.new_worker(lambda job: 1 / 0)
    job = worker.bind_queue().add(1)
    assert job.wait(WAIT)
    assert worker.wait(WAIT)
    assert worker.metrics.failed == 1
    assert worker.metrics.successful == 0
    assert isinstance(worker.errs().get(timeout=WAIT), ZeroDivisionError)


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_a_raising_job_does_not_stop_the_jobs_after_it(kind: str) -> None:
    def fn(job: varmq.Job[int]) -> int:
        if job.data == 0:
            raise RuntimeError("first fails")
        return job.data

    worker = getattr(varmq, kind)(fn)
    queue = worker.bind_queue()
    jobs = [queue.add(i) for i in range(5)]
    assert all(job.wait(WAIT) for job in jobs)
    assert worker.wait(WAIT)
    assert worker.metrics.failed == 1
    assert worker.metrics.successful == 4
    assert worker.is_active


def test_job_status_values_are_the_upstream_strings() -> None:
    # Upstream's "Finished" is never a state of a handle here (it closes at once); stored
    # envelopes that say "Finished" still decode.
    assert [s.value for s in JobStatus] == ["Created", "Queued", "Processing", "Closed"]
    assert str(JobStatus.QUEUED) == "Queued"
