"""Metrics, errs(), the error handler, and the func/err_func/result_func helpers."""

from __future__ import annotations

import queue as queue_module
import threading
from typing import Any

import pytest

import varmq

WAIT = 10.0


def drain(errs: queue_module.Queue[BaseException]) -> list[BaseException]:
    out = []
    while True:
        try:
            out.append(errs.get_nowait())
        except queue_module.Empty:
            return out


def failing(job: varmq.Job[Any]) -> None:
    if job.data.startswith("bad"):
        raise ValueError(job.data)


def test_metrics_start_at_zero() -> None:
    worker = varmq.new_worker(lambda job: None)
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful, m.failed) == (0, 0, 0, 0)


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_metrics_count_submitted_completed_successful_and_failed(kind: str) -> None:
    worker = getattr(varmq, kind)(failing, 2)
    queue = worker.bind_queue()
    for data in ["ok1", "bad1", "ok2"]:
        queue.add(data)
    queue.add_all(["ok3", "bad2"])
    assert worker.wait(WAIT)
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful, m.failed) == (5, 5, 3, 2)


def test_metrics_do_not_count_refused_adds_or_cancelled_jobs() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(capacity=2)
    cancelled = queue.add("a")
    queue.add("b")
    assert queue.add("refused") is None
    cancelled.close()
    worker.start()
    assert worker.wait(WAIT)
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful, m.failed) == (2, 1, 1, 0)


def test_metrics_reset_sets_every_counter_to_zero() -> None:
    worker = varmq.new_worker(failing)
    queue = worker.bind_queue()
    queue.add("ok")
    queue.add("bad")
    assert worker.wait(WAIT)
    worker.metrics.reset()
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful, m.failed) == (0, 0, 0, 0)
    queue.add("ok")
    assert worker.wait(WAIT)
    assert (m.submitted, m.completed, m.successful) == (1, 1, 1)


def test_metrics_are_exact_under_concurrent_adds() -> None:
    worker = varmq.new_worker(lambda job: None, 4)
    queue = worker.bind_queue()

    def produce() -> None:
        for i in range(500):
            queue.add(i)

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert worker.wait(WAIT)
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful) == (2000, 2000, 2000)


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_job_exception_reaches_errs_and_the_error_handler(kind: str) -> None:
    handled: list[tuple[Any, BaseException]] = []
    raised: list[BaseException] = []

    def fn(job: varmq.Job[str]) -> None:
        exc = RuntimeError(job.data)
        raised.append(exc)
        raise exc

    worker = getattr(varmq, kind)(fn, error_handler=lambda w, e: handled.append((w, e)))
    job = worker.bind_queue().add("boom")
    assert job.wait(WAIT)
    assert worker.wait(WAIT)
    assert handled == [(worker, raised[0])]
    assert worker.errs().get(timeout=WAIT) is raised[0]
    if kind == "new_err_worker":
        assert job.err() is raised[0]
    if kind == "new_result_worker":
        with pytest.raises(RuntimeError) as info:
            job.result()
        assert info.value is raised[0]


def test_errs_without_a_handler_still_gets_the_error() -> None:
    worker = varmq.new_err_worker(failing)
    job = worker.bind_queue().add("bad!")
    assert str(job.err(WAIT)) == "bad!"
    assert str(worker.errs().get(timeout=WAIT)) == "bad!"


def test_errs_is_a_queue_in_report_order() -> None:
    worker = varmq.new_worker(failing, 1)
    queue = worker.bind_queue()
    for i in range(3):
        queue.add(f"bad{i}")
    assert worker.wait(WAIT)
    errs = worker.errs()
    assert isinstance(errs, queue_module.Queue)
    assert [str(e) for e in drain(errs)] == ["bad0", "bad1", "bad2"]


def test_errs_is_bounded_and_drops_the_oldest() -> None:
    worker = varmq.new_worker(failing, 1, max_errors=3)
    queue = worker.bind_queue()
    for i in range(7):
        queue.add(f"bad{i}")
    assert worker.wait(WAIT)
    assert worker.errs().qsize() == 3
    assert [str(e) for e in drain(worker.errs())] == ["bad4", "bad5", "bad6"]
    assert worker.metrics.failed == 7


def test_error_handler_is_called_for_every_error_even_when_errs_is_full() -> None:
    handled: list[str] = []
    worker = varmq.new_worker(
        failing, 1, max_errors=1, error_handler=lambda w, e: handled.append(str(e))
    )
    queue = worker.bind_queue()
    for i in range(5):
        queue.add(f"bad{i}")
    assert worker.wait(WAIT)
    assert handled == [f"bad{i}" for i in range(5)]


def test_an_exception_raised_in_the_error_handler_is_contained() -> None:
    handled: list[str] = []

    def handler(worker: Any, exc: BaseException) -> None:
        handled.append(str(exc))
        raise RuntimeError("handler is broken")

    ran: list[str] = []

    def fn(job: varmq.Job[str]) -> None:
        ran.append(job.data)
        failing(job)

    worker = varmq.new_worker(fn, 1, error_handler=handler)
    queue = worker.bind_queue()
    jobs = [queue.add(data) for data in ["bad1", "ok1", "bad2", "ok2"]]
    assert all(job.wait(WAIT) for job in jobs)
    assert worker.wait(WAIT)
    assert ran == ["bad1", "ok1", "bad2", "ok2"]
    assert handled == ["bad1", "bad2"]
    assert worker.is_active
    assert [str(e) for e in drain(worker.errs())] == ["bad1", "bad2"]
    m = worker.metrics
    assert (m.completed, m.successful, m.failed) == (4, 2, 2)
    later = queue.add("ok3")
    assert later.wait(WAIT)


def test_func_runs_the_submitted_callable() -> None:
    called = threading.Event()
    worker = varmq.new_worker(varmq.func())
    job = worker.bind_queue().add(called.set)
    assert job.wait(WAIT)
    assert called.is_set()
    assert worker.wait(WAIT)
    assert worker.metrics.successful == 1


def test_func_with_no_callable_fails_the_job_and_the_worker_keeps_running() -> None:
    worker = varmq.new_worker(varmq.func())
    queue = worker.bind_queue()
    queue.add(None)
    assert worker.wait(WAIT)
    assert worker.metrics.failed == 1
    assert "the job's data is None" in str(worker.errs().get(timeout=WAIT))
    ok = queue.add(lambda: None)
    assert ok.wait(WAIT)


def test_err_func_gives_the_callables_exact_exception() -> None:
    error = KeyError("missing")

    def raise_it() -> None:
        raise error

    worker = varmq.new_err_worker(varmq.err_func())
    queue = worker.bind_queue()
    bad = queue.add(raise_it)
    good = queue.add(lambda: None)
    assert bad.err(WAIT) is error
    assert good.err(WAIT) is None
    assert worker.wait(WAIT)
    assert (worker.metrics.successful, worker.metrics.failed) == (1, 1)


def test_err_func_with_no_callable_gives_an_error() -> None:
    worker = varmq.new_err_worker(varmq.err_func())
    job = worker.bind_queue().add(None)
    assert "the job's data is None" in str(job.err(WAIT))


@pytest.mark.parametrize("value", ["text", 42, {"a": [1, 2]}, (1, "x")])
def test_result_func_gives_the_callables_value(value: Any) -> None:
    worker = varmq.new_result_worker(varmq.result_func())
    job = worker.bind_queue().add(lambda: value)
    assert job.result(WAIT) == value


def test_result_func_raises_the_callables_exception() -> None:
    def fail() -> int:
        raise ArithmeticError("no")

    worker = varmq.new_result_worker(varmq.result_func())
    job = worker.bind_queue().add(fail)
    with pytest.raises(ArithmeticError, match="no"):
        job.result(WAIT)


def test_result_func_with_no_callable_raises_an_error() -> None:
    worker = varmq.new_result_worker(varmq.result_func())
    job = worker.bind_queue().add(None)
    with pytest.raises(Exception, match=r"the job.s data is None"):
        job.result(WAIT)


def test_every_public_error_is_exported_from_varmq_and_varmq_errors() -> None:
    import varmq.errors

    for name in varmq.errors.__all__:
        assert getattr(varmq, name) is getattr(varmq.errors, name)
        assert issubclass(getattr(varmq, name), varmq.VarMQError)


def test_foreign_item_in_a_callers_queue_is_reported_as_failed_to_cast_and_skipped() -> None:
    storage = varmq.MemoryQueue()
    ran: list[Any] = []
    handled: list[BaseException] = []
    worker = varmq.new_worker(
        lambda job: ran.append(job.data),
        auto_run=False,
        error_handler=lambda w, e: handled.append(e),
    )
    queue = worker.with_queue(storage)
    storage.enqueue(object())
    job = queue.add("after")
    worker.start()
    assert job.wait(WAIT)
    assert worker.wait(WAIT)
    assert ran == ["after"]
    assert len(storage) == 0
    assert len(handled) == 1 and isinstance(handled[0], varmq.FailedToCastJobError)
    assert isinstance(worker.errs().get(timeout=WAIT), varmq.FailedToCastJobError)
    assert worker.metrics.completed == 1


def test_envelope_bytes_in_a_callers_queue_run_as_a_job() -> None:
    storage = varmq.MemoryQueue()
    seen: list[tuple[str, Any]] = []
    worker = varmq.new_worker(lambda job: seen.append((job.id, job.data)), auto_run=False)
    worker.with_queue(storage)
    storage.enqueue(b'{"id":"env-1","status":"Created","data":{"n":5}}')
    worker.start()
    assert worker.wait(WAIT)
    assert seen == [("env-1", {"n": 5})]
    assert len(storage) == 0


def test_undecodable_bytes_in_a_callers_queue_are_reported_and_skipped() -> None:
    storage = varmq.MemoryPriorityQueue()
    ran: list[Any] = []
    worker = varmq.new_worker(lambda job: ran.append(job.data), auto_run=False)
    queue = worker.with_priority_queue(storage)
    storage.enqueue(b"{not json", 0)
    queue.add("after", 1)
    worker.start()
    assert worker.wait(WAIT)
    assert ran == ["after"]
    assert len(storage) == 0
    assert isinstance(worker.errs().get(timeout=WAIT), varmq.ParseJobError)
